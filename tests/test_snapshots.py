"""Torn Tune snapshots (a driver killed while Tune copied them into the run directory) are
mended before ``Tuner.restore``: CI hit it, ``EOFError: Ran out of input`` from Tune's own
loader and a resumed sweep with no trials. Files are written with Ray's own writers."""

from __future__ import annotations

import json

import optuna
import pytest
from ray.tune.utils.util import _atomic_save, _load_newest_checkpoint

from automl.errors import RunError
from automl.search._snapshots import UNREADABLE, mend_snapshots, readable
from automl.search._tuner import EpochsOf, _OptunaSearch

OLD, NEW = "2026-01-01_00-00-00", "2026-01-01_00-05-00"  # two driver sessions


def _space(trial):
    trial.suggest_float("x", 0.0, 1.0)


def _searcher():
    s = _OptunaSearch(_space, metric="val_accuracy", mode="max",
                      sampler=optuna.samplers.RandomSampler(seed=0), epochs_of=EpochsOf(4))
    s.set_search_properties("val_accuracy", "max", {})
    return s


def _snapshot(folder, session, experiment, trials):
    """What Tune's ``TuneController.save_to_dir`` leaves for one session: the experiment state
    (JSON), the search generator's state (a cloudpickle naming the experiment's storage
    path, as Tune's pickled ``Experiment`` does) and the searcher's state."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"experiment_state-{session}.json").write_text(
        json.dumps({"trial_data": trials, "runner_data": {}, "stats": {}}))
    _atomic_save({"counter": len(trials), "experiment": {"storage_path": str(experiment)}},
                 str(folder), f"search_gen_state-{session}.json", "tmp")
    searcher = _searcher()
    for t in trials:
        searcher.suggest(t)
    searcher.save_to_dir(str(folder), session)


def _restored_trials(folder) -> set[str]:
    fresh = _searcher()
    fresh.restore_from_dir(str(folder))  # Ray's: the newest searcher-state-*.pkl
    return set(fresh._ot_trials)


@pytest.fixture
def killed(tmp_path):
    """A run whose first session snapshotted trial "a"; the second session (trials "a", "b")
    was staged whole, then torn in the run directory by the kill."""
    experiment = tmp_path / "runs" / "r" / "tune"
    staging = tmp_path / "ray" / "session_x" / "artifacts" / "stamp" / "tune" / "driver_artifacts"
    _snapshot(experiment, OLD, experiment, ["a"])
    _snapshot(staging, NEW, experiment, ["a", "b"])
    for f in staging.iterdir():
        (experiment / f.name).write_bytes(f.read_bytes())
    gen = experiment / f"search_gen_state-{NEW}.json"
    gen.write_bytes(b"")  # killed as the copy began
    state = experiment / f"searcher-state-{NEW}.pkl"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # and half-way through
    with pytest.raises(EOFError):  # what Tune's restore hit in CI
        _load_newest_checkpoint(str(experiment), "search_gen_state-*.json")
    return experiment, staging


def test_readable_tells_whole_from_torn(killed):
    experiment, staging = killed
    assert readable(staging / f"searcher-state-{NEW}.pkl")
    assert readable(staging / f"experiment_state-{NEW}.json")
    assert not readable(experiment / f"searcher-state-{NEW}.pkl")  # half a pickle
    assert not readable(experiment / f"search_gen_state-{NEW}.json")  # empty
    half = experiment / f"experiment_state-{OLD}.json"
    text = half.read_text()
    half.write_text(text[:-3])
    assert not readable(half)


def test_torn_files_are_put_back_from_the_killed_drivers_staging_copy(killed):
    experiment, staging = killed
    (actions,) = mend_snapshots(experiment, roots=[staging.parents[4]])
    assert actions.startswith(f"snapshot of session {NEW} was torn: ") and str(staging) in actions
    for name in (f"search_gen_state-{NEW}.json", f"searcher-state-{NEW}.pkl"):
        assert (experiment / name).read_bytes() == (staging / name).read_bytes()
    assert _load_newest_checkpoint(str(experiment), "search_gen_state-*.json")["counter"] == 2
    assert _restored_trials(experiment) == {"a", "b"}  # the newest state, nothing lost
    assert not list(experiment.glob(f"*{UNREADABLE}"))
    assert mend_snapshots(experiment, roots=[staging.parents[4]]) == []  # whole now


def test_each_torn_file_is_taken_from_wherever_it_is_whole(killed):
    """CI's second kill landed while the driver rewrote its staging experiment state (a plain
    write) and Tune copied the search generator's state: each place has one torn file. The
    run directory's experiment state and the staged generator and searcher are one save."""
    experiment, staging = killed
    staged = staging / f"experiment_state-{NEW}.json"
    staged.write_text(staged.read_text()[:10])
    (action,) = mend_snapshots(experiment, roots=[staging.parents[4]])
    assert f"put back search_gen_state-{NEW}.json, searcher-state-{NEW}.pkl from" in action
    assert readable(experiment / f"experiment_state-{NEW}.json")  # kept, not the torn staging one
    assert _restored_trials(experiment) == {"a", "b"}


