"""A sweep on a real multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head and
two worker nodes with logical CPUs on this machine): data-parallel workers land on
several nodes, and a node-local results folder is refused."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import write_spec
from rich.console import Console

from automl.errors import ResourceError
from automl.spec import load_spec

SPEC = """
name: multinode
model: {family: mlp, mlp: {depth: 1, width: 32}}
training: {optimizer: adam, lr: {type: categorical, choices: [0.005, 0.01]}, batch_size: 64,
           epochs: 2, init: default}
search: {num_samples: 1, seed: 0, sampler: random}
scheduler: {type: none}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none}
resources: {workers_per_trial: 2, cpus_per_worker: 1}
output: {shared: SHARED}
"""


@pytest.fixture(scope="module")
def cluster():
    import ray
    from ray.cluster_utils import Cluster

    from automl import cluster as runtime

    if ray.is_initialized():
        ray.shutdown()
    port = runtime.free_port()
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": True, "dashboard_host": "127.0.0.1",
        "dashboard_port": port, "object_store_memory": 100 * 1024 * 1024,
    })
    for _ in range(2):  # each worker node holds one Train worker
        c.add_node(num_cpus=1, object_store_memory=100 * 1024 * 1024)
    c.wait_for_nodes()
    handle = runtime.connect(address=c.address)
    yield c
    runtime.shutdown(handle)
    ray.shutdown()
    c.shutdown()


def test_node_local_results_are_refused_on_several_nodes(cluster, tmp_path):
    from automl.pipeline import run_main_job

    exp = load_spec(write_spec(tmp_path, SPEC.replace("SHARED", "false")))
    with pytest.raises(ResourceError, match=r"the cluster has 3 nodes but output\.dir"):
        run_main_job(exp, tmp_path / "run", console=Console(quiet=True))
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(400)
def test_ddp_workers_spread_over_nodes_and_sweep_completes(cluster, tmp_path):
    from automl.pipeline import run_main_job

    exp = load_spec(write_spec(tmp_path, SPEC.replace("SHARED", "true")))
    box: dict = {}

    def target():
        try:
            box["summary"] = run_main_job(exp, tmp_path / "run", console=Console(quiet=True))
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(300)
    assert not t.is_alive(), "multi-node sweep did not finish in 300 s"
    if "error" in box:
        raise box["error"]
    summary = box["summary"]
    # one trial: where its workers land is the point here; trials back to back are
    # tests/test_distributed.py's (test_ddp_sweep_runs_trials_back_to_back_without_deadlock)
    assert summary["trials"]["total"] == 1 and summary["trials"]["failed"] == 0
    rows = [json.loads(x) for x in (tmp_path / "run" / "trials.jsonl").open()]
    rows = [r for r in rows if "event" not in r]  # the epoch reports
    # one CPU per node: a trial's two workers must sit on two different nodes
    assert rows and all(r["worker_nodes"] == 2 for r in rows)
