"""Data-parallel trials: shards, cross-rank metric reduction, admission, the two measured
deadlocks (FIELD-NOTES), and recovery from a killed worker."""

from __future__ import annotations

import json
import os
import re
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


# ----------------------------------------------------------------------------- FSDP
FSDP_ARCH = {"family": "resnet", "width": 8, "depth": 1, "stages": 2}  # convs and BatchNorm
#: DDP and FSDP compute the same updates; only the order of floating-point sums differs
#: (all-reduce against reduce-scatter), so their losses agree to float32 rounding
LOSS_RTOL = 1e-4


def _digits(n: int, seed: int):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    idx = np.random.default_rng(seed).permutation(len(y))[:n]
    return (torch.tensor(X[idx] / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8),
            torch.tensor(y[idx], dtype=torch.long))


def _rank_fit(rank, world, path, strategy, data, out_dir, out):
    """One rank: 3 epochs of ``strategy``, a checkpoint, a restore, one epoch more."""
    import torch.distributed as dist

    from automl.parallel import local_params, wrap
    from automl.space import TrialConfig
    from automl.train import TrainState, fit

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    cfg = TrialConfig(arch=dict(FSDP_ARCH), optimizer="adam", lr=3e-3, batch_size=64,
                      epochs=4, weight_decay=1e-4, init="kaiming", seed=3)
    (X, y), val = data

    def new_state():
        return TrainState.create(cfg, (1, 8, 8), 10, len(y),
                                 wrap=lambda m: wrap(m, strategy, "cpu"))

    state = new_state()
    rows: list = []
    fit(state, (X, y), val, on_epoch=lambda st, m: rows.append(m), epochs=3,
        shard=Shard(rank, world))
    ckpt = state.checkpoint({"val_loss": rows[-1]["val_loss"]})  # a collective under FSDP
    file = out_dir / f"{strategy}.pt"
    if rank == 0:
        torch.save(ckpt, file)
    dist.barrier()
    again = new_state()
    again.restore(torch.load(file, weights_only=True))
    more = [fit(s, (X, y), val, epochs=4, shard=Shard(rank, world)) for s in (state, again)]
    out[(strategy, rank)] = {"local": local_params(state.model), "rows": rows,
                             "more": [m["train_loss"] for m in more]}
    dist.destroy_process_group()


def test_fsdp_shards_trains_like_ddp_and_saves_a_plain_checkpoint(tmp_path):
    """FSDP2 on CPU with gloo, 2 ranks: each holds half the parameters; over 3 epochs its
    losses match DDP's within LOSS_RTOL; its checkpoint restores (training continues as
    if never stopped), has DDP's format, loads into a plain model and exports to ONNX."""
    from automl.compress.onnx_export import export_onnx
    from automl.models import build_model
    from automl.train import load_checkpoint

    data = (_digits(320, 0), _digits(97, 1))  # 97 rows: the ranks' slices are uneven
    with mp.Manager() as manager:
        out = manager.dict()
        for strategy in ("ddp", "fsdp"):
            mp.spawn(_rank_fit, args=(2, tmp_path / f"pg-{strategy}", strategy, data, tmp_path,
                                      out), nprocs=2, join=True)
        out = dict(out)
    total = sum(p.numel() for p in build_model(FSDP_ARCH, (1, 8, 8), 10).parameters())
    assert out[("ddp", 0)]["local"] == out[("ddp", 1)]["local"] == total
    shards = [out[("fsdp", r)]["local"] for r in (0, 1)]
    assert sum(shards) == total and all(abs(n - total / 2) <= 0.05 * total for n in shards)
    for key in ("train_loss", "val_loss", "val_accuracy"):
        ddp = [r[key] for r in out[("ddp", 0)]["rows"]]
        fsdp = [r[key] for r in out[("fsdp", 0)]["rows"]]
        assert fsdp == pytest.approx(ddp, rel=LOSS_RTOL), key
    assert out[("ddp", 0)]["rows"][-1]["train_loss"] < out[("ddp", 0)]["rows"][0]["train_loss"]
    for strategy in ("ddp", "fsdp"):  # restored: the 4th epoch as if training never stopped
        run_on, restored = out[(strategy, 0)]["more"]
        assert restored == pytest.approx(run_on, rel=1e-6)
    ddp_ckpt = torch.load(tmp_path / "ddp.pt", weights_only=True)
    fsdp_ckpt = torch.load(tmp_path / "fsdp.pt", weights_only=True)
    assert set(fsdp_ckpt) == set(ddp_ckpt)
    assert set(fsdp_ckpt["model"]) == set(ddp_ckpt["model"])
    assert set(fsdp_ckpt["optimizer"]["state"]) == set(ddp_ckpt["optimizer"]["state"])
    assert [g["params"] for g in fsdp_ckpt["optimizer"]["param_groups"]] == \
        [g["params"] for g in ddp_ckpt["optimizer"]["param_groups"]]
    # what CV, refit, compression and the registry do: a plain model from the checkpoint
    plain, _ = load_checkpoint(tmp_path / "fsdp.pt")
    reference, _ = load_checkpoint(tmp_path / "ddp.pt")
    Xv = data[1][0]
    with torch.no_grad():
        assert torch.allclose(plain(Xv), reference(Xv), atol=1e-3)
    import onnxruntime as ort

    onnx = export_onnx(plain, tmp_path / "fsdp.onnx", Xv[:4])
    got = ort.InferenceSession(str(onnx)).run(None, {"input": Xv[:5].numpy()})[0]
    with torch.no_grad():
        assert np.allclose(got, plain(Xv[:5]).numpy(), atol=1e-4)


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


