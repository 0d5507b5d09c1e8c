"""Kill the driver of a real sweep (SIGKILL, its whole process group), resume from the run
directory alone, and check nothing is lost or done twice; plus the pieces resume stands on:
the ledger's one history rule, the rung policy rebuilt from it, the Ray instance a killed
driver left."""

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
search: {num_samples: 6, seed: 0, sampler: tpe, n_startup_trials: 3}
scheduler: {grace_period: 1, reduction_factor: 3, max_epochs: 6}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: wandb, mode: offline, tensorboard: true}
registry: {enabled: false}
resources: {num_cpus: 2}
"""


def _start(args, cwd):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    return subprocess.Popen([sys.executable, "-m", "automl", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _reports(path):
    if not path.exists():
        return 0
    return sum('"event"' not in line for line in path.read_text().splitlines())


def _kill_after(proc, log, n_reports, timeout_s=240):
    """SIGKILL the driver's process group once ``log`` holds ``n_reports`` epoch reports."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if _reports(log) >= n_reports:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            return
        time.sleep(0.1)
    out = proc.stdout.read() if proc.stdout else ""
    pytest.fail(f"sweep ended or stalled before {n_reports} epoch reports: {out[-2000:]}")


def _alive_in(session_dirs):
    import psutil

    hits = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(
                s in a for s in session_dirs for a in (p.info["cmdline"] or [])):
            hits.append(p.pid)
    return hits


@pytest.mark.timeout(600)
def test_driver_killed_twice_then_resumed_loses_and_repeats_nothing(tmp_path):
    spec = write_spec(tmp_path, SPEC)
    out = tmp_path / "runs"
    run = out / "r"
    log = run / "trials.jsonl"
    common = ["--output", str(out), "--name", "r", "--dashboard-port", "0"]
    sessions = []

    _kill_after(_start(["search", str(spec), *common], REPO), log, 3)  # kill 1: early
    sessions.append(json.loads((run / "ray.json").read_text())["session_dir"])
    _kill_after(_start(["search", str(spec), "--resume", *common], REPO), log, _reports(log) + 5)
    sessions.append(json.loads((run / "ray.json").read_text())["session_dir"])
    proc = _start(["resume", str(run), "--dashboard-port", "0"], REPO)
    output, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, output[-3000:]
    assert re.search(r"resume \d+ trials finished, \d+ continue from their checkpoints", output)
    assert not _alive_in(sessions)  # nothing of the killed drivers' Ray instances is left
    assert not (run / "ray.json").exists()  # the last driver stopped its own instance

    summary = json.loads((run / "summary.json").read_text())
    trials = json.loads((run / "trials.json").read_text())
    assert summary["trials"]["total"] == 6 == len(trials)  # as many as requested
    assert sorted(int(t["trial_id"]) for t in trials) == list(range(6))  # study numbers
    assert summary["trials"]["failed"] == 0
    for t in trials:  # every trial's history is whole: epochs 1..n once each
        assert [h["epoch"] for h in t["history"]] == list(range(1, t["epochs_run"] + 1))
        if t["end_state"] == "stopped_early":  # rungs rebuilt: stops only at one (1 or 3)
            assert t["epochs_run"] in (1, 3), t
    study = optuna.load_study(study_name="crashy", storage=f"sqlite:///{run / 'study.db'}")
    told = [t for t in study.trials if "automl.duplicate_of" not in t.user_attrs]
    assert len(told) == 6 and all(t.state.is_finished() for t in told)
    # one W&B run per trial, resumed runs continuing under the same id
    ids = {}
    for d in (run / "wandb").glob("offline-run-*"):
        ids.setdefault(d.name.rsplit("-", 1)[-1], []).append(d)
    assert len(ids) == 6

    # resuming a finished run says so and changes nothing
    mtime = (run / "summary.json").stat().st_mtime
    again = subprocess.run([sys.executable, "-m", "automl", "resume", str(run)], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already finished" in again.stdout
    assert (run / "summary.json").stat().st_mtime == mtime


def test_history_of_a_trial_resumed_then_stopped_earlier_ends_at_its_last_run(tmp_path):
    """Run 1 logged epochs 1-3 of a trial, then the driver was killed; run 2 restored the
    trial from its epoch-1 checkpoint and it stopped at epoch 2. The file holds both runs;
    its history must be the second run's, epochs 1-2, as the live ledger kept it."""
    from automl.search._ledger import add_report, load_history

    log = tmp_path / "trials.jsonl"
    runs = [("1", 1, 0.5), ("1", 2, 0.6), ("2", 1, 0.4), ("1", 3, 0.7),  # run 1, killed
            ("1", 2, 0.55), ("2", 2, 0.45)]  # run 2: trial 1 re-ran epoch 2 and stopped
    lines = [json.dumps({"trial_id": t, "time": 0.0, "epoch": e, "val_accuracy": v})
             for t, e, v in runs]
    lines.insert(0, json.dumps({"trial_id": "1", "time": 0.0, "event": "start",
                                "params": {"x": 1}, "config": {"x": 1}, "target": 3}))
    log.write_text("\n".join(lines) + '\n{"trial_id": "2", "epo')  # torn last line
    history = load_history(log)
    assert [(r["epoch"], r["val_accuracy"]) for r in history["1"]] == [(1, 0.5), (2, 0.55)]
    assert [r["epoch"] for r in history["2"]] == [1, 2]
    assert "time" not in history["1"][0] and "trial_id" not in history["1"][0]
    live: list[dict] = []
    for t, e, v in runs:
        if t == "1":
            add_report(live, {"epoch": e, "val_accuracy": v})
    assert live == history["1"]


def test_a_leftover_ray_instance_is_stopped_and_a_live_driver_refused(tmp_path):
    """What a killed driver left (processes naming its session folder, and the processes
    it recorded) is stopped; a run whose driver still lives is not resumed."""
    import psutil

    from automl.cluster import stop_leftover
    from automl.errors import RunError

    session = str(tmp_path / "session_2026-01-01_00-00-00_1_1")
    # a stand-in for a raylet of that session: its command line names the session folder
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                               f"--session_dir={session}"])
    recorded = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        rec = {"driver_pid": dead.pid, "driver_started": time.time() - 5,
               "session_dir": session, "gcs_address": "127.0.0.1:1",
               "processes": [{"pid": recorded.pid, "name": "raylet",
                              "started": psutil.Process(recorded.pid).create_time()}]}
        (tmp_path / "ray.json").write_text(json.dumps(rec))
        line = stop_leftover(tmp_path)
        assert line and "2 processes" in line and "session_2026-01-01" in line
        assert orphan.wait(10) is not None and recorded.wait(10) is not None
        assert not (tmp_path / "ray.json").exists()
        assert stop_leftover(tmp_path) is None  # nothing recorded: nothing to do
        me = psutil.Process(os.getppid())  # a live process standing in for the driver
        (tmp_path / "ray.json").write_text(json.dumps(
            {**rec, "driver_pid": me.pid, "driver_started": me.create_time()}))
        with pytest.raises(RunError, match=f"still running \\(pid {me.pid}\\)"):
            stop_leftover(tmp_path)
    finally:
        for p in (orphan, recorded):
            p.kill()
            p.wait()
