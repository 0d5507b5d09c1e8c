"""`automl report`: HTML + PNGs from a run directory, with and without the optional
cross-validation and compression sections. The run directories are built here (a real
Optuna study in SQLite, trials as the pipeline writes them); no Ray."""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest
from conftest import assert_self_contained
from typer.testing import CliRunner

from automl.cli import app
from automl.report import build_report
from automl.report._figures import curve_styles

PNG = b"\x89PNG\r\n\x1a\n"
STUDY_FIGURES = {"optimization_history", "parallel_coordinates", "param_importances"}


def trial(tid: str, state: str, curve: list[float]) -> dict:
    return {"trial_id": tid, "end_state": state, "epochs_run": len(curve),
            "target_epochs": 4, "params": {"training.lr": 0.01},
            "history": [{"epoch": e, "val_accuracy": v} for e, v in enumerate(curve, 1)]}


TRIALS = [trial("t1", "completed", [0.5, 0.7, 0.8, 0.9]),
          trial("t2", "completed", [0.4, 0.6, 0.7, 0.85]),
          trial("t3", "stopped_early", [0.2]), trial("t4", "stopped_early", [0.3]),
          trial("t5", "stopped_early", [0.3, 0.5]), trial("t6", "failed", [])]


def make_run(tmp_path: Path, *, study: bool, cv: bool, compression: bool) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    if study:
        s = optuna.create_study(study_name="digits", direction="maximize",
                                storage=f"sqlite:///{run_dir / 'study.db'}",
                                sampler=optuna.samplers.RandomSampler(seed=0))
        s.optimize(lambda t: 1 - abs(math.log10(t.suggest_float("training.lr", 1e-4, 1e-1,
                                                                 log=True)) + 2) / 3
                   + 0.01 * t.suggest_categorical("model.resnet.width", [8, 16])
                   / 16, n_trials=12)
    summary = {"name": "digits", "run_dir": str(run_dir), "metric": "val_accuracy",
               "mode": "max", "trials": {"completed": 2, "stopped_early": 3, "failed": 1},
               "best": {"trial_id": "t1", "params": {"training.lr": 0.01}},
               "test": {"accuracy": 0.93},
               "leaderboard": [{"trial_id": "t1", "val_accuracy": 0.9, "epochs": 4,
                                "end_state": "completed", "params": {
                                    "training.lr": 0.01, "training.weight_decay": 2.58e-5}}]}
    if cv:
        summary["cv"] = {"metric": "accuracy", "winner": "t2", "reason": "best CV mean",
                         "candidates": [
                             {"trial_id": tid, "status": st, "n_params": 1000,
                              "folds": [{"fold": i + 1, "scores": {"accuracy": v}}
                                        for i, v in enumerate(vals)]}
                             for tid, st, vals in (("t2", "winner", [0.91, 0.93, 0.92]),
                                                   ("t1", "scored", [0.88, 0.9, 0.89]))]}
    if compression:
        m = {"params": 20000, "nonzero_params": 20000, "macs": 10**6, "size_bytes": 80000,
             "latency_ms_b1": 0.5, "latency_ms_b64": 4.0, "accuracy": 0.95}
        chain = {"teacher": {**m, "name": "00_teacher"}, "final_name": "02_quantize",
                 "winner": {**m, "name": "winner", "val_accuracy": 1.0},  # saw the val rows
                 "stages": [{"index": 1, "stage": "prune", "status": "accepted",
                             "accuracy": 0.945, "accuracy_drop": 0.005,
                             "measurement": {**m, "name": "01_prune", "nonzero_params": 9000,
                                             "latency_ms_b1": 0.3, "accuracy": 0.945}},
                            {"index": 2, "stage": "quantize", "status": "rejected",
                             "accuracy": 0.90, "accuracy_drop": 0.05,
                             "reason": "accuracy drop 0.0500 > max 0.0100"}]}
        (run_dir / "compress").mkdir()
        (run_dir / "compress" / "chain.json").write_text(json.dumps(chain))
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (run_dir / "trials.json").write_text(json.dumps(TRIALS))
    return run_dir


