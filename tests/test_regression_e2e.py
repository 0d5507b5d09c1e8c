"""The regression example as a user runs it, from the repository root: write the CSV
(``examples/regression/make_csv.py``), ``automl search`` of ``examples/regression/spec.yaml``
(3 trials here, and its costs turned down: the top 2 cross-validated on 3 folds, shorter
distillation and fine-tuning; everything else as the example has it), then read what it
left: a summary that names the task and its metrics,
a winner registered with a card whose loading snippet runs, ``automl reproduce`` and
``automl report``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO

from automl.card import extract_snippet


def _automl(*args, timeout=600):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, "-m", "automl", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _cheaper_spec(tmp_path):
    """``examples/regression/spec.yaml`` with what the run costs turned down, nothing it
    does changed: CV of the top 2 on 3 folds (5 folds of the top 3 there), 20 distillation
    epochs (60) and 5 fine-tuning epochs after pruning (20). The data path stays relative:
    the search runs from the repository root, as the example says."""
    import yaml

    spec = yaml.safe_load((REPO / "examples" / "regression" / "spec.yaml").read_text())
    assert spec["selection"] == {"top_k": 3, "cv_folds": 5}  # what is turned down below
    spec["selection"].update({"top_k": 2, "cv_folds": 3})
    distill, prune = spec["compression"]["stages"]
    assert distill["stage"] == "distill" and prune["stage"] == "prune"
    distill["epochs"], prune["fine_tune_epochs"] = 20, 5
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.timeout(900)
def test_the_regression_example_runs_end_to_end(tmp_path):
    made = subprocess.run([sys.executable, "examples/regression/make_csv.py"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    out = tmp_path / "runs"
    done = _automl("search", str(_cheaper_spec(tmp_path)), "--output", str(out),
                   "--num-samples", "3", "--dashboard-port", "0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "a regression target (25 to 346" in done.stdout
    assert "test r2=" in done.stdout and "rmse=" in done.stdout
    run_dir = out / "diabetes-regression"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["data"]["task"] == "regression" and summary["metric"] == "val_rmse"
    assert summary["mode"] == "min" and summary["cv"]["metric"] == "r2"
    test = summary["test"]
    assert set(test) >= {"r2", "rmse", "mae", "residuals"} and "accuracy" not in test
    assert test["r2"] > 0.2 and test["rmse"] < 70  # the target's std is 77
    assert summary["winner"]["cv"]["r2"]["interval"] == "t"
    assert summary["trials"]["total"] == 3 and not (run_dir / "confusion_matrix.json").exists()
    # the chain's guard reads R² on the validation rows; a student matches the teacher's
    # outputs (R² of its outputs against the teacher's, not an argmax agreement)
    comp = summary["compression"]
    assert comp["metric"] == "r2" and comp["teacher"]["val_accuracy"] < 1.0
    distill = comp["stages"][0]
    assert distill["stage"] == "distill" and distill["status"] in ("accepted", "rejected")
    if distill["status"] == "accepted":
        assert distill["measurement"]["agreement"] > 0.5
        assert distill["measurement"]["params"] < comp["teacher"]["params"]
    assert "R²" in done.stdout.split("compression (")[1].splitlines()[0]

    # the card names the task and its snippet runs as written (values, not classes)
    ref = summary["registry"]["versions"][0]
    from automl.registry import Registry

    card = Registry(out / "registry").get(ref).card.read_text()
    assert "| task | regression |" in card and "| r2 |" in card and "Confusion" not in card
    (tmp_path / "snippet.py").write_text(extract_snippet(card))
    ran = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=240)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert [ln.split(" ", 1)[0] for ln in ran.stdout.splitlines()] == [
        "pytorch", "torchscript", "onnx"]

    # every registered version loads (a compressed model too: its head is rebuilt)
    import torch

    reg = Registry(out / "registry")
    for version in summary["registry"]["versions"]:
        model, _ = reg.load(version)
        with torch.no_grad():
            pred = model(torch.zeros(4, summary["data"]["model_input_shape"][0]))
        assert pred.shape == (4, 1) and 25 < float(pred.mean()) < 346, version

    again = _automl("reproduce", str(run_dir))
    assert again.returncode == 0 and "weights identical" in again.stdout, again.stdout
    assert "test r2" in again.stdout
    report = _automl("report", str(run_dir))
    assert report.returncode == 0, report.stdout + report.stderr
