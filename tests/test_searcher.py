"""How each trial's end reaches Optuna through the project's OptunaSearch subclass, and the
one rule that names a trial's end state. No Ray instance: the searcher's hooks are
called in Ray Tune's order (a scheduler's STOP report reaches only on_trial_complete)."""

from __future__ import annotations

import optuna
import pytest

from automl.search._result import COMPLETED, DIVERGED, FAILED, STOPPED, end_state
from automl.search._tuner import EpochsOf, _OptunaSearch

State = optuna.trial.TrialState


def test_end_state_rule():
    assert end_state(4, 4) == COMPLETED and end_state(5, 4) == COMPLETED
    assert end_state(2, 4) == STOPPED
    assert end_state(2, 4, "Traceback ... ValueError: boom") == FAILED
    assert end_state(1, 4, "automl.train.TrialDiverged: diverged at epoch 1") == DIVERGED
    assert end_state(4, 4, "RuntimeError") == FAILED  # raised after its last epoch


def _space(trial):
    trial.suggest_float("x", 0.0, 1.0)
    trial.suggest_categorical("training.epochs", [2, 4])


def _report(epoch, value):
    return {"val_accuracy": value, "epoch": epoch, "training_iteration": epoch}


@pytest.fixture
def searcher():
    s = _OptunaSearch(_space, metric="val_accuracy", mode="max",
                      sampler=optuna.samplers.RandomSampler(seed=0), epochs_of=EpochsOf(10))
    s.set_search_properties("val_accuracy", "max", {})
    return s


def test_each_end_reaches_optuna_as_what_it_was(searcher):
    study = searcher._ot_study
    tids = []
    for i in range(30):  # trials with target 4: one stopped at a rung, one errored
        tid = f"t{i}"
        cfg = searcher.suggest(tid)
        if cfg["training.epochs"] == 4:
            tids.append(tid)
            if len(tids) == 1:
                for e, v in enumerate([0.3, 0.5], 1):
                    searcher.on_trial_result(tid, _report(e, v))
                # ASHA stops it at epoch 3 of 4: that report never reached on_trial_result
                searcher.on_trial_complete(tid, _report(3, 0.55))
            elif len(tids) == 2:
                searcher.on_trial_result(tid, _report(1, 0.9))
                searcher.on_trial_complete(tid, _report(1, 0.9), error=True)
            else:
                for e in range(1, 5):
                    searcher.on_trial_result(tid, _report(e, 0.1 * e))
                searcher.on_trial_complete(tid, _report(4, 0.4))
                break
        else:  # target 2, trained fully
            for e in (1, 2):
                searcher.on_trial_result(tid, _report(e, 0.2 * e))
            searcher.on_trial_complete(tid, _report(2, 0.4))
    assert len(tids) == 3
    trials = study.trials
    by_state = {s: [t for t in trials if t.state == s] for s in State}
    stopped, failed, full = (trials[int(t[1:])] for t in tids)
    assert stopped.state == State.PRUNED and stopped.value == pytest.approx(0.55)
    assert stopped.intermediate_values == {1: 0.3, 2: 0.5, 3: 0.55}
    assert failed.state == State.FAIL and failed.value is None
    assert full.state == State.COMPLETE and full.value == pytest.approx(0.4)
    # every target-2 trial ran its 2 epochs: COMPLETE, not judged against the largest target
    assert all(t.params["training.epochs"] == 2 for t in by_state[State.COMPLETE] if t is not full)
    assert len(by_state[State.COMPLETE]) == len(trials) - 2


def test_a_finished_study_trial_is_not_told_twice(searcher):
    searcher.suggest("a")
    searcher.on_trial_result("a", _report(1, 0.5))
    searcher.on_trial_complete("a", _report(1, 0.5))
    searcher.on_trial_complete("a", _report(1, 0.5))  # a resumed duplicate
    (t,) = searcher._ot_study.trials
    assert t.state in (State.PRUNED, State.COMPLETE) and t.value == pytest.approx(0.5)


def test_searcher_restored_from_an_older_session_ignores_trials_it_never_saw(searcher, tmp_path):
    """When a torn snapshot sets its session aside (tests/test_snapshots.py), Tune restores
    the searcher from the session before: trials started since are unknown to it and must
    neither crash it nor be told to the study."""
    searcher.suggest("old")
    searcher.on_trial_result("old", _report(1, 0.5))
    searcher.save_to_dir(str(tmp_path), "2026-01-01_00-00-00")
    fresh = _OptunaSearch(_space, metric="val_accuracy", mode="max",
                          sampler=optuna.samplers.RandomSampler(seed=0), epochs_of=EpochsOf(10))
    fresh.restore_from_dir(str(tmp_path))
    assert set(fresh._ot_trials) == {"old"}
    fresh.on_trial_result("new", _report(1, 0.7))  # a trial the older state never saw
    fresh.on_trial_complete("new", _report(1, 0.7))
    fresh.on_trial_complete("old", _report(10, 0.9))
    assert [t.state for t in fresh._ot_study.trials] == [State.COMPLETE]