def test_full_report_has_every_figure_and_table(tmp_path):
    run_dir = make_run(tmp_path, study=True, cv=True, compression=True)
    rep = build_report(run_dir)
    assert rep.skipped == {}
    assert set(rep.figures) == STUDY_FIGURES | {"learning_curves", "cv_scores",
                                                "compression_tradeoff"}
    for path in rep.figures.values():
        assert path.parent == run_dir / "report" and path.read_bytes()[:8] == PNG
        assert path.stat().st_size > 10_000  # drawn, not an empty canvas
    html = rep.index.read_text()
    assert rep.interactive == set(rep.figures)  # each as a plotly figure, its PNG linked
    for name in rep.figures:
        assert f'<div id="{name}"' in html and f'<a href="{name}.png">PNG</a>' in html
    assert_self_contained(html)
    assert "<h2>Cross-validation</h2>" in html and "0.9200" in html  # t2's mean
    assert "<h2>Compression</h2>" in html and "<td>01_prune</td><td>accepted</td>" in html
    assert "<td>2 quantize</td><td>rejected</td>" in html
    # the deployed winner trained on the validation rows: no validation score shown
    assert "<td>winner</td><td>winner</td><td>-</td>" in html
    assert "weight_decay=2.58e-05" in html and "lr=0.0100" in html  # tiny values not 0.0000
    assert "accuracy drop 0.0500 &gt; max 0.0100" in html
    assert f"optuna-dashboard sqlite:///{(run_dir / 'study.db').resolve()}" in html


def test_report_without_optional_sections(tmp_path):
    run_dir = make_run(tmp_path, study=False, cv=False, compression=False)
    rep = build_report(run_dir, tmp_path / "out")
    assert set(rep.figures) == {"learning_curves"}
    assert set(rep.skipped) == STUDY_FIGURES
    assert all("no study.db" in why for why in rep.skipped.values())
    html = rep.index.read_text()
    assert rep.index == tmp_path / "out" / "index.html"
    assert "Cross-validation" not in html and "Compression" not in html
    assert "Optimisation history (Optuna): not drawn (no study.db" in html


def test_learning_curves_are_coloured_by_where_asha_stopped_them():
    styles = curve_styles(TRIALS)
    assert styles["t1"] == styles["t2"] == ("completed", "#1b7837", "-")
    assert styles["t6"][0] == "failed" and styles["t6"][2] == "-"
    assert styles["t3"] == styles["t4"]  # same rung, same colour
    assert styles["t3"][0] == "stopped by ASHA at epoch 1" and styles["t3"][2] == "--"
    assert styles["t5"][0] == "stopped by ASHA at epoch 2" and styles["t5"][1] != styles["t3"][1]


def test_report_cli(tmp_path):
    run_dir = make_run(tmp_path, study=True, cv=False, compression=False)
    res = CliRunner().invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert f"report {run_dir / 'report' / 'index.html'} (4 figures)" in res.output
    for bad in (tmp_path / "missing", tmp_path):  # no folder; a folder without summary.json
        res = CliRunner().invoke(app, ["report", str(bad)])
        assert res.exit_code == 2 and res.output.startswith("error: ")
        assert res.output.count("\n") == 1


@pytest.mark.parametrize("broken", ["{not json", "[]"])
def test_unreadable_summary_is_a_one_line_error(tmp_path, broken):
    (tmp_path / "summary.json").write_text(broken)
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "summary.json" in res.output


def test_console_leaderboard_keeps_every_value_whole_at_80_columns():
    """Piped output is 80 columns wide: values wrap, none is cut to '1.19…'; params every
    row shares are said once, under the table."""
    from rich.console import Console

    from automl.pipeline import print_leaderboard

    params = {"training.lr": 0.0361234, "training.weight_decay": 1.19e-5, "training.momentum": 0.81,
              "training.nesterov": True, "training.optimizer": "sgd", "model.family": "resnet"}
    rows = [{"trial_id": f"t{i}", "val_accuracy": 0.99 - i / 100, "epochs": 6,
             "end_state": "completed",
             "params": {**params, "training.weight_decay": params["training.weight_decay"] * (i + 1),
                        "training.lr": params["training.lr"] / (i + 1)}} for i in range(3)]
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    print_leaderboard(console, rows, "val_accuracy")
    text = console.export_text()
    assert "…" not in text
    for cell in ("weight_decay=1.19e-05", "weight_decay=2.38e-05", "lr=0.0361", "lr=0.012"):
        assert cell in text, text
    assert "every row: family=resnet momentum=0.81 nesterov=True optimizer=sgd" in " ".join(
        text.split())
    assert "momentum" not in text.split("every row:")[0]  # not repeated in every row
