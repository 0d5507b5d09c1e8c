"""``automl dashboard RUN_DIR`` during a running sweep: optuna-dashboard (read-only on
``study.db``) shows the trials as they come, while the sweep writes to the same SQLite
file and ends normally (optuna-dashboard#545, optuna#820); the sweep's piped output has
its progress lines with the ETA. Both run as a user runs them:
``automl search`` and ``automl dashboard`` in processes of their own; every wait is
bounded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from conftest import REPO, write_spec

SPEC = """
name: live
model:
  family: mlp
  mlp: {depth: 1, width: {type: categorical, choices: [16, 32, 64]}}
training:
  optimizer: adam
  lr: {type: float, low: 1e-3, high: 1e-1, log: true}
  batch_size: 64
  epochs: {type: int, low: 3, high: 6, step: 3}
search: {num_samples: 10, seed: 0, n_startup_trials: 4}
scheduler: {grace_period: 1, reduction_factor: 3, max_epochs: 6}
selection: {top_k: 2, cv_folds: 2}
resources: {cpus_per_worker: 1, num_cpus: 2}
tracking: {backend: none, tensorboard: false}
registry: {enabled: false}
"""


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _until(what, timeout_s: float, proc=None, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            return what()
        time.sleep(every_s)
    return what()


def test_dashboard_shows_a_running_sweep_and_the_sweep_ends_normally(tmp_path):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    spec = write_spec(tmp_path, SPEC)
    run_dir = tmp_path / "runs" / "live"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "automl", "search", str(spec), "--output",
         str(tmp_path / "runs"), "--dashboard-port", "0"], cwd=REPO, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    board = None
    try:
        db = run_dir / "study.db"
        assert _until(lambda: db.is_file() and db.stat().st_size > 0, 120, sweep), \
            "the sweep wrote no study.db"
        board = subprocess.Popen([sys.executable, "-m", "automl", "dashboard", str(run_dir),
                                  "--port", "0"], cwd=REPO, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = board.stdout.readline()
        m = re.match(r"optuna-dashboard (http://127\.0\.0\.1:\d+)/dashboard/", first)
        assert m, first
        ray_line = board.stdout.readline()
        assert ray_line.startswith("ray dashboard    http://127.0.0.1:"), ray_line
        eta_line = board.stdout.readline()  # the job's latest estimate (or none yet)
        assert re.match(r"job              (none yet|sweep \d+/10  eta )", eta_line), eta_line
        base = m.group(1)
        (study,) = _get(f"{base}/api/studies")["study_summaries"]
        assert study["study_name"] == "live"
        seen: list[int] = []  # trials the dashboard showed, polled while the sweep runs
        while sweep.poll() is None and len(seen) < 200:
            seen.append(len(_get(f"{base}/api/studies/{study['study_id']}")["trials"]))
            time.sleep(0.25)
        out, _ = sweep.communicate(timeout=300)
        assert sweep.returncode == 0, out[-3000:]
        assert "database is locked" not in out
        # piped, so a line per event, each with done/total and an ETA (issue 16)
        # ... with its 80% range (issue 44)
        ranged = r"(\d+s \(\d+-\d+s\)|\d+m\d\ds \([\dms]+-[\dms]+\))"
        assert re.search(rf"^  trial \d+ .*\[\d+/10, elapsed \d+s, eta {ranged}\]$", out,
                         re.M), out
        assert re.search(rf"^cv     1/\d+  elapsed \d+s  eta {ranged}", out, re.M), out
        assert re.search(r"^refit  1/1  elapsed \d+s  eta 0s \(0-0s\)  trial \d+ on \d+ rows",
                         out, re.M)
        summary = json.loads((run_dir / "summary.json").read_text())
        history = summary["eta_history"]  # every estimate shown, with its range
        assert {"sweep", "cv", "refit"} <= set(history) and len(history["sweep"]) >= 10
        assert all(r["low_s"] <= r["eta_s"] <= r["high_s"] for h in history.values() for r in h)
        assert summary["trials"]["total"] == 10 and summary["trials"]["failed"] == 0
        assert max(seen) >= 1 and seen == sorted(seen)  # live: trials appeared as they came
        final = _get(f"{base}/api/studies/{study['study_id']}")["trials"]
        assert len(final) == 10 and all(t["state"] in ("Complete", "Pruned") for t in final)
    finally:
        for p in (sweep, board):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(30)
