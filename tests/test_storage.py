"""SoleWriterStorage (the sweep driver's view of study.db): TPE samples the same
configurations over it as over SQLite itself, study.db holds every write at once, a
failed write changes nothing, and readers cannot edit what it holds."""

from __future__ import annotations

import random

import optuna
import pytest

from automl.search import StudySearch
from automl.search._storage import SoleWriterStorage
from automl.search._tuner import make_search, study_storage
from automl.spec import Experiment

State = optuna.trial.TrialState


def _space(trial):
    family = trial.suggest_categorical("family", ["a", "b"])
    if family == "a":
        trial.suggest_int("a.depth", 1, 4)
    else:
        trial.suggest_float("b.lr", 1e-4, 1e-1, log=True)
    trial.suggest_categorical("training.epochs", [2, 4])
    return None


def _drive(storage, n=16, seed=0):
    """A sweep of ``n`` trials, two at a time, over ``storage``: every end kind, reports,
    a constant-liar TPE past its start-up trials; returns the params asked, in order."""
    search = StudySearch(_space, storage, "s",
                         lambda held: optuna.samplers.TPESampler(
                             seed=held, n_startup_trials=4, constant_liar=True),
                         "max", n)
    rng, running, asked = random.Random(seed), [], []
    for _ in range(n):
        s = search.ask()
        asked.append(s.params)
        running.append(s.number)
        if len(running) == 2:
            number = running.pop(0)
            target = search.params_of(number)["training.epochs"]
            epochs = rng.choice([1, target])
            for e in range(1, epochs + 1):
                search.report(number, e, rng.random())
            kind = rng.choice(["completed", "stopped_early", "failed"])
            search.end(number, kind if epochs < target or kind == "failed" else "completed",
                       epochs, rng.random())
    return asked, search


def test_tpe_samples_the_same_sweep_over_it_as_over_sqlite(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "held").mkdir()
    plain, _ = _drive(study_storage(tmp_path / "plain"))
    held, _ = _drive(SoleWriterStorage(study_storage(tmp_path / "held")))
    assert held == plain


def test_study_db_holds_every_write_at_once(tmp_path):
    storage = SoleWriterStorage(study_storage(tmp_path))
    _, search = _drive(storage)
    search.study.trials[0].state  # noqa: B018 (a read between writes)
    search.study.ask().set_user_attr("note", "last")  # the last write, not read back

    def view(trials):
        return [(t.number, t._trial_id, t.state, t.values, t.params, t.distributions,
                 t.intermediate_values, t.user_attrs) for t in trials]

    fresh = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    sid = fresh.get_study_id_from_name("s")
    assert view(storage.get_all_trials(sid)) == view(fresh.get_all_trials(sid))
    assert fresh.get_all_trials(sid)[-1].user_attrs == {"note": "last"}
    assert {t.state for t in fresh.get_all_trials(sid)} >= {State.COMPLETE, State.PRUNED,
                                                            State.FAIL, State.RUNNING}


def test_a_failed_write_changes_nothing_and_readers_get_copies(tmp_path):
    storage = SoleWriterStorage(study_storage(tmp_path))
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    study.tell(trial, 0.5)
    tid = trial._trial_id
    with pytest.raises(RuntimeError):  # Optuna refuses a write to a finished trial
        storage.set_trial_param(tid, "y", 0.2, optuna.distributions.FloatDistribution(0, 1))
    got = storage.get_trial(tid)
    assert set(got.params) == {"x"} and got.state == State.COMPLETE
    got.params["x"] = 9.0  # optuna.Trial edits the trial it is given
    got.user_attrs["k"] = 1
    again = storage.get_trial(tid)
    assert again.params["x"] != 9.0 and again.user_attrs == {}
    assert storage.get_all_trials(study._study_id)[0].params == again.params


def test_the_sweep_reads_its_study_from_memory_and_writes_study_db(tmp_path):
    exp = Experiment.model_validate({"name": "e", "data": {"source": "digits"},
                                     "model": {"family": "mlp"},
                                     "search": {"num_samples": 3}})
    search = make_search(exp, tmp_path)
    assert isinstance(search.storage, SoleWriterStorage)
    s = search.ask()
    on_disk = optuna.load_study(study_name="e", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert on_disk.trials[s.number].params == s.params
