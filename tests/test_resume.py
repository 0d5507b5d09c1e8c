"""Kill the driver of a real sweep (SIGKILL, its whole process group) at several points,
resume, and check nothing is lost or done twice."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import optuna
import pytest
from conftest import REPO, write_spec

SPEC = """
name: crashy
model: {family: mlp, mlp: {depth: 1, width: {type: categorical, choices: [32, 64, 128]}}}
training:
  optimizer: adam
  lr: {type: float, low: 1e-3, high: 1e-2, log: true}
  batch_size: 64
  epochs: {type: int, low: 3, high: 6, step: 3}
  init: default
search: {num_samples: 8, seed: 0, sampler: tpe, n_startup_trials: 3}
scheduler: {grace_period: 1, reduction_factor: 3, max_epochs: 6}
selection: {top_k: 2, cv_folds: 2}
tracking: {backend: none}
resources: {num_cpus: 2}
"""


def _start(args, cwd):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    return subprocess.Popen([sys.executable, "-m", "automl", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _lines(path):
    return path.read_text().splitlines() if path.exists() else []


def _kill_after(proc, log, n_lines, timeout_s=180):
    """SIGKILL the driver's process group once ``log`` has ``n_lines`` lines."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if len(_lines(log)) >= n_lines:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            return
        time.sleep(0.1)
    out = proc.stdout.read() if proc.stdout else ""
    pytest.fail(f"sweep ended or stalled before {n_lines} epoch lines: {out[-2000:]}")


