"""Data-parallel trials: shards, cross-rank metric reduction, admission, the two measured
deadlocks (FIELD-NOTES), and recovery from a killed worker."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from conftest import write_spec
from rich.console import Console

from automl.cluster import admit_trials
from automl.errors import ResourceError, SpecError
from automl.spec import ResourcesSpec, load_spec
from automl.train import Shard, batches, evaluate

DDP = """
name: ddp
model: {family: mlp, mlp: {depth: 1, width: {type: categorical, choices: [32, 64]}}}
training:
  optimizer: adam
  lr: {type: float, low: 3e-3, high: 1e-2, log: true}
  batch_size: 64
  epochs: EPOCHS
  init: default
  checkpoint_every: 1
search: {num_samples: TRIALS, seed: 0, sampler: random}
scheduler: {type: none}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none}
resources: {workers_per_trial: 2, cpus_per_worker: 1, max_failures: 2}
"""


def _spec(tmp_path, trials=2, epochs=2):
    text = DDP.replace("TRIALS", str(trials)).replace("EPOCHS", str(epochs))
    return load_spec(write_spec(tmp_path, text))


# ----------------------------------------------------------------------------- pure
def test_shards_are_disjoint_equal_and_cover_the_data():
    n, world = 103, 2
    per_rank = [torch.cat(list(batches(n, 32, seed=5, shard=Shard(r, world)))) for r in range(2)]
    assert len(per_rank[0]) == len(per_rank[1]) == 52  # padded to equal length
    union = set(per_rank[0].tolist()) | set(per_rank[1].tolist())
    assert union == set(range(n))
    assert len(set(per_rank[0].tolist()) & set(per_rank[1].tolist())) <= 1  # only the pad
    # per-rank batches are batch_size // world so the global batch stays 32
    assert max(len(b) for b in batches(n, 32, seed=5, shard=Shard(0, world))) == 16


def test_ddp_admission_counts_driver_and_every_worker():
    res = ResourcesSpec(workers_per_trial=2, cpus_per_worker=1)
    # FIELD-NOTES deadlock: 2 trials x 2 workers on 4 CPUs; only one trial fits with its driver
    gib = 2.0**30
    assert admit_trials(res, nodes=[{"CPU": 4.0, "memory": 8 * gib}]).max_concurrent == 1
    assert admit_trials(res, nodes=[{"CPU": 8.0, "memory": 8 * gib}]).max_concurrent == 3
    # memory bounds concurrency too: 2.5 GiB holds one trial of 2 workers x 768 MiB, not two
    assert admit_trials(res, nodes=[{"CPU": 8.0, "memory": 2.5 * gib}]).max_concurrent == 1
    with pytest.raises(ResourceError, match=r"needs CPU=6\.01, memory=2304MiB in all.*largest node has CPU=4"):
        admit_trials(ResourcesSpec(workers_per_trial=3, cpus_per_worker=2),
                     nodes=[{"CPU": 4.0, "memory": 8 * gib}])
    with pytest.raises(ResourceError, match=r"GPU=2.*cluster CPU=16, GPU=0"):
        admit_trials(ResourcesSpec(workers_per_trial=2, gpus_per_worker=1),
                     nodes=[{"CPU": 16.0, "memory": 8 * gib}])


@pytest.mark.parametrize(("kw", "pattern"), [
    ({"workers_per_trial": 2, "gpus_per_worker": 0.5}, "fractional"),
    ({"precision": "bf16"}, "autocast needs GPUs"),
    ({"strategy": "fsdp"}, "fsdp needs GPUs"),
])
def test_device_requests_refused_clearly(tmp_path, kw, pattern):
    body = ", ".join(f"{k}: {v}" for k, v in kw.items())
    with pytest.raises(SpecError, match=pattern):
        load_spec(write_spec(tmp_path, f"resources: {{{body}}}\n"))


def _rank_eval(rank, world, path, X, y, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    out[rank] = evaluate(model, X, y, Shard(rank, world))
    dist.destroy_process_group()


def test_validation_metrics_are_reduced_over_all_ranks(tmp_path):
    g = torch.Generator().manual_seed(1)
    X = torch.rand(101, 1, 8, 8, generator=g)
    y = torch.randint(0, 10, (101,), generator=g)
    torch.manual_seed(0)
    single = evaluate(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)), X, y)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank_eval, args=(2, tmp_path / "pg", X, y, out), nprocs=2, join=True)
        results = dict(out)
    for rank in (0, 1):
        for key in ("accuracy", "loss", "f1"):
            assert results[rank][key] == pytest.approx(single[key], abs=1e-6)
    # rank 0's slice alone would give a different number
    half = evaluate(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)), X[:51], y[:51])
    assert half["loss"] != pytest.approx(single["loss"])


# ----------------------------------------------------------------------------- on Ray
@pytest.fixture(scope="module")
def ray4():
    """4 logical CPUs, started the way the CLI starts Ray (dashboard on: Train's
    placement-group cleanup needs its State API, FIELD-NOTES deadlock 1)."""
    import ray

    from automl import cluster as runtime

    if ray.is_initialized():
        ray.shutdown()
    handle = runtime.connect(num_cpus=4, object_store_mb=200, dashboard_port=0)
    yield handle
    runtime.shutdown(handle)


def _run(exp, run_dir, timeout_s):
    """Run the main job in a thread; fail (not hang) past ``timeout_s``."""
    from automl.pipeline import run_main_job

    box: dict = {}

    def target():
        try:
            box["summary"] = run_main_job(exp, run_dir, console=Console(quiet=True))
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"sweep did not finish in {timeout_s}s (deadlock?)"
    if "error" in box:
        raise box["error"]
    return box["summary"]


@pytest.mark.timeout(400)
def test_ddp_sweep_runs_trials_back_to_back_without_deadlock(ray4, tmp_path):
    # deadlock 1: the second trial's worker group must start (dashboard is on);
    # deadlock 2: 2 workers x 1 CPU on 4 CPUs -> admission runs one trial at a time.
    # Two trials are enough for both: the second's worker group starts after the first's.
    exp = _spec(tmp_path, trials=2, epochs=2)
    summary = _run(exp, tmp_path / "run", timeout_s=300)
    assert summary["search"]["max_concurrent"] == 1
    assert summary["trials"]["total"] == 2 and summary["trials"]["failed"] == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "trials.jsonl").open()]
    rows = [r for r in rows if "event" not in r]  # the epoch reports
    assert len(rows) == 4 and all(r["world_size"] == 2 for r in rows)
    assert summary["best"]["val"]["val_accuracy"] > 0.5
    assert 0.5 < summary["test"]["accuracy"] <= 1.0


def test_infeasible_ddp_request_fails_within_seconds(ray4, tmp_path):
    from automl.pipeline import run_main_job

    exp = load_spec(write_spec(tmp_path, DDP.replace("TRIALS", "2").replace("EPOCHS", "2")),
                    {"resources.workers_per_trial": 3, "resources.cpus_per_worker": 2})
    t0 = time.monotonic()
    with pytest.raises(ResourceError, match=r"a trial needs CPU=6\.01, memory=2304MiB in all"):
        run_main_job(exp, tmp_path / "run", console=Console(quiet=True))
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(400)
def test_killed_worker_resumes_from_its_last_checkpoint(ray4, tmp_path):
    from ray.util.state import list_actors

    exp = _spec(tmp_path, trials=1, epochs=12)
    run_dir = tmp_path / "run"
    killed: list[int] = []

    def killer():
        deadline = time.monotonic() + 240
        log = run_dir / "trials.jsonl"
        while time.monotonic() < deadline and not killed:
            rows = [json.loads(x) for x in log.open()] if log.exists() else []
            rows = [r for r in rows if "epoch" in r]
            if rows and rows[-1]["epoch"] >= 3:
                workers = [a for a in list_actors(filters=[("state", "=", "ALIVE")])
                           if a.class_name == "RayTrainWorker"]
                if workers:
                    os.kill(workers[-1].pid, signal.SIGKILL)
                    killed.append(workers[-1].pid)
                    return
            time.sleep(0.2)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    summary = _run(exp, run_dir, timeout_s=300)
    t.join(5)
    assert killed, "the test never saw the trial reach epoch 3"
    assert summary["trials"]["completed"] == 1 and summary["trials"]["failed"] == 0
    rows = [json.loads(x) for x in (run_dir / "trials.jsonl").open()]
    rows = [r for r in rows if "event" not in r]  # the epoch reports
    restored = [r for r in rows if r.get("restored_from_epoch", 0) > 0]
    assert restored, "the worker group never restarted from a checkpoint"
    first = restored[0]
    # the restarted group reports the checkpoint's epoch again (not trained again), then
    # trains on from there: resumed where the last checkpoint left off, not from scratch
    assert first["epoch"] == first["restored_from_epoch"] >= 1
    assert rows[rows.index(first) + 1]["epoch"] == first["epoch"] + 1
    assert [r["epoch"] for r in rows].count(1) == 1
    assert rows[-1]["epoch"] == 12
    assert np.isfinite(summary["test"]["accuracy"])
