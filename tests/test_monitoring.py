"""Ray dashboard on loopback and the sweep's custom metrics on Ray's Prometheus endpoint.

This module starts its own Ray (metrics exported every second) instead of the shared
fixture, runs one tiny sweep with the callbacks the main job uses, and reads the metrics
back over loopback."""

from __future__ import annotations

import json
import math
import socket
import time
import urllib.error
import urllib.request

import pytest
import ray
from conftest import write_spec
from rich.console import Console
from typer.testing import CliRunner

from automl import runtime
from automl.cli import app
from automl.errors import ResourceError
from automl.monitoring import SweepMetrics, scrape, sweep_metrics
from automl.spec import load_spec

TINY = """
name: watched
model:
  family: resnet
  resnet: {depth: 1, width: 8, stages: 2}
training:
  lr: {type: float, low: 2e-3, high: 1e-2, log: true}
  batch_size: 128
  epochs: {type: int, low: 1, high: 2}
search: {num_samples: 4, seed: 1, sampler: random}
scheduler: {grace_period: 1, reduction_factor: 2, max_epochs: 2}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none, tensorboard: false}
"""


def test_a_taken_dashboard_port_fails_before_ray_starts():
    if ray.is_initialized():
        pytest.skip("Ray is already running in this process")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ResourceError, match=f"port {port} for the Ray dashboard is already "
                                                "in use.*--dashboard-port 0"):
            runtime.connect(num_cpus=1, dashboard_port=port)
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_metrics_report_interval_ms", "500")  # Ray's floor is 1 s
        handle = runtime.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
        yield handle
        ray.shutdown()


@pytest.fixture(scope="module")
def sweep(cluster, tmp_path_factory):
    from automl.data import fit_transform, load_dataset, split_indices
    from automl.search import run_search
    from automl.search._trainable import TrialData
    from automl.tracking._callbacks import sweep_callbacks

    tmp = tmp_path_factory.mktemp("monitoring")
    exp = load_spec(write_spec(tmp, TINY))
    ds = load_dataset(exp.data)
    sp = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed,
                       classes=ds.classes)
    (X_tr, y_tr), (X_val, y_val), _ = fit_transform(ds, sp.train, sp.val, sp.test)
    data = TrialData(X_tr, y_tr, X_val, y_val, tuple(X_tr.shape[1:]), ds.num_classes)
    run_dir = tmp / "watched"
    run_dir.mkdir()
    target, callbacks = sweep_callbacks(exp, run_dir)  # what run_main_job passes
    assert target is None and isinstance(callbacks[-1], SweepMetrics)
    result = run_search(exp, data, run_dir, console=Console(quiet=True), callbacks=callbacks)
    yield run_dir, result
    callbacks[-1].close()


def test_dashboard_answers_on_loopback(cluster):
    from ray._private.authentication.http_token_authentication import (
        get_auth_headers_if_auth_enabled,
    )

    assert cluster.dashboard_url.startswith("http://127.0.0.1:")
    try:  # without the cluster token: refused (token auth is on by default) but answered
        status = urllib.request.urlopen(f"{cluster.dashboard_url}/api/version", timeout=10).status
    except urllib.error.HTTPError as e:
        status = e.code
    assert status in (200, 401)
    req = urllib.request.Request(f"{cluster.dashboard_url}/api/version",
                                 headers=get_auth_headers_if_auth_enabled({}))
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read())["ray_version"] == ray.__version__


def test_custom_metrics_match_the_sweep(cluster, sweep):
    run_dir, result = sweep
    counts = result.counts()
    want = {"running": 0, "completed": counts["completed"],
            "stopped_early": counts["stopped_early"], "failed": counts["failed"]}
    deadline, got = time.monotonic() + 30, {}
    while time.monotonic() < deadline:  # Ray exports every second or so
        got = sweep_metrics(scrape(cluster.metrics_url), run_dir.name)
        if {k: got.get(k) for k in want} == want and "best_metric" in got:
            break
        time.sleep(0.5)
    assert {k: got.get(k) for k in want} == want
    assert want["completed"] + want["stopped_early"] == 4
    best = max(h["val_accuracy"] for t in result.trials for h in t.history)
    assert got["best_metric"] == pytest.approx(best)
    epochs = sum(t.epochs_run for t in result.trials)
    # epochs / seconds since the first trial started; the search's wall time is longer
    assert epochs / result.wall_time_s <= got["epochs_per_second"] < 100


class FakeTrial:
    def __init__(self, tid: str, epochs: int, target: int, status: str = "RUNNING",
                 acc: float | None = None):
        self.trial_id, self.status = tid, status
        self.config = {"model.family": "resnet", "training.optimizer": "adam",
                       "training.lr": 0.01, "training.batch_size": 64, "training.epochs": target,
                       "training.weight_decay": 0.0, "training.init": "default"}
        self.last_result = {"epoch": epochs, "val_accuracy": acc}


def test_counts_and_rates_follow_trial_events(cluster, tmp_path):
    exp = load_spec(write_spec(tmp_path, TINY))
    now = [100.0]
    m = SweepMetrics("unit", exp, clock=lambda: now[0], refresh_s=0)
    a, b, c = FakeTrial("a", 2, 2), FakeTrial("b", 1, 2), FakeTrial("c", 1, 2)
    for t in (a, b, c):
        m.on_trial_start(0, [], t)  # the clock starts at the first trial: t0 = 100
    for t, acc in ((a, 0.5), (a, 0.8), (b, 0.6), (c, 0.7)):
        m.on_trial_result(0, [], t, {"epoch": 1, "val_accuracy": acc})
    m.on_trial_complete(0, [], a)
    m.on_trial_complete(0, [], b)
    m.on_trial_error(0, [], c)
    assert (m.running, m.ended) == (set(), {"completed": 1, "stopped_early": 1, "failed": 1})
    assert m.best == 0.8 and m.epochs == 4
    now[0] = 108.0  # the rate counts from the first trial's start
    assert math.isclose(m.epochs_per_second(), 4 / 8.0)


def test_exposing_the_dashboard_warns(tmp_path):
    res = CliRunner().invoke(app, ["search", str(tmp_path / "missing.yaml"),
                                   "--dashboard-host", "0.0.0.0"])
    assert "warning: the Ray dashboard will listen on 0.0.0.0" in res.output
    assert "reachable from the network" in res.output and res.exit_code == 2
    quiet = CliRunner().invoke(app, ["search", str(tmp_path / "missing.yaml")])
    assert "warning" not in quiet.output and quiet.exit_code == 2


def test_a_resumed_sweep_counts_trials_that_ended_before(cluster, tmp_path):
    exp = load_spec(write_spec(tmp_path, TINY))
    m = SweepMetrics("resumed", exp, refresh_s=0)
    before = [FakeTrial("a", 2, 2, "TERMINATED", 0.9), FakeTrial("b", 1, 2, "TERMINATED", 0.6),
              FakeTrial("c", 1, 2, "ERROR", 0.95), FakeTrial("d", 0, 2, "PENDING")]
    for _ in range(2):  # only the first step counts them
        m.on_step_begin(0, before)
    assert m.ended == {"completed": 1, "stopped_early": 1, "failed": 1}
    assert (m.best, m.epochs, m.running) == (0.95, 0, set())
