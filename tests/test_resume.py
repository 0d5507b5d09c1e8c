"""Kill the driver of a real sweep (SIGKILL, its whole process group) at several points,
resume, and check nothing is lost or done twice."""

from __future__ import annotations

import json
import os
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
    proc = _start(["resume", str(run), "--dashboard-port", "0"], REPO)  # kill 2 survived
    output, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, output[-3000:]

    summary = json.loads((run / "summary.json").read_text())
    trials = json.loads((run / "trials.json").read_text())
    assert summary["trials"]["total"] == 8 == len(trials)  # as many as requested
    assert len({t["trial_id"] for t in trials}) == 8
    assert summary["trials"]["failed"] == 0
    for t in trials:  # every trial's history is whole: epochs 1..n once each
        assert [h["epoch"] for h in t["history"]] == list(range(1, t["epochs_run"] + 1))
    study = optuna.load_study(study_name="crashy", storage=f"sqlite:///{run / 'study.db'}")
    told = [t for t in study.trials if t.state != optuna.trial.TrialState.RUNNING]
    assert len(told) == 8  # the searcher kept its history and saw every trial end once

    # resuming a finished run says so and changes nothing
    mtime = (run / "summary.json").stat().st_mtime
    again = subprocess.run([sys.executable, "-m", "automl", "resume", str(run)], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already finished" in again.stdout
    assert (run / "summary.json").stat().st_mtime == mtime
