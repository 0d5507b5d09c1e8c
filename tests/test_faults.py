"""Faults inside a real sweep: a trial that diverges (NaN / exploding loss) and a trial
that raises are recorded with their reason, told to Optuna as failed, and the sweep
goes on to a winner."""

from __future__ import annotations

import json
import re

import optuna
import pytest
from conftest import write_spec
from rich.console import Console

from automl.pipeline import choose_run_dir, run_main_job
from automl.spec import load_spec

SPEC = """
name: faults
model:
  family: {type: categorical, choices: [mlp, vit]}
  mlp: {depth: 1, width: 32}
  vit: {dim: 30, heads: 4, depth: 1}     # 30 is not divisible by 4: building it raises
training:
  optimizer: sgd
  lr: {type: categorical, choices: [1000.0, 0.1]}   # 1000 diverges
  batch_size: 64
  epochs: 3
  init: default
  sgd: {momentum: 0.9}
search: {num_samples: 8, seed: 0, sampler: random}
scheduler: {type: none}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none}
resources: {max_failures: 0}
"""


@pytest.fixture(scope="module")
def sweep(ray_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    exp = load_spec(write_spec(tmp, SPEC))
    run_dir = choose_run_dir(exp, str(tmp / "runs"), None)
    summary = run_main_job(exp, run_dir, console=Console(quiet=True))
    return run_dir, summary


def test_each_trial_ends_as_its_config_says(sweep):
    run_dir, summary = sweep
    trials = json.loads((run_dir / "trials.json").read_text())
    seen = set()
    for t in trials:
        p = t["params"]
        if p["model.family"] == "vit":
            assert t["end_state"] == "failed", t
            assert "heads 4 must divide dim 30" in t["reason"]
            assert 'vit.py", line' in t["error"]  # the traceback is kept
            seen.add("failed")
        elif p["training.lr"] == 1000.0:
            assert t["end_state"] == "diverged", t
            assert re.fullmatch(r"diverged at epoch \d+: .*", t["reason"]), t["reason"]
            assert re.search(r"loss=(nan|inf)|more than 10x its starting", t["reason"]), t["reason"]
            seen.add("diverged")
        else:
            assert t["end_state"] == "completed" and t["epochs_run"] == 3, t
            seen.add("completed")
    assert seen == {"failed", "diverged", "completed"}  # the seed covers every case
    counts = summary["trials"]
    assert counts["diverged"] == sum(t["end_state"] == "diverged" for t in trials) > 0
    assert counts["failed"] == sum(t["end_state"] == "failed" for t in trials) > 0


def test_broken_trials_are_failures_for_the_sampler_and_never_win(sweep):
    run_dir, summary = sweep
    trials = {t["trial_id"]: t for t in json.loads((run_dir / "trials.json").read_text())}
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{run_dir / 'study.db'}")
    # repeats the sampler proposed were answered from the first trial's record, not trained
    repeats = [t for t in study.trials if "automl.duplicate_of" in t.user_attrs]
    for t in repeats:
        first = study.trials[t.user_attrs["automl.duplicate_of"]]
        assert (t.params, t.state) == (first.params, first.state)
    states = [t.state for t in study.trials if t not in repeats]
    n_bad = sum(t["end_state"] in ("failed", "diverged") for t in trials.values())
    assert states.count(optuna.trial.TrialState.FAIL) == n_bad
    assert states.count(optuna.trial.TrialState.COMPLETE) == len(trials) - n_bad
    winner = trials[summary["winner"]["trial_id"]]
    assert winner["end_state"] == "completed"
    assert summary["test"]["accuracy"] > 0.7
