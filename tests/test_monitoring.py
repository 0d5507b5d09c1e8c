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

from automl import cluster as runtime
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
    from automl.tracking._sinks import sweep_sinks

    tmp = tmp_path_factory.mktemp("monitoring")
    exp = load_spec(write_spec(tmp, TINY))
    ds = load_dataset(exp.data)
    sp = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed,
                       classes=ds.classes)
    (X_tr, y_tr), (X_val, y_val), _ = fit_transform(ds, sp.train, sp.val, sp.test)
    data = TrialData(X_tr, y_tr, X_val, y_val, tuple(X_tr.shape[1:]), ds.num_classes)
    run_dir = tmp / "watched"
    run_dir.mkdir()
    sinks = sweep_sinks(exp, run_dir, None)  # what run_main_job passes without W&B
    assert isinstance(sinks[-1], SweepMetrics)
    result = run_search(exp, data, run_dir, console=Console(quiet=True), sinks=sinks)
    yield run_dir, result
    sinks[-1].close()


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
    # epochs / seconds from the sweep's start to its last report: about the search's wall
    assert epochs / (result.wall_time_s + 5) <= got["epochs_per_second"] < 100


CONFIG = {"model.family": "resnet", "training.optimizer": "adam", "training.lr": 0.01,
          "training.batch_size": 64, "training.epochs": 2, "training.weight_decay": 0.0,
          "training.init": "default"}


def _ledger(run_dir, sink, clock=None):
    from automl.search._ledger import Ledger

    return Ledger(run_dir, "val_accuracy", "max", 5, lambda c: int(c["training.epochs"]),
                  sinks=[sink], **({"clock": clock} if clock else {}))


def test_counts_and_rates_follow_the_ledger(cluster, tmp_path):
    now = [100.0]
    m = SweepMetrics("unit", refresh_s=0)
    ledger = _ledger(tmp_path, m, clock=lambda: now[0])  # t0 = 100
    for n in (0, 1, 2):
        ledger.start(n, CONFIG)
    for n, epoch, acc in ((0, 1, 0.5), (0, 2, 0.8), (1, 1, 0.6), (2, 1, 0.7)):
        ledger.report(n, {"epoch": epoch, "val_accuracy": acc})
    ledger.end(0)  # 2 of 2 epochs: completed
    ledger.end(1)  # 1 of 2: stopped early
    ledger.end(2, error="automl.train.TrialDiverged: diverged at epoch 1: loss=nan")
    assert m.counts() == {"running": 0, "completed": 1, "stopped_early": 1, "failed": 1}
    assert m.view.best == 0.8 and m.view.epochs == 4
    now[0] = 108.0  # the rate counts from the ledger's start
    ledger.start(3, CONFIG)
    assert math.isclose(m.epochs_per_second(), 4 / 8.0)
    assert m.counts()["running"] == 1
    ledger.close()


def test_exposing_the_dashboard_warns(tmp_path):
    res = CliRunner().invoke(app, ["search", str(tmp_path / "missing.yaml"),
                                   "--dashboard-host", "0.0.0.0"])
    assert "warning: the Ray dashboard will listen on 0.0.0.0" in res.output
    assert "reachable from the network" in res.output and res.exit_code == 2
    quiet = CliRunner().invoke(app, ["search", str(tmp_path / "missing.yaml")])
    assert "warning" not in quiet.output and quiet.exit_code == 2


def test_a_resumed_sweep_counts_trials_that_ended_before(cluster, tmp_path):
    first = _ledger(tmp_path, SweepMetrics("before", refresh_s=0))
    for n, (epochs, acc, error) in enumerate([(2, 0.9, None), (1, 0.6, None),
                                              (1, 0.95, "RuntimeError: boom")]):
        first.start(n, CONFIG)
        for e in range(1, epochs + 1):
            first.report(n, {"epoch": e, "val_accuracy": acc})
        first.end(n, error=error)
    first.start(3, CONFIG)  # running when the driver died
    first.close()
    m = SweepMetrics("resumed", refresh_s=0)
    again = _ledger(tmp_path, m)  # a new driver, same run directory
    again.start(3, CONFIG)
    assert m.counts() == {"running": 1, "completed": 1, "stopped_early": 1, "failed": 1}
    assert m.view.best == 0.95  # reported before it failed; the best value seen
    again.close()


class FakeGauge:
    """``ray.util.metrics.Gauge`` without Ray: keeps each value set, by name and tags."""

    values: dict = {}

    def __init__(self, name, description="", tag_keys=()):
        self.name = name

    def set(self, value, tags=None):
        FakeGauge.values[(self.name, tags["stage"] if tags and "stage" in tags else None)] = value


def test_each_stage_eta_is_published_with_its_range(monkeypatch, tmp_path):
    import ray.util.metrics

    from automl._progress import Eta
    from automl.search._ledger import Ledger

    monkeypatch.setattr(ray.util.metrics, "Gauge", FakeGauge)
    monkeypatch.setattr(FakeGauge, "values", {})
    m = SweepMetrics("ranged", refresh_s=0)
    ledger = Ledger(tmp_path, "val_accuracy", "max", 5, lambda c: int(c["training.epochs"]),
                    sinks=[m], eta=lambda led: Eta(40.0, 30.0, 70.0) if led.epochs else None)
    ledger.start(0, CONFIG)
    assert ("automl_stage_eta_seconds", "sweep") not in FakeGauge.values  # no estimate yet
    ledger.report(0, {"epoch": 1, "val_accuracy": 0.5})
    got = {k[0]: v for k, v in FakeGauge.values.items() if k[1] == "sweep"}
    assert (got["automl_stage_eta_seconds"], got["automl_stage_eta_low_seconds"],
            got["automl_stage_eta_high_seconds"]) == (40.0, 30.0, 70.0)
    m.publish_stage("cv", 2, 9, Eta(12.0, 9.0, 15.0), 4.0)
    assert FakeGauge.values[("automl_stage_eta_low_seconds", "cv")] == 9.0
    assert FakeGauge.values[("automl_stage_eta_high_seconds", "cv")] == 15.0
    assert FakeGauge.values[("automl_stage_done", "cv")] == 2
    ledger.close()
    m.close()
