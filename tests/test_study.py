"""The searcher's core (StudySearch: Optuna ask/tell in study.db) and its Tune adapter,
without a Ray instance: ends reach Optuna as what they were, a configuration is never
trained twice, a finite space ends the search, and a new process resumes from the study
alone."""

from __future__ import annotations

import math

import optuna
import pytest

from automl.search import StudySearch, end_state
from automl.search._adapters import TRIAL_KEY, StudySearcher
from automl.search._result import COMPLETED, DIVERGED, FAILED, STOPPED
from automl.search._study import DUPLICATE_OF
from automl.search._tuner import EpochsOf, make_search
from automl.space import describe
from automl.spec import Experiment

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
    return {"fixed": 1}


def _search(tmp_path, n=30, sampler=None, space=_space, size=math.inf):
    return StudySearch(space, f"sqlite:///{tmp_path / 'study.db'}", "s",
                       sampler or (lambda held: optuna.samplers.RandomSampler(seed=held)),
                       "max", n, size=size)


def _report(epoch, value):
    return {"val_accuracy": value, "epoch": epoch, "training_iteration": epoch}


def test_each_end_reaches_optuna_as_what_it_was_through_tunes_hooks(tmp_path):
    search = _search(tmp_path)
    searcher = StudySearcher(search, "val_accuracy", "max", EpochsOf(10))
    ended = []
    for i in range(30):  # trials with target 4: one stopped at a rung, one errored, one full
        tid = f"t{i}"
        cfg = searcher.suggest(tid)
        assert cfg[TRIAL_KEY] == i and cfg["fixed"] == 1
        if cfg["training.epochs"] == 4:
            ended.append(i)
            if len(ended) == 1:
                for e, v in enumerate([0.3, 0.5], 1):
                    searcher.on_trial_result(tid, _report(e, v))
                # stopped at epoch 3 of 4: Tune sends that report to on_trial_complete only
                searcher.on_trial_complete(tid, _report(3, 0.55))
            elif len(ended) == 2:
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
    trials = search.study.trials
    stopped, failed, full = (trials[n] for n in ended)
    assert stopped.state == State.PRUNED and stopped.value == pytest.approx(0.55)
    assert stopped.intermediate_values == {1: 0.3, 2: 0.5, 3: 0.55}
    assert failed.state == State.FAIL and failed.value is None
    assert full.state == State.COMPLETE and full.value == pytest.approx(0.4)
    done = [t for t in trials if t.number not in ended]
    assert all(t.state == State.COMPLETE and t.params["training.epochs"] == 2 for t in done)
    search.end(full.number, "failed")  # a finished trial keeps its record
    assert search.study.trials[full.number].state == State.COMPLETE


def test_a_finite_space_is_never_trained_twice_and_ends_the_search(tmp_path):
    """optuna#2021: 6 configurations and 50 trials trained 50 times before."""
    exp = Experiment.model_validate({
        "name": "six", "model": {"family": "mlp", "mlp": {"width": {
            "type": "categorical", "choices": [16, 32, 64]}}},
        "training": {"optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
                     "sgd": {"momentum": 0.9}, "lr": 0.01, "epochs": 2},
        "search": {"num_samples": 50, "sampler": "tpe", "n_startup_trials": 2}})
    assert describe(exp)["size"] == 6
    search = make_search(exp, tmp_path)
    seen = []
    while (s := search.ask()) is not None:
        seen.append(s)
        search.report(s.number, 2, 0.5 + 0.01 * len(seen))
        search.end(s.number, "completed", 2, 0.5 + 0.01 * len(seen))
    keys = {tuple(sorted(s.params.items())) for s in seen}
    assert len(seen) == len(keys) == 6  # six trainings, all different
    assert search.exhausted == ("search space exhausted: all 6 configurations were tried; "
                                f"{50 - 6} of the 50 requested trials not run")
    # repeats the sampler proposed were told the record of the trial that ran it
    for t in search.study.trials:
        if DUPLICATE_OF in t.user_attrs:
            first = search.study.trials[t.user_attrs[DUPLICATE_OF]]
            assert (t.params, t.value, t.state) == (first.params, first.value, first.state)
    assert search.duplicates == sum(DUPLICATE_OF in t.user_attrs for t in search.study.trials)


def test_a_new_process_resumes_from_the_study_alone(tmp_path):
    first = _search(tmp_path, n=6)
    asked = [first.ask() for _ in range(4)]
    first.report(asked[0].number, 1, 0.4)
    first.end(asked[0].number, "completed", 2, 0.6)
    first.end(asked[1].number, "failed")
    first.report(asked[2].number, 1, 0.3)  # asked[2] and asked[3] were running at the kill
    again = _search(tmp_path, n=6)
    assert again.finished == [0, 1] and again.to_resume == [2, 3] and again.remaining == 4
    r2, r3 = again.ask(), again.ask()
    assert (r2.number, r2.params, r2.resumed) == (2, asked[2].params, True)
    assert r3.number == 3 and r3.config == asked[3].config and r3.resumed
    new = again.ask()
    assert new.number == 4 and not new.resumed
    again.end(2, "stopped_early", 1, 0.3)  # its earlier report is the study's
    assert again.study.trials[2].state == State.PRUNED
    assert again.study.trials[2].intermediate_values == {1: 0.3}


def test_a_trial_killed_while_sampling_gets_its_missing_parameters_on_resume(tmp_path):
    """A driver killed between two suggest_* calls leaves a RUNNING trial with part of its
    parameters; the resume samples the rest on that same trial (same number)."""
    first = _search(tmp_path, n=3)
    partial = first.study.ask()  # as StudySearch.ask does, killed before the space ran whole
    partial.suggest_float("x", 0.0, 1.0)
    again = _search(tmp_path, n=3)
    assert again.to_resume == [partial.number]
    s = again.ask()
    assert s.number == partial.number and s.resumed
    assert s.params["x"] == partial.params["x"] and "training.epochs" in s.params
    assert again.study.trials[s.number].params == s.params


def test_every_sampler_samples_a_conditional_space(tmp_path):
    for sampler in ("tpe", "multivariate_tpe", "random", "cmaes", "gp", "qmc"):
        exp = Experiment.model_validate({
            "name": f"c-{sampler}",
            "model": {"family": {"type": "categorical", "choices": ["mlp", "resnet"]},
                      "mlp": {"width": {"type": "int", "low": 8, "high": 64}},
                      "resnet": {"depth": {"type": "int", "low": 1, "high": 2}}},
            "training": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                         "epochs": 2},
            "search": {"sampler": sampler, "n_startup_trials": 2, "num_samples": 5}})
        (tmp_path / sampler).mkdir()
        search = make_search(exp, tmp_path / sampler)
        for i in range(5):
            s = search.ask()
            fam = s.config["model.family"]
            searched = {"mlp": "model.mlp.width", "resnet": "model.resnet.depth"}
            assert set(s.params) - {"model.family", "training.lr"} == {searched[fam]}, (
                sampler, s.params)
            search.end(s.number, "completed", 2, 0.1 * i)
        assert len(search.finished) == 5
