"""Ctrl-C (SIGINT to the driver, as ``kill -INT`` sends it) twice before any trial ended,
then during the resumed sweep, then in its resumed run's cross-validation: each exits 130
within 15 s, says in one line how to resume, publishes nothing (no summary, no registry version), leaves its
running trials RUNNING in the study (not failed), and ``--resume`` then finishes every
requested trial with exit 0. Plus the pieces without Ray: the handler and the rule that a
stage interrupted on the way out is not saved as finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from conftest import REPO, write_spec

SPEC = """
name: ctrlc
model: {family: mlp, mlp: {depth: 1, width: {type: categorical, choices: [32, 64, 128]}}}
training:
  optimizer: adam
  lr: {type: float, low: 1e-3, high: 1e-2, log: true}
  batch_size: 64
  epochs: {type: int, low: 3, high: 6, step: 3}
  init: default
search: {num_samples: 4, seed: 0, sampler: tpe, n_startup_trials: 3}
scheduler: {grace_period: 1, reduction_factor: 3, max_epochs: 6}
selection: {top_k: 2, cv_folds: 2}
tracking: {backend: none, tensorboard: false}
registry: {enabled: true}
resources: {num_cpus: 2}
"""
#: what issue 45 allows from the first Ctrl-C to the driver's exit
EXIT_WITHIN_S = 15.0
#: the spec's search.num_samples
TRIALS = 4


def _start(args, log: Path):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    return subprocess.Popen([sys.executable, "-m", "automl", *args], cwd=REPO, env=env,
                            stdout=open(log, "a"), stderr=subprocess.STDOUT,  # noqa: SIM115
                            start_new_session=True)


def _events(run: Path, kind: str) -> int:
    path = run / "trials.jsonl"
    return path.read_text().count(f'"event": "{kind}"') if path.exists() else 0


def _wait_for(proc, cond, what: str, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if cond():
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"the job ended or stalled before {what}: {log.read_text()[-2000:]}")


def _ctrl_c(proc) -> float:
    """SIGINT to the driver; seconds until it exited."""
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    proc.wait(60)
    return time.monotonic() - t0


def _registered(out: Path) -> list[Path]:
    return sorted((out / "registry").glob("*/[0-9]*"))


def _study(run: Path) -> optuna.Study:
    return optuna.load_study(study_name="ctrlc", storage=f"sqlite:///{run / 'study.db'}")


def _resume_to_the_end(spec: Path, out: Path, log: Path) -> dict:
    proc = _start(["search", str(spec), "--output", str(out), "--resume",
                   "--dashboard-port", "0"], log)
    assert proc.wait(400) == 0, log.read_text()[-3000:]
    run = out / "ctrlc"
    summary = json.loads((run / "summary.json").read_text())
    trials = json.loads((run / "trials.json").read_text())
    assert summary["trials"]["total"] == TRIALS == len(trials)
    assert sorted(int(t["trial_id"]) for t in trials) == list(range(TRIALS))  # none lost or twice
    assert summary["trials"]["failed"] == 0
    for t in trials:  # every history whole: epochs 1..n once each
        assert [h["epoch"] for h in t["history"]] == list(range(1, t["epochs_run"] + 1))
    told = [t for t in _study(run).trials if "automl.duplicate_of" not in t.user_attrs]
    assert len(told) == TRIALS and all(t.state.is_finished() for t in told)
    assert _registered(out), "the finished job registers its winner"
    return summary


def _interrupted_output(log: Path, spec: Path, out: Path) -> str:
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("interrupted")]
    assert len(lines) == 1, text[-3000:]
    assert lines[0].endswith(f"resume with: automl search {spec} --resume --output {out}")
    assert "nothing was published" in lines[0]
    assert "Tuner.restore" not in text and "Traceback" not in text, text[-3000:]
    return lines[0]


def _hard_stop_before_any_trial_ended(spec: Path, out: Path, log: Path) -> None:
    """A fresh job; once a trial started, Ctrl-C twice: the second stops it at once (exit
    130, nothing waited for), with the Ray instance it started."""
    import psutil

    run = out / "ctrlc"
    proc = _start(["search", str(spec), "--output", str(out), "--dashboard-port", "0"], log)
    _wait_for(proc, lambda: _events(run, "start") >= 1, "a trial started", log)
    session = json.loads((run / "ray.json").read_text())["session_dir"]
    os.kill(proc.pid, signal.SIGINT)
    _wait_for(proc, lambda: "interrupt: stopping the job" in log.read_text(),
              "the first Ctrl-C was acknowledged", log, timeout_s=30)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(30) == 130
    assert time.monotonic() - t0 < 3.0  # at once: nothing waited for
    assert "interrupt: stopped at once" in log.read_text()
    assert _events(run, "end") == 0  # no trial had ended
    # the Ray instance it started went with it (SIGKILL of every process it started)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [p.pid for p in psutil.process_iter(["cmdline"])
                 if any(session in a for a in (p.info["cmdline"] or []))]
        if not alive:
            break
        time.sleep(0.1)
    assert not alive
    assert not (run / "summary.json").exists() and not _registered(out)


@pytest.mark.timeout(600)
def test_ctrl_c_twice_then_in_the_sweep_then_in_cross_validation_each_resumes_to_the_end(
        tmp_path):
    """One job stopped three times: a second Ctrl-C before any trial ended (stops at once),
    resumed; Ctrl-C in its sweep (running trials stay RUNNING, the resume continues them
    from their checkpoints); resumed, Ctrl-C in its cross-validation (not swallowed; the
    next resume keeps the search and the logged folds); resumed to the end. One job for
    the three: a fresh job per stop ran the sweep and the resume to the end three times."""
    spec, out = write_spec(tmp_path, SPEC), tmp_path / "runs"
    run = out / "ctrlc"
    folds = run / "cv_folds.jsonl"
    _hard_stop_before_any_trial_ended(spec, out, tmp_path / "job0.log")

    # resumed after the hard stop; Ctrl-C in the sweep
    log = tmp_path / "job1.log"
    proc = _start(["search", str(spec), "--output", str(out), "--resume",
                   "--dashboard-port", "0"], log)
    _wait_for(proc, lambda: _events(run, "end") >= 2, "2 trials ended", log)
    assert _ctrl_c(proc) <= EXIT_WITHIN_S and proc.returncode == 130
    line = _interrupted_output(log, spec, out)
    assert "in stage search;" in line
    assert not (run / "stages" / "search.json").exists()  # interrupted: not finished
    assert not (run / "summary.json").exists() and not _registered(out)
    states = [t.state for t in _study(run).trials]
    assert optuna.trial.TrialState.RUNNING in states  # resumable, not marked failed
    assert optuna.trial.TrialState.FAIL not in states

    # resumed: the trials continue from their checkpoints; Ctrl-C in cross-validation
    log = tmp_path / "job2.log"
    proc = _start(["search", str(spec), "--output", str(out), "--resume",
                   "--dashboard-port", "0"], log)
    _wait_for(proc, lambda: folds.exists() and folds.read_text().count("\n") >= 1,
              "the first fold training was logged", log)
    assert "continue from their checkpoints" in log.read_text()
    assert _ctrl_c(proc) <= EXIT_WITHIN_S and proc.returncode == 130
    line = _interrupted_output(log, spec, out)
    assert "in stage cv (search finished before)" in line
    assert (run / "stages" / "search.json").exists() and not (run / "stages" / "cv.json").exists()
    assert not (run / "summary.json").exists() and not _registered(out)

    log = tmp_path / "job3.log"
    _resume_to_the_end(spec, out, log)
    text = log.read_text()
    assert "resume stage search finished before" in text
    assert "fold trainings done before the resume" in text  # the logged folds are kept


# ------------------------------------------------------------------------- without Ray
def test_the_first_ctrl_c_raises_and_sets_the_flag_the_second_hard_stops(monkeypatch):
    from automl import _interrupt

    said, stopped, exits = [], [], []
    handler = _interrupt.JobInterrupts(said.append, hard_stop=lambda: stopped.append(1))
    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(os, "_exit", exits.append)
    try:
        with handler:
            assert signal.getsignal(signal.SIGINT) == handler._handle
            assert not _interrupt.interrupted()
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises in this thread at once; never slept out
            assert _interrupt.interrupted() and said[-1].startswith("interrupt: stopping")
            with pytest.raises(KeyboardInterrupt):
                _interrupt.check()
            handler._handle(signal.SIGINT, None)  # the second: hard stop, then exit 130
            assert stopped == [1] and exits == [130] and said[-1] == "interrupt: stopped at once"
    finally:
        monkeypatch.undo()
    assert signal.getsignal(signal.SIGINT) == before  # restored on the way out
    with handler:
        assert not _interrupt.interrupted()  # a new job starts uninterrupted
    _interrupt.check()


def test_a_stage_that_returns_after_a_ctrl_c_is_not_saved_as_finished(tmp_path):
    """A library that swallowed the interrupt (Ray Tune's own handler did) or a stage on
    another thread returns normally: the stage must not count as finished."""
    from rich.console import Console

    from automl import _interrupt
    from automl.pipeline import Stages

    stages = Stages(tmp_path, resume=False, console=Console(quiet=True))
    assert stages.run("search", lambda: {"ok": 1}) == {"ok": 1}
    _interrupt._FLAG.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            stages.run("cv", lambda: {"ok": 2})
    finally:
        _interrupt._FLAG.clear()
    assert stages.saved("search") and stages.saved("cv") is None


def test_tunes_own_sigint_handler_is_off_during_the_sweep():
    """``tune.run`` installs a handler that ends the sweep as if it had finished and stays
    installed after it; the sweep turns it off with Tune's public switch."""
    from automl._interrupt import no_tune_handler

    os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
    with no_tune_handler():
        assert os.environ["TUNE_DISABLE_SIGINT_HANDLER"] == "1"
        from ray.tune.tune import _setup_signal_catching

        before = signal.getsignal(signal.SIGINT)
        _setup_signal_catching()
        assert signal.getsignal(signal.SIGINT) is before
    assert "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ
