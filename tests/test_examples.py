"""The Python API example as it stands (``examples/python_api/search.py``): exit 0, the
user's family wins or at least runs, and the result it prints agrees with the run
directory. (``examples/user_model`` runs in ``test_user_model.py``, ``examples/regression``
in ``test_regression_e2e.py``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO


@pytest.mark.timeout(600)
def test_the_python_api_example_runs_as_it_stands(tmp_path):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    done = subprocess.run([sys.executable, str(REPO / "examples" / "python_api" / "search.py"),
                           "--output", str(tmp_path / "runs"), "--num-samples", "3"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "python-api" / "summary.json").read_text())
    assert summary["trials"]["total"] == 3
    assert summary["data"]["name"].endswith(".npz")  # the arrays, written once by content
    family = summary["winner"]["config"]["arch"]["family"]
    assert family in ("mynets:small_cnn", "mlp")
    assert f"family {family}, test accuracy {summary['test']['accuracy']:.4f}" in done.stdout
    assert "model.family" in done.stdout  # the leaderboard's columns
    assert "the first 5 digits: predicted [" in done.stdout
    runs = json.loads((tmp_path / "runs" / "python-api" / "trials.json").read_text())
    assert any(t["config"]["arch"]["family"] == "mynets:small_cnn" for t in runs)
