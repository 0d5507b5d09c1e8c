"""A sweep on an autoscaling cluster, with Ray's fake multi-node provider: the head has
no CPUs and no workers, the v1 autoscaler adds worker nodes (local processes, 1 logical
CPU each, at most 2) when trials ask for them, the sweep completes, and the idle nodes
are removed. Admission counts the nodes the autoscaler may add, and still refuses at once
a trial no node type can hold."""

from __future__ import annotations

import threading
import time

import pytest
from _rayhead import start_head
from conftest import write_spec
from rich.console import Console

from automl.cluster import _autoscale as autoscale
from automl.cluster import admit_trials
from automl.errors import ResourceError
from automl.pipeline import choose_run_dir, run_main_job
from automl.spec import ResourcesSpec, load_spec

WORKERS = {"cpu_node": {"resources": {"CPU": 1}, "min_workers": 0, "max_workers": 2},
           "idle_timeout_minutes": 0.1}

SPEC = """
name: autoscaled
data: {source: wine}
model:
  family: mlp
  mlp: {depth: 1, width: {type: categorical, choices: [16, 32]}}
training:
  lr: {type: float, low: 1e-3, high: 1e-2, log: true}
  batch_size: 32
  epochs: 2
search: {num_samples: 4, seed: 0, n_startup_trials: 2}
scheduler: {type: none}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none, tensorboard: false}
registry: {enabled: false}
resources: {cpus_per_worker: 1}
output: {shared: true}   # every "node" here shares this machine's filesystem
"""


def test_capacity_of_fixed_and_autoscaling_clusters():
    gib = 2.0**30
    head = {"CPU": 0.0, "memory": 8 * gib, "node:__internal_head__": 1.0}
    cpu = {"CPU": 16.0, "memory": 40 * gib}  # as `ray up` fills in an AWS type's memory
    cfg = {"head_node_type": "head", "max_workers": 3, "available_node_types": {
        "head": {"resources": {"CPU": 0}, "max_workers": 0},
        "cpu": {"resources": cpu, "max_workers": 8},
        "gpu": {"resources": {"CPU": 8, "GPU": 1}, "max_workers": 4},
        "auto": {"resources": {}, "max_workers": 2}}}  # resources unknown until launched
    scaling = autoscale.from_cluster_config(cfg, "aws.yaml")
    assert [t.name for t in scaling.types] == ["cpu", "gpu"] and scaling.max_workers == 3
    nodes = autoscale.capacity([head], scaling)
    assert nodes == [head, cpu, cpu, cpu]  # largest first, at most max_workers
    assert autoscale.capacity([head], None) == [head]  # fixed cluster: alive nodes only
    spec = ResourcesSpec(cpus_per_worker=4)
    assert admit_trials(spec, nodes=nodes).max_concurrent == 12
    with pytest.raises(ResourceError, match="needs CPU=32, memory=768MiB on one node"):
        admit_trials(ResourcesSpec(cpus_per_worker=32), nodes=nodes)
    manual = [head] + [cpu] * 5  # more workers than the autoscaler's cap
    assert autoscale.capacity(manual, scaling) == manual
    # a resource no node type declares is not requested: no node would be added for it
    fake = autoscale.from_cluster_config({"available_node_types": {
        "w": {"resources": {"CPU": 1}, "max_workers": 2}}}, "fake")
    bundle = {"CPU": 1.0, "memory": 768 * 2.0**20}
    assert autoscale.drop_undeclared(bundle, fake) == {"CPU": 1.0}
    assert autoscale.drop_undeclared(bundle, scaling) == bundle
    assert autoscale.drop_undeclared(bundle, None) == bundle


def test_node_types_from_the_environment(monkeypatch, tmp_path):
    inline = '{"available_node_types": {"cpu": {"resources": {"CPU": 4}, "max_workers": 3}}}'
    monkeypatch.setenv(autoscale.ENV, inline)
    scaling = autoscale._from_env()
    assert scaling.source == "$AUTOML_AUTOSCALING_CONFIG" and scaling.max_workers == 3
    assert scaling.types[0].resources == {"CPU": 4.0}
    path = tmp_path / "cluster.yaml"
    path.write_text("available_node_types:\n  gpu: {resources: {CPU: 8, GPU: 1}, "
                    "max_workers: 2}\n")
    monkeypatch.setenv(autoscale.ENV, str(path))
    assert autoscale._from_env().types[0].resources == {"CPU": 8.0, "GPU": 1.0}
    monkeypatch.setenv(autoscale.ENV, str(tmp_path / "missing.yaml"))
    assert autoscale._from_env() is None  # unreadable: a warning, and a fixed cluster


@pytest.fixture(scope="module")
def cluster():
    import ray

    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_AUTH_MODE", raising=False)
        mp.delenv("RAY_ADDRESS", raising=False)
        head = start_head(num_cpus=0, autoscaling=WORKERS)
        try:
            yield head
        finally:
            if ray.is_initialized():
                ray.shutdown()
            head.stop()


def _workers() -> int:
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive") and n["Resources"].get("CPU", 0) > 0)


def test_autoscaler_adds_nodes_for_the_sweep_and_removes_them_when_idle(cluster, tmp_path):
    import ray

    from automl import cluster as runtime

    runtime.connect(cluster.gcs_address)
    assert _workers() == 0
    scaling = autoscale.detect()
    assert scaling is not None and scaling.source.endswith("autoscaling.json")
    assert [(t.name, t.resources, t.max_workers) for t in scaling.types] == [
        ("cpu_node", {"CPU": 1.0}, 2)]
    admission = admit_trials(ResourcesSpec(cpus_per_worker=1))
    assert admission.max_concurrent == 2 and admission.nodes == 3
    t0 = time.monotonic()
    with pytest.raises(ResourceError, match=r"needs CPU=2 on one node, but the largest node has "
                                            r"CPU=1"):
        admit_trials(ResourcesSpec(cpus_per_worker=2))  # no node type can ever hold it
    assert time.monotonic() - t0 < 5

    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            seen.append((time.monotonic(), _workers()))
            stop.wait(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    exp = load_spec(write_spec(tmp_path, SPEC))
    start = time.monotonic()
    watcher.start()
    try:
        summary = run_main_job(exp, choose_run_dir(exp, str(tmp_path / "runs"), None),
                               address=cluster.gcs_address, console=Console(quiet=True))
    finally:
        stop.set()
        watcher.join(timeout=5)
    done = time.monotonic()
    assert summary["trials"]["completed"] == 4 and summary["search"]["max_concurrent"] == 2
    assert 0.0 < summary["test"]["accuracy"] <= 1.0
    up = next((t for t, n in seen if n == 2), None)
    assert up is not None, f"never saw 2 worker nodes: {seen[-5:]}"
    assert max(n for _, n in seen) == 2  # never more than max_workers
    # idle workers go after idle_timeout_minutes (6 s) plus the autoscaler's update period
    deadline = time.monotonic() + 90
    while _workers() > 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert _workers() == 0, "idle worker nodes were not removed within 90 s"
    down = time.monotonic()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    assert len(alive) == 1 and "node:__internal_head__" in alive[0]["Resources"]
    print(f"scale-up to 2 workers {up - start:.1f}s after the sweep began; sweep "
          f"{done - start:.1f}s; idle workers removed {down - done:.1f}s after it ended")
