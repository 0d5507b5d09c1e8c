"""``automl submit`` / ``status`` / ``stop`` end to end against a private
``ray start --head`` on loopback (token authentication on, as Ray 2.60 starts it), plus
the one-line errors that need no cluster."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from _rayhead import start_head
from conftest import write_spec
from typer.testing import CliRunner

from automl import jobs
from automl.cli import app
from automl.cluster import free_port

TINY = """
name: jobtiny
data: {source: wine}
model:
  family: mlp
  mlp: {depth: 1, width: {type: categorical, choices: [16, 32]}}
training:
  lr: {type: float, low: 1e-3, high: 1e-2, log: true}
  batch_size: 32
  epochs: 2
search: {num_samples: 2, seed: 0, n_startup_trials: 2}
scheduler: {type: none}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none, tensorboard: false}
resources: {cpus_per_worker: 1}
"""

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _spec_copy(job_id: str) -> Path:
    """Where a job on the local test head writes its spec (``jobs.entrypoint``)."""
    return Path(os.environ.get("TMPDIR", "/tmp")) / f"{job_id}.yaml"


def test_entrypoint_and_runtime_env():
    cmd = jobs.entrypoint("automl-x-1", {"name": "n 1", "output": "/mnt/runs", "num_samples": 4,
                                         "warm_start": None})
    assert cmd == ('trap \'rm -f "${TMPDIR:-/tmp}/automl-x-1.yaml"\' EXIT && '
                   "trap 'exit 143' TERM INT && "
                   'printf \'%s\' "$AUTOML_SPEC_YAML" > "${TMPDIR:-/tmp}/automl-x-1.yaml" && '
                   'python -m automl search "${TMPDIR:-/tmp}/automl-x-1.yaml" '
                   "--name 'n 1' --output /mnt/runs --num-samples 4")
    env = jobs.runtime_env("name: x\n", jobs.repo_root(), None)
    assert env["working_dir"] == str(jobs.repo_root()) and "pip" not in env
    assert {".venv", "runs", ".git", "benchmarks/results"} <= set(env["excludes"])
    assert env["env_vars"]["AUTOML_SPEC_YAML"] == "name: x\n"
    assert jobs.runtime_env("x", None, ["tqdm==4.67.1"]).get("working_dir") is None
    assert jobs.resolve_address("10.0.0.5:8265") == "http://10.0.0.5:8265"


def test_unreachable_address_is_one_line_exit_3(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    for args in (["status", "automl-x", "--address", url], ["stop", "automl-x", "--address", url],
                 ["submit", str(write_spec(tmp_path, TINY)), "--address", url,
                  "--output", str(tmp_path / "runs")]):
        res = _run(*args)
        assert res.exit_code == 3, res.output
        line = res.output.strip()
        assert "\n" not in line and line.startswith(f"error: {url}: cannot reach the Ray "
                                                    "dashboard")
        assert "--address http://HOST:8265" in line


def test_bad_spec_is_refused_before_any_cluster_is_contacted(tmp_path):
    res = _run("submit", str(write_spec(tmp_path, "search: {num_samplez: 2}\n")),
               "--address", f"http://127.0.0.1:{free_port()}")
    assert res.exit_code == 2 and "unknown key 'num_samplez'" in res.output


@pytest.fixture(scope="module")
def head():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("RAY_AUTH_MODE", raising=False)  # use_cluster_token sets it; undone after
        h = start_head(num_cpus=2)
        try:
            yield h
        finally:
            h.stop()


def test_submit_follows_the_logs_to_success(head, tmp_path):
    spec = write_spec(tmp_path, TINY)
    t0 = time.monotonic()
    res = _run("submit", str(spec), "--address", head.dashboard_url, "--name", "j1",
               "--output", str(tmp_path / "runs"), "--timeout", "400")
    took = time.monotonic() - t0
    assert res.exit_code == 0, res.output[-3000:]
    job_id = next(w for w in res.output.split() if w.startswith("automl-j1-"))
    assert f"job    {job_id} submitted to {head.dashboard_url}" in res.output
    # the job's own output, streamed: the sweep's stages as `automl search` prints them
    for line in ("ray    connected", "search 2 trials", "cv     top 1 trials", "winner trial"):
        assert line in res.output
    assert f"job    {job_id} SUCCEEDED" in res.output.splitlines()
    assert "Uploading package" not in res.output  # Ray's SDK chatter is kept quiet
    summary = json.loads((tmp_path / "runs" / "j1" / "summary.json").read_text())
    assert summary["trials"]["total"] == 2 and summary["name"] == "jobtiny"
    status = _run("status", job_id, "--address", head.dashboard_url)
    assert status.exit_code == 0 and status.output.startswith(f"{job_id}: SUCCEEDED (")
    assert f"results: {tmp_path / 'runs'}/j1" in status.output
    assert not _spec_copy(job_id).exists()  # the job's temporary spec file is gone
    print(f"submit + tiny job, followed to the end: {took:.1f}s")


def test_unknown_job_id_exits_2(head):
    for cmd in ("status", "stop"):
        res = _run(cmd, "automl-no-such-job", "--address", head.dashboard_url)
        assert res.exit_code == 2
        assert res.output.strip().startswith("error: automl-no-such-job: no such job on this "
                                             "cluster (list jobs with `ray job list --address")


def test_stop_ends_a_long_job(head, tmp_path):
    long = TINY.replace("num_samples: 2", "num_samples: 500").replace("epochs: 2", "epochs: 200")
    res = _run("submit", str(write_spec(tmp_path, long)), "--address", head.dashboard_url,
               "--name", "long", "--output", str(tmp_path / "runs"), "--no-follow")
    assert res.exit_code == 0, res.output
    job_id = next(w for w in res.output.split() if w.startswith("automl-long-"))
    deadline = time.monotonic() + 120
    while jobs.info(head.dashboard_url, job_id)["status"] == "PENDING":
        assert time.monotonic() < deadline, "job never started"
        time.sleep(1)
    t0 = time.monotonic()
    res = _run("stop", job_id, "--address", head.dashboard_url, "--timeout", "60")
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"{job_id} STOPPED"
    assert jobs.info(head.dashboard_url, job_id)["status"] == "STOPPED"
    assert time.monotonic() - t0 < 60
    again = _run("stop", job_id, "--address", head.dashboard_url)
    assert again.exit_code == 0 and again.output.strip() == f"{job_id} had already ended: STOPPED"
    assert not _spec_copy(job_id).exists()  # removed when the job was stopped, too