@pytest.mark.timeout(600)
def test_driver_killed_twice_then_resumed_loses_and_repeats_nothing(tmp_path):
    spec = write_spec(tmp_path, SPEC)
    out = tmp_path / "runs"
    run = out / "r"
    log = run / "trials.jsonl"
    common = ["--output", str(out), "--name", "r", "--dashboard-port", "0"]

    _kill_after(_start(["search", str(spec), *common], REPO), log, 3)  # kill 1: early
    before = len(_lines(log))
    _kill_after(_start(["search", str(spec), "--resume", *common], REPO), log, before + 6)
    # CI once killed the driver while Tune copied its snapshot into the run dir (no rename):
    # the newest search_gen_state was empty and Tune restored nothing. Tear it on purpose.
    newest = max((run / "tune").glob("search_gen_state-*.json"))
    newest.write_bytes(b"")
    proc = _start(["resume", str(run), "--dashboard-port", "0"], REPO)  # kill 2 survived
    output, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, output[-3000:]
    name = re.escape(newest.name)  # mended from the killed driver's staging copy
    assert re.search(rf"was torn: [^\n]*{name}[^\n]*; put back [^\n]*{name}[^\n]* from /", output), output
    assert re.search(r"ASHA rungs rebuilt from trials.jsonl: [1-9]\d* rung results", output), output

    summary = json.loads((run / "summary.json").read_text())
    trials = json.loads((run / "trials.json").read_text())
    assert summary["trials"]["total"] == 8 == len(trials)  # as many as requested
    assert len({t["trial_id"] for t in trials}) == 8
    assert summary["trials"]["failed"] == 0
    for t in trials:  # every trial's history is whole: epochs 1..n once each
        assert [h["epoch"] for h in t["history"]] == list(range(1, t["epochs_run"] + 1))
        if t["end_state"] == "stopped_early":  # ASHA's rungs were rebuilt: stops only at one
            assert t["epochs_run"] in (1, 3), t
    study = optuna.load_study(study_name="crashy", storage=f"sqlite:///{run / 'study.db'}")
    told = [t for t in study.trials if t.state != optuna.trial.TrialState.RUNNING]
    assert len(told) == 8  # the searcher kept its history and saw every trial end once

    # resuming a finished run says so and changes nothing
    mtime = (run / "summary.json").stat().st_mtime
    again = subprocess.run([sys.executable, "-m", "automl", "resume", str(run)], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already finished" in again.stdout
    assert (run / "summary.json").stat().st_mtime == mtime


def test_history_of_a_trial_resumed_then_stopped_earlier_ends_at_its_last_run(tmp_path):
    """CI found it: run 1 logged epochs 1-3 of a trial, then the driver was killed before
    Tune's snapshot saw epoch 3; run 2 restored the trial from its epoch-1 checkpoint and
    ASHA (whose rungs Tune does not snapshot) stopped it at epoch 2. The file holds both
    runs; its history must be the second run's, epochs 1-2, as the live callback kept it."""
    from automl.search._progress import add_report, load_history

    log = tmp_path / "trials.jsonl"
    runs = [("a", 1, 0.5), ("a", 2, 0.6), ("b", 1, 0.4), ("a", 3, 0.7),  # run 1, killed
            ("a", 2, 0.55), ("b", 2, 0.45)]  # run 2: "a" re-ran epoch 2 and stopped there
    lines = [json.dumps({"trial_id": t, "time": 0.0, "epoch": e, "val_accuracy": v})
             for t, e, v in runs]
    log.write_text("\n".join(lines) + '\n{"trial_id": "b", "epo')  # torn last line
    history = load_history(log)
    assert [(r["epoch"], r["val_accuracy"]) for r in history["a"]] == [(1, 0.5), (2, 0.55)]
    assert [r["epoch"] for r in history["b"]] == [1, 2]
    assert "time" not in history["a"][0] and "trial_id" not in history["a"][0]

    live: list[dict] = []
    for t, e, v in runs:
        if t == "a":
            add_report(live, {"epoch": e, "val_accuracy": v})
    assert live == history["a"]


def test_asha_rungs_rebuilt_on_resume_judge_as_the_first_run_did():
    """Tune does not snapshot its scheduler; ResumableASHA.seed_rungs puts the rungs back."""
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler

    from automl.search._scheduler import ResumableASHA

    history = {  # trials.jsonl of the crashed run: rungs at epochs 1 and 3 (max 6, factor 3)
        "a": [{"epoch": 1, "val_accuracy": 0.9}, {"epoch": 2, "val_accuracy": 0.92},
              {"epoch": 3, "val_accuracy": 0.95}],
        "b": [{"epoch": 1, "val_accuracy": 0.8}],
        "c": [{"epoch": 1, "val_accuracy": 0.7}],
        "e": [{"epoch": 1, "val_accuracy": 0.95}, {"epoch": 3, "val_accuracy": 0.9}],
    }

    def asha(seed: bool):
        s = ResumableASHA(time_attr="epoch", max_t=6, grace_period=1, reduction_factor=3)
        s.set_search_properties("val_accuracy", "max")
        for t in "abcde":
            s.on_trial_add(None, SimpleNamespace(trial_id=t))
        if seed:
            assert s.seed_rungs(history, "val_accuracy", "max") == 6
        return s

    def report(s, trial, epoch, acc):
        return s.on_trial_result(None, SimpleNamespace(trial_id=trial),
                                 {"epoch": epoch, "val_accuracy": acc})

    STOP, GO = TrialScheduler.STOP, TrialScheduler.CONTINUE
    seeded, empty = asha(True), asha(False)
    # a new trial below the rebuilt rung-1 cutoff stops; with empty rungs nothing is compared
    assert (report(seeded, "d", 1, 0.6), report(empty, "d", 1, 0.6)) == (STOP, GO)
    # b resumed from its epoch-1 checkpoint: not judged again at epoch 2, a non-rung epoch
    assert (report(seeded, "b", 2, 0.5), report(empty, "b", 2, 0.5)) == (GO, STOP)
    # a re-runs rung 3, where it was seeded: judged again there, against e's 0.9
    assert report(seeded, "a", 3, 0.5) == STOP
    assert report(seeded, "a", 3, 0.5) == GO  # judged once per rung, as Ray's ASHA does
    # a minimising sweep stores negated values, as Ray's ASHA does
    low = ResumableASHA(time_attr="epoch", max_t=6, grace_period=1, reduction_factor=3)
    low.set_search_properties("val_loss", "min")
    low.on_trial_add(None, SimpleNamespace(trial_id="x"))
    assert low.seed_rungs({"y": [{"epoch": 1, "val_loss": 0.1}],
                           "z": [{"epoch": 1, "val_loss": 0.2}]}, "val_loss", "min") == 2
    assert low.on_trial_result(None, SimpleNamespace(trial_id="x"),
                               {"epoch": 1, "val_loss": 0.3}) == STOP


def test_checkpoints_and_rebuilt_rungs_sit_where_asha_judges_also_with_a_fractional_factor():
    """With reduction_factor 2.5 the rungs are 1, 2.5, 6.25, 15.6 epochs; Ray's ASHA judges
    a trial at its first report at or past a rung (epochs 1, 3, 7, 16), so a stopped
    trial's last checkpoint is its last epoch only if checkpoints are taken there."""
    from types import SimpleNamespace

    from automl.search._scheduler import make_scheduler, rung_epochs
    from automl.search._trainable import checkpoint_epochs
    from automl.spec import Experiment

    exp = Experiment.model_validate({"name": "x", "training": {"epochs": 20}, "scheduler": {
        "grace_period": 1, "reduction_factor": 2.5, "max_epochs": 20}})
    assert rung_epochs(exp) == [1, 3, 7, 16]
    assert checkpoint_epochs(exp, 20) == {1, 3, 7, 16, 20}
    assert checkpoint_epochs(exp, 5) == {1, 3, 5}
    asha = make_scheduler(exp)
    asha.set_search_properties("val_accuracy", "max")
    trial = SimpleNamespace(trial_id="a")
    asha.on_trial_add(None, trial)
    judged = []
    for epoch in range(1, 8):
        asha.on_trial_result(None, trial, {"epoch": epoch, "val_accuracy": epoch / 10})
        judged += [epoch] if sum("a" in r for _, r in asha._brackets[0]._rungs) > len(judged) else []
    assert judged == [1, 3, 7]  # Ray's own decisions, at the epochs listed above
    again = make_scheduler(exp)
    assert again.seed_rungs({"a": [{"epoch": e, "val_accuracy": e / 10} for e in range(1, 8)]},
                            "val_accuracy", "max") == 3
    assert {m: r["a"] for m, r in again._brackets[0]._rungs if "a" in r} == {
        1: 0.1, 2.5: 0.3, 6.25: 0.7}
    assert rung_epochs(Experiment.model_validate({"name": "x", "scheduler": {"type": "none"}})) == []


def test_resume_without_a_name_picks_the_newest_unfinished_run(tmp_path):
    from automl.errors import SpecError
    from automl.pipeline import find_unfinished
    from automl.spec import Experiment

    exp = Experiment.model_validate({"name": "x"})
    for i, (run, finished) in enumerate([("x", True), ("x-2", False), ("x-3", True),
                                         ("x-4", False), ("x-5", True), ("xy", False)]):
        (tmp_path / run).mkdir()
        (tmp_path / run / "spec.yaml").write_text("name: x\n")
        if finished:
            (tmp_path / run / "summary.json").write_text("{}")
        os.utime(tmp_path / run, (1000 + i, 1000 + i))
    assert find_unfinished(exp, str(tmp_path), None).name == "x-4"  # not x-5 (finished), not xy
    assert find_unfinished(exp, str(tmp_path), "x-2").name == "x-2"
    (tmp_path / "x-2" / "summary.json").write_text("{}")
    (tmp_path / "x-4" / "summary.json").write_text("{}")
    for run, t in (("x-2", 1001), ("x-4", 1003)):  # writing a summary touches the folder
        os.utime(tmp_path / run, (t, t))
    assert find_unfinished(exp, str(tmp_path), None).name == "x-5"  # all finished: the newest
    with pytest.raises(SpecError, match="no run of 'z' to resume"):
        find_unfinished(exp, str(tmp_path), "z")
