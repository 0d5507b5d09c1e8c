"""A small real sweep on digits: Ray Tune + our Optuna searcher + rung policy,
in-process trials."""

from __future__ import annotations

import json
import time

import optuna
import pytest
import torch
from conftest import write_spec
from rich.console import Console
from typer.testing import CliRunner

from automl.cli import app
from automl.errors import ResourceError
from automl.pipeline import choose_run_dir, run_main_job
from automl.spec import load_spec
from automl.train import load_checkpoint

TINY = """
name: tiny
model:
  family: resnet
  resnet: {depth: 1, width: {type: categorical, choices: [8, 16]}, stages: 2}
training:
  optimizer: adam
  lr: {type: float, low: 1e-3, high: 1e-2, log: true}
  batch_size: 128
  epochs: {type: int, low: 2, high: 4, step: 2}
  init: {type: categorical, choices: [kaiming, default]}
search: {num_samples: 6, seed: 0, sampler: tpe, n_startup_trials: 3}
scheduler: {grace_period: 1, reduction_factor: 2, max_epochs: 4}
selection: {top_k: 2, cv_folds: 2}
resources: {cpus_per_worker: 1}
"""


@pytest.fixture(scope="module")
def sweep(ray_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    exp = load_spec(write_spec(tmp, TINY))
    run_dir = choose_run_dir(exp, str(tmp / "runs"), None)
    summary = run_main_job(exp, run_dir, console=Console(quiet=True))
    return exp, run_dir, summary


def test_every_trial_is_recorded_with_its_end_state(sweep):
    exp, run_dir, summary = sweep
    trials = json.loads((run_dir / "trials.json").read_text())
    assert len(trials) == 6 == summary["trials"]["total"]
    counts = summary["trials"]
    assert counts["completed"] + counts["stopped_early"] + counts["failed"] == 6
    assert counts["failed"] == 0
    assert summary["search"]["max_concurrent"] == 2
    for t in trials:
        assert [h["epoch"] for h in t["history"]] == list(range(1, t["epochs_run"] + 1))
        assert t["target_epochs"] in (2, 4)
        if t["end_state"] == "stopped_early":
            assert t["epochs_run"] in (1, 2) and t["epochs_run"] < t["target_epochs"]
        else:
            assert t["epochs_run"] == t["target_epochs"]
    events = [json.loads(x) for x in (run_dir / "trials.jsonl").read_text().splitlines()]
    reports = [e for e in events if "event" not in e]
    assert len(reports) == sum(t["epochs_run"] for t in trials)
    ends = {e["trial_id"]: e["state"] for e in events if e.get("event") == "end"}
    assert ends == {t["trial_id"]: t["end_state"] for t in trials}  # one end per trial
    # each trial's own checkpoint, keyed by its study number, at its last epoch
    for t in trials:
        (ckpt,) = (run_dir / "checkpoints" / f"trial_{t['trial_id']}").glob("epoch_*.pt")
        assert ckpt.name == f"epoch_{t['epochs_run']:04d}.pt"


def test_leaderboard_top_k_is_cross_validated_and_the_winner_scored_on_test(sweep):
    exp, run_dir, summary = sweep
    board = summary["leaderboard"]
    assert len(board) == 2
    values = [r["val_accuracy"] for r in board]
    assert values == sorted(values, reverse=True)
    assert summary["best"]["trial_id"] == board[0]["trial_id"]
    assert summary["best"]["val"]["val_accuracy"] == pytest.approx(values[0])
    cv = summary["cv"]
    assert [c["trial_id"] for c in cv["candidates"]] == [r["trial_id"] for r in board]
    for c in cv["candidates"]:
        folds = [f["scores"]["accuracy"] for f in c["folds"]]
        assert len(folds) == 2 and c["summary"]["accuracy"]["mean"] == pytest.approx(
            sum(folds) / 2)
        lo, hi = c["summary"]["accuracy"]["ci95"]
        assert lo <= c["summary"]["accuracy"]["mean"] <= hi
    means = {c["trial_id"]: c["summary"]["accuracy"]["mean"] for c in cv["candidates"]}
    winner = summary["winner"]
    assert winner["trial_id"] == cv["winner"]
    assert means[winner["trial_id"]] >= max(means.values()) - exp.selection.tie_tolerance
    assert winner["reason"].startswith("accuracy: ") and winner["cv"]["accuracy"]["n"] == 2
    assert 0.5 < summary["test"]["accuracy"] <= 1.0
    assert summary["test"]["rows"] == summary["data"]["split"]["test"] == 360
    assert summary["test"]["train_rows"] == 1437  # retrained on train + validation rows
    matrix = json.loads((run_dir / "confusion_matrix.json").read_text())["matrix"]
    assert sum(map(sum, matrix)) == 360
    assert sum(matrix[i][i] for i in range(10)) / 360 == pytest.approx(summary["test"]["accuracy"])


def test_best_checkpoint_reloads_safely_and_reproduces_test_score(sweep):
    exp, run_dir, summary = sweep
    from automl.data import fit_transform, load_dataset, split_indices
    from automl.train import evaluate, to_tensors

    model, ckpt = load_checkpoint(run_dir / "best" / "model.pt")
    assert ckpt["config"] == summary["winner"]["config"]
    assert ckpt["epoch"] == summary["winner"]["config"]["epochs"]
    raw = torch.load(run_dir / "best" / "model.pt", weights_only=True)
    assert set(raw) >= {"model", "config", "epoch", "input_shape", "num_classes"}
    data = load_dataset(exp.data)
    s = split_indices(data.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    _, (Xte, yte) = fit_transform(data, s.pool, s.test)
    acc = evaluate(model, *to_tensors(Xte, yte))["accuracy"]
    assert acc == pytest.approx(summary["test"]["accuracy"])


def test_study_persists_in_sqlite_and_spec_round_trips(sweep):
    exp, run_dir, summary = sweep
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{run_dir / 'study.db'}")
    assert len(study.trials) == 6
    assert {"training.lr", "model.resnet.width", "training.epochs"} <= set(study.trials[0].params)
    assert load_spec(run_dir / "spec.yaml") == exp
    # how each trial ended reaches Optuna: ASHA-stopped -> PRUNED at its last epoch's value
    # (Ray's OptunaSearch would say COMPLETE), fully trained -> COMPLETE
    trials = json.loads((run_dir / "trials.json").read_text())
    states = {"completed": optuna.trial.TrialState.COMPLETE,
              "stopped_early": optuna.trial.TrialState.PRUNED}
    assert {t["end_state"] for t in trials} == set(states)  # the tiny sweep has both
    for t in trials:
        st = study.trials[int(t["trial_id"])]  # a trial's id is its study number
        assert st.params == t["params"]
        assert st.state == states[t["end_state"]], t["trial_id"]
        assert st.value == pytest.approx(t["metrics"]["val_accuracy"])
        if t["end_state"] == "stopped_early":  # stopped at a rung: its value is that epoch's
            assert max(st.intermediate_values) == t["epochs_run"] < t["target_epochs"]
            assert st.intermediate_values[t["epochs_run"]] == pytest.approx(st.value)


def test_infeasible_trial_fails_fast_with_need_and_have(ray_cluster, tmp_path):
    exp = load_spec(write_spec(tmp_path, TINY + "\n"), {"resources.cpus_per_worker": 8})
    t0 = time.monotonic()
    with pytest.raises(ResourceError, match=r"needs CPU=8, memory=768MiB on one node, but the largest node has CPU=2"):
        run_main_job(exp, tmp_path / "run", console=Console(quiet=True))
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ automl reproduce
def test_run_dir_records_what_reproducing_the_winner_needs(sweep):
    exp, run_dir, summary = sweep
    record = json.loads((run_dir / "reproducibility.json").read_text())
    env = record["environment"]  # captured inside the Ray task that trained best/model.pt
    assert env["torch_flags"]["deterministic_algorithms"] is True
    # no compression teacher beside it, and 2 fold slots: the refit held two workers' CPUs
    assert env["threads"]["intra_op"] == 2 == 2 * int(exp.resources.cpus_per_worker)
    assert env["device"]["type"] == "cpu" and env["device"]["cpu_capability"]
    assert env["packages"]["torch"] == torch.__version__  # 2.13.0+cpu
    assert env["packages"]["numpy"] and env["packages"]["torchao"]
    assert record["data_sha256"] == summary["data"]["sha256"]
    assert record["spec_sha256"] == summary["spec_sha256"]
    assert record["config"] == summary["winner"]["config"]
    assert record["seeds"]["training seed"] == summary["winner"]["config"]["seed"]
    assert record["test"]["accuracy"] == summary["test"]["accuracy"]


def test_automl_reproduce_retrains_identical_weights(sweep):
    exp, run_dir, summary = sweep
    from automl.determinism import weights_sha256

    result = CliRunner().invoke(app, ["reproduce", str(run_dir)])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "weights identical to best/model.pt" in lines[0], lines
    saved = json.loads((run_dir / "reproduce.json").read_text())
    assert saved["identical"] and saved["held"] == "weights identical"
    best = torch.load(run_dir / "best" / "model.pt", weights_only=True)["model"]
    assert saved["weights_sha256"] == weights_sha256(best)
    assert saved["test_score"] == pytest.approx(summary["test"]["accuracy"])
    assert saved["metric"] == "accuracy"


def _copy_run(run_dir, dst):
    import shutil

    for name in ("spec.yaml", "summary.json", "reproducibility.json", "best/model.pt"):
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(run_dir / name, dst / name)
    return dst


def test_reproduce_falls_back_to_the_cv_standard_error_and_fails_when_neither(sweep, tmp_path,
                                                                               monkeypatch):
    exp, run_dir, summary = sweep
    import automl.selection

    copy = _copy_run(run_dir, tmp_path)
    ckpt = torch.load(copy / "best" / "model.pt", weights_only=True)
    cv = summary["winner"]["cv"]["accuracy"]
    se = cv["std"] / cv["n"] ** 0.5
    env = json.loads((copy / "reproducibility.json").read_text())["environment"]

    def retrain(accuracy):  # stands in for the retraining: weights off by 1e-3
        def fit_and_score(*args, **kwargs):
            model = {k: v + 1e-3 if v.is_floating_point() else v for k, v in ckpt["model"].items()}
            return {"checkpoint": {**ckpt, "model": model}, "scores": {"accuracy": accuracy},
                    "environment": env}
        return fit_and_score

    recorded = summary["test"]["accuracy"]
    monkeypatch.setattr(automl.selection, "fit_and_score", retrain(recorded + se / 2))
    ok = CliRunner().invoke(app, ["reproduce", str(copy)])
    assert ok.exit_code == 0, ok.output
    assert "weights differ (max |diff| 1.00e-03" in ok.output
    assert f"agrees within the CV standard error {se:.4f}" in ok.output
    monkeypatch.setattr(automl.selection, "fit_and_score", retrain(recorded + 2 * se + 0.01))
    bad = CliRunner().invoke(app, ["reproduce", str(copy)])
    assert bad.exit_code == 1  # automl.errors: 1 = the run failed
    lines = [ln for ln in bad.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "outside the CV standard error" in lines[0], lines
    assert json.loads((copy / "reproduce.json").read_text())["held"] is None
    (copy / "reproducibility.json").unlink()
    missing = CliRunner().invoke(app, ["reproduce", str(copy)])
    assert missing.exit_code == 2 and "reproducibility.json is missing" in missing.output
