"""Without ``--address`` the job starts a new local Ray instance of its own, whatever the
machine holds: here the address file a killed ``ray start`` leaves in Ray's temp folder
(``ray_current_cluster``, pointing at a cluster that is gone), which plain ``ray.init()``
reads and then refuses ``num_cpus`` ("When connecting to an existing cluster, num_cpus
and num_gpus must not be provided", exit 3 before)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO

PROBE = """
from automl import cluster
handle = cluster.connect(num_cpus=1, object_store_mb=100, dashboard_port=0)
import ray
print("started", handle.started, ray.cluster_resources().get("CPU"))
cluster.shutdown(handle)
"""


@pytest.mark.timeout(180)
def test_a_stale_ray_address_file_is_not_joined():
    # a short folder: Ray's socket paths under it must stay below the OS's 107 bytes
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    try:
        (temp / "ray").mkdir()
        (temp / "ray" / "ray_current_cluster").write_text("127.0.0.1:1\n")  # nobody there
        env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=150)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "started True 1.0" in out.stdout
        assert (temp / "ray" / "ray_current_cluster").read_text() == "127.0.0.1:1\n"
    finally:
        shutil.rmtree(temp, ignore_errors=True)