def test_another_runs_staging_copy_is_not_used(killed, tmp_path):
    """Session names are timestamps: another run started in the same second has staging
    files of the same names; they belong to another experiment and must not be put back."""
    experiment, staging = killed
    other = tmp_path / "ray2" / "session_y" / "artifacts" / "stamp" / "tune" / "driver_artifacts"
    _snapshot(other, NEW, tmp_path / "elsewhere" / "tune", ["z"])
    (action,) = mend_snapshots(experiment, roots=[other.parents[4]])
    assert "set aside" in action
    assert _restored_trials(experiment) == {"a"}


def test_without_a_staging_copy_the_torn_session_is_set_aside_whole(killed, tmp_path):
    experiment, _ = killed
    (action,) = mend_snapshots(experiment, roots=[tmp_path / "no-ray-here"])
    assert action == (f"snapshot of session {NEW} was torn: search_gen_state-{NEW}.json, "
                      f"searcher-state-{NEW}.pkl and has no whole staging copy; set aside as "
                      f"*{UNREADABLE}, restoring the session before it")
    # every file of the torn session, the whole experiment state too: one consistent snapshot
    assert sorted(p.name for p in experiment.glob(f"*{UNREADABLE}")) == sorted(
        f"{n}-{NEW}.{e}{UNREADABLE}" for n, e in
        (("experiment_state", "json"), ("search_gen_state", "json"), ("searcher-state", "pkl")))
    assert _load_newest_checkpoint(str(experiment), "search_gen_state-*.json")["counter"] == 1
    assert _restored_trials(experiment) == {"a"}
    assert json.loads((experiment / f"experiment_state-{OLD}.json").read_text())["trial_data"] == ["a"]


def test_a_session_whose_copy_stopped_before_some_files_counts_as_torn(killed):
    experiment, staging = killed
    for f in experiment.glob(f"*-{NEW}.*"):
        if not f.name.startswith("experiment_state"):
            f.unlink()  # the kill came after the first file of the session's first copy
    (action,) = mend_snapshots(experiment, roots=[staging.parents[4]])
    assert "search_gen_state missing" in action and "put back" in action
    assert _restored_trials(experiment) == {"a", "b"}


def test_whole_files_from_two_saves_are_replaced_by_the_staged_save(killed, tmp_path):
    """A kill between two files of one copy leaves whole files from two saves: here the
    experiment holds trials a and b while the search generator still counts 1, so Tune
    would start one trial more than requested."""
    experiment, staging = killed
    mixed = tmp_path / "mixed"
    _snapshot(mixed, NEW, experiment, ["a"])
    for kind in ("search_gen_state-{}.json", "searcher-state-{}.pkl"):
        name = kind.format(NEW)
        (experiment / name).write_bytes((mixed / name).read_bytes())
    (action,) = mend_snapshots(experiment, roots=[staging.parents[4]])
    assert "from two saves (2 trials, search generator counted 1, searcher asked 1)" in action
    assert "put back" in action and _restored_trials(experiment) == {"a", "b"}
    for name in (f"search_gen_state-{NEW}.json", f"searcher-state-{NEW}.pkl"):
        (experiment / name).write_bytes((mixed / name).read_bytes())
    (action,) = mend_snapshots(experiment, roots=[tmp_path / "no-ray-here"])  # nothing better
    assert action.endswith("has no staging copy from one save; restoring it as it is")
    assert not list(experiment.glob(f"*{UNREADABLE}"))


def test_a_torn_only_session_is_a_one_line_error_and_nothing_is_deleted(tmp_path):
    experiment = tmp_path / "runs" / "r" / "tune"
    _snapshot(experiment, NEW, experiment, ["a"])
    (experiment / f"search_gen_state-{NEW}.json").write_bytes(b"")
    with pytest.raises(RunError) as e:
        mend_snapshots(experiment, roots=[tmp_path / "no-ray-here"])
    assert str(experiment.resolve()) in str(e.value) and "\n" not in str(e.value)
    assert "start a new run" in str(e.value)
    assert len(list(experiment.glob(f"*{UNREADABLE}"))) == 3


def test_whole_snapshots_and_remote_storage_are_left_alone(tmp_path):
    experiment = tmp_path / "tune"
    _snapshot(experiment, OLD, experiment, ["a"])
    before = {p.name: p.read_bytes() for p in experiment.iterdir()}
    assert mend_snapshots(experiment, roots=[tmp_path]) == []
    assert {p.name: p.read_bytes() for p in experiment.iterdir()} == before
    assert mend_snapshots("s3://bucket/runs/r/tune") == []


def test_a_snapshot_tune_cannot_load_stops_the_resume_before_tune_restarts_over_it(tmp_path):
    """Tune logs "Failed to restore the run state" and restarts the experiment over the old
    one; a whole file that does not load (another version's classes) must stop us first."""
    experiment = tmp_path / "tune"
    _snapshot(experiment, NEW, experiment, ["a"])
    assert mend_snapshots(experiment, roots=[tmp_path]) == []  # what Ray wrote, Ray loads
    foreign = experiment / f"searcher-state-{NEW}.pkl"
    foreign.write_bytes(b"cautoml_removed_module\nOldSearcher\n.")  # protocol 0: GLOBAL, STOP
    assert readable(foreign)  # whole, so not torn
    with pytest.raises(RunError) as e:
        mend_snapshots(experiment, roots=[tmp_path])
    msg = str(e.value)
    assert foreign.name in msg and "ModuleNotFoundError" in msg and "\n" not in msg