@pytest.mark.timeout(400)
def test_fsdp_sweep_trains_and_its_checkpoint_feeds_the_job(ray4, tmp_path):
    """``strategy: fsdp`` end to end on Ray: the trial trains on 2 sharded ranks, its
    checkpoint is a plain model's (loaded without FSDP), and cross-validation and the
    refit run from it as from a DDP trial's."""
    from automl.train import load_checkpoint

    exp = load_spec(write_spec(tmp_path, DDP.replace("TRIALS", "1").replace("EPOCHS", "2")),
                    {"resources.strategy": "fsdp"})
    summary = _run(exp, tmp_path / "run", timeout_s=300)
    assert summary["trials"]["completed"] == 1 and summary["trials"]["failed"] == 0
    rows = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").open()]
    rows = [r for r in rows if "event" not in r]
    assert [r["epoch"] for r in rows] == [1, 2] and all(r["world_size"] == 2 for r in rows)
    assert "latency_ms" not in rows[0]  # FSDP trials measure no costs
    assert rows[0]["start_train_s"] > 0 and rows[0]["setup_s"] > 0  # the start-up breakdown
    ckpt = next((tmp_path / "run" / "checkpoints" / "trial_0").glob("epoch_*.pt"))
    model, saved = load_checkpoint(ckpt)
    assert saved["epoch"] == 2 and not any(hasattr(p, "to_local") for p in model.parameters())
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


@pytest.mark.timeout(300)
def test_trial_whose_workers_get_no_placement_fails_in_one_line(ray4, tmp_path):
    """Something else holds the CPUs (a placement group, as a leaked one would): the
    trial's workers wait ``start_timeout_s`` (not forever), the trial fails with one line
    naming what it waited for, and the sweep ends cleanly."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from automl.errors import RunError
    from automl.pipeline import run_main_job

    exp = load_spec(write_spec(tmp_path, DDP.replace("TRIALS", "1").replace("EPOCHS", "1")),
                    {"resources.start_timeout_s": 4, "resources.max_failures": 0})
    blocker = placement_group([{"CPU": 3}])
    assert blocker.wait(60)
    try:
        t0 = time.monotonic()
        with pytest.raises(RunError, match="no trial finished"):
            run_main_job(exp, tmp_path / "run", console=Console(quiet=True))
        assert time.monotonic() - t0 < 120
    finally:
        remove_placement_group(blocker)
    ends = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").open()]
    ends = [r for r in ends if r.get("event") == "end"]
    assert len(ends) == 1 and ends[0]["state"] == "failed"
    reason = ends[0]["reason"]
    assert "\n" not in reason
    assert re.fullmatch(r"resources: trial 0: its 2 workers \(CPU=1, memory=768MiB each\) got "
                        r"no placement in 4s; free: CPU=0\.99, memory=\d+MiB of CPU=4, "
                        r"memory=\d+MiB \(.*raise resources\.start_timeout_s\)", reason), reason
    deadline = time.monotonic() + 30  # nothing of the trial is left once ours is freed
    while ray.available_resources().get("CPU", 0) < 3.99 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) >= 3.99


# --------------------------------------------------------- a cluster without the dashboard
HANG = """
name: nodash
model: {family: mlp, mlp: {depth: 1, width: {type: categorical, choices: [16, 32]}}}
training: {optimizer: adam, lr: {type: float, low: 3e-3, high: 1e-2, log: true},
           batch_size: 64, epochs: 2, init: default}
search: {num_samples: 6, seed: 0, sampler: random}
scheduler: {type: asha, grace_period: 1, reduction_factor: 2, max_epochs: 2}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none}
resources: {workers_per_trial: 2, cpus_per_worker: 0.5, memory_per_worker_mb: 256}
"""


@pytest.mark.timeout(240)
def test_cluster_without_dashboard_refuses_data_parallel_sweep_in_one_line(tmp_path):
    """Issue 42: on a ``ray start --include-dashboard=false`` cluster, Train's placement-
    group cleanup has no State API and a 6-trial data-parallel sweep hung after 2 trials.
    It is refused at admission: one line, exit 3, well within 60 s, nothing written."""
    import subprocess
    import sys
    from pathlib import Path

    from _rayhead import start_head

    head = start_head(num_cpus=2, dashboard=False)
    try:
        spec = write_spec(tmp_path, HANG)
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        env.pop("RAY_API_SERVER_ADDRESS", None)
        t0 = time.monotonic()
        res = subprocess.run([str(Path(sys.executable).parent / "automl"), "search", str(spec),
                              "--address", head.gcs_address, "--output", str(tmp_path / "runs")],
                             env=env, capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        head.stop()
    assert res.returncode == 3, res.stdout + res.stderr
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, res.stderr
    assert re.search(r"data-parallel trials \(resources\.workers_per_trial: 2\) need the "
                     r"cluster's State API.*runs without the dashboard.*"
                     r"`ray start --head --include-dashboard=true`", lines[0]), lines[0]
    assert elapsed < 60
    assert not (tmp_path / "runs" / "nodash").exists()
