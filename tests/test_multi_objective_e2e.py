"""A tiny form of ``search_spaces/resnet_latency.yaml`` end to end on digits: accuracy
against measured latency with MO-ASHA and a size constraint some sampled models break,
the cross-validated front in ``summary.json``, every front member in the registry, the
front and its hypervolume in the report."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from conftest import REPO, write_spec
from rich.console import Console

from automl.pipeline import choose_run_dir, run_main_job
from automl.registry import Registry
from automl.report import build_report
from automl.spec import load_spec

# width 8 has ~3-5k parameters, width 32 ~40-60k: the constraint splits them
TINY = """
name: tiny-mo
model:
  family: resnet
  resnet: {depth: {type: int, low: 1, high: 2}, width: {type: categorical, choices: [8, 32]},
           stages: 2}
training:
  optimizer: adam
  lr: {type: float, low: 3e-3, high: 2e-2, log: true}
  batch_size: 128
  epochs: 4
search:
  num_samples: 8
  seed: 0
  sampler: tpe
  n_startup_trials: 4
  objectives:
    - {metric: val_accuracy}
    - {metric: latency_ms}
  constraints:
    - {metric: params, max: 20000}
scheduler: {grace_period: 2, reduction_factor: 2, max_epochs: 4}
selection: {top_k: 2, cv_folds: 2, pick: knee}
resources: {cpus_per_worker: 1}
tracking: {backend: none}
"""


@pytest.fixture(scope="module")
def run(ray_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mo")
    exp = load_spec(write_spec(tmp, TINY))
    run_dir = choose_run_dir(exp, str(tmp / "runs"), None)
    summary = run_main_job(exp, run_dir, console=Console(quiet=True))
    return exp, run_dir, summary


def test_every_trial_reports_its_costs_and_some_break_the_constraint(run):
    exp, run_dir, summary = run
    trials = json.loads((run_dir / "trials.json").read_text())
    assert len(trials) == 8
    for t in trials:
        m = t["metrics"]
        assert m["params"] > 0 and m["macs"] > 0 and m["model_bytes"] >= 4 * m["params"]
        assert 0 < m["latency_ms"] < 1000
        rows = t["history"]  # measured once: the same figure on every epoch
        assert len({r["latency_ms"] for r in rows}) == 1
    sizes = {t["metrics"]["params"] > 20000 for t in trials}
    assert sizes == {True, False}, "the tiny space must sample both sides of the constraint"
    study = optuna.load_study(study_name="tiny-mo", storage=f"sqlite:///{run_dir / 'study.db'}")
    assert len(study.directions) == 2 and study.metric_names == ["val_accuracy", "latency_ms"]
    states = {t.state for t in study.trials}
    assert optuna.trial.TrialState.COMPLETE in states
    infeasible = [t for t in study.trials if t.constraints and
                  sum(v for v in t.constraints.values() if v > 0) > 0]
    assert infeasible and all(t.params["model.resnet.width"] == 32 for t in infeasible)


def test_the_cross_validated_front_names_the_winner(run):
    exp, run_dir, summary = run
    front = summary["pareto"]
    assert front and all(set(r["objectives"]) == {"cv_accuracy", "latency_ms"} for r in front)
    winners = [r for r in front if r["winner"]]
    assert len(winners) == 1 and winners[0]["on_front"] and winners[0]["feasible"]
    assert summary["winner"]["trial_id"] == winners[0]["trial_id"] == summary["cv"]["winner"]
    on = [r for r in front if r["on_front"]]
    for a in on:  # no member of the front is dominated by another
        for b in on:
            assert not (b["objectives"]["cv_accuracy"] >= a["objectives"]["cv_accuracy"]
                        and b["objectives"]["latency_ms"] <= a["objectives"]["latency_ms"]
                        and b is not a and b["objectives"] != a["objectives"])
    assert summary["search"]["objectives"] == [["val_accuracy", "max"], ["latency_ms", "min"]]
    assert "latency_ms" in summary["leaderboard"][0]
    assert summary["test"]["accuracy"] > 0.5


def test_front_members_are_registered_and_the_winner_has_the_alias(run):
    exp, run_dir, summary = run
    reg = Registry(Path(summary["registry"]["dir"]))
    members = [r for r in summary["pareto"] if r["on_front"]]
    versions = reg.versions("tiny-mo-pareto")
    assert len(versions) == len(members)
    win = reg.get("tiny-mo-pareto@winner")
    assert win.lineage["trial_id"] == summary["winner"]["trial_id"]
    assert win.lineage["objectives"] == next(r["objectives"] for r in members if r["winner"])
    assert "pareto" in win.lineage["tags"] and "winner" in win.lineage["tags"]


def test_the_report_shows_the_front_and_its_hypervolume(run, tmp_path):
    exp, run_dir, summary = run
    report = build_report(run_dir, tmp_path / "report")
    for name in ("pareto_front", "hypervolume_history"):
        assert name in report.figures and name in report.interactive, report.skipped
    html = report.index.read_text()
    assert "Pareto front (cross-validated)" in html and "Hypervolume" in html


def test_the_shipped_latency_spec_validates():
    exp = load_spec(REPO / "search_spaces" / "resnet_latency.yaml")
    assert exp.search.objective_list() == [("val_accuracy", "max"), ("latency_ms", "min")]
    assert exp.search.constraints[0].max == 0.8
