"""A private ``ray start --head --block`` for tests, on free ports, in its own temp dir
and process group, stopped by killing that group only.

Never ``ray stop``: it kills every Ray instance on the machine, other people's too (and
``ray.cluster_utils.AutoscalingCluster`` calls ``ray stop --force`` in start and shutdown,
which is why the autoscaling test starts its fake cluster here instead).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from automl.cluster import free_port

VENV_BIN = Path(sys.executable).parent


@dataclass
class Head:
    proc: subprocess.Popen
    gcs_address: str
    dashboard_url: str
    temp_dir: Path
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM to this head's process group, SIGKILL to whatever is left after
        ``grace_s`` (worker nodes the fake autoscaler started are in the group too)."""
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(pgid):
                time.sleep(0.2)
            if not _group_alive(pgid):
                break
        self.proc.wait(timeout=5)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # zombies still count for killpg; a group of zombies only is gone for our purposes
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True)
    return any(s.strip() and not s.strip().startswith("Z") for s in out.stdout.splitlines())


def _ray_env(extra: dict | None = None) -> dict:
    """This process's environment for a ``ray start``: the venv's ``ray`` first on PATH,
    usage stats off, no address of another cluster."""
    run_env = {**os.environ, **(extra or {}), "RAY_USAGE_STATS_ENABLED": "0",
               "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    run_env.pop("RAY_ADDRESS", None)
    run_env.pop("RAY_API_SERVER_ADDRESS", None)
    return run_env


def start_head(num_cpus: int, *, autoscaling: dict | None = None, env: dict | None = None,
               object_store_mb: int = 150, timeout_s: float = 90.0,
               dashboard: bool = True) -> Head:
    """Start a head node and wait (at most ``timeout_s``) until its Jobs API answers
    (``dashboard=False``: ``--include-dashboard=false``, ready once ``ray start`` says the
    runtime started; no Jobs or State API then).

    ``autoscaling``: worker node types for Ray's fake multi-node provider
    (``{"cpu_node": {"resources": {"CPU": 1}, "min_workers": 0, "max_workers": 2}}``)
    plus ``idle_timeout_minutes``; the head then runs the v1 autoscaler, which starts
    worker nodes as local processes.
    """
    import ray._private.services as services

    temp = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))  # short: socket paths <= 107
    port, dport = free_port(), free_port()
    run_env = _ray_env(env)
    cmd = [str(VENV_BIN / "ray"), "start", "--head", "--block", f"--port={port}",
           f"--num-cpus={num_cpus}", "--dashboard-host=127.0.0.1", f"--dashboard-port={dport}",
           f"--include-dashboard={str(dashboard).lower()}",
           f"--ray-client-server-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}",
           f"--dashboard-agent-grpc-port={free_port()}", f"--metrics-export-port={free_port()}",
           f"--object-store-memory={object_store_mb * 1024 * 1024}", f"--temp-dir={temp}"]
    ip = services.get_node_ip_address()
    if autoscaling is not None:
        cfg_path = temp / "autoscaling.json"
        cfg_path.write_text(json.dumps(fake_cluster_config(autoscaling, f"{ip}:{port}", num_cpus)))
        cmd.append(f"--autoscaling-config={cfg_path}")
        run_env.update(RAY_FAKE_CLUSTER="1", AUTOSCALER_UPDATE_INTERVAL_S="1")
    log = temp / "head.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=run_env,
                                start_new_session=True, cwd=temp)
    head = Head(proc, f"{ip}:{port}", f"http://127.0.0.1:{dport}", temp, log)
    try:
        _wait_ready(head, timeout_s) if dashboard else _wait_started(head, timeout_s)
    except BaseException:
        head.stop()
        raise
    return head


def _wait_ready(head: Head, timeout_s: float) -> None:
    from ray.job_submission import JobSubmissionClient

    from automl.cluster import use_cluster_token

    use_cluster_token()
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not head.alive():
            raise RuntimeError(f"ray start exited: {head.log.read_text()[-2000:]}")
        try:
            JobSubmissionClient(head.dashboard_url).list_jobs()
            return
        except Exception as e:  # not up yet
            last = e
            time.sleep(1.0)
    raise TimeoutError(f"head not ready in {timeout_s}s: {last}; "
                       f"log: {head.log.read_text()[-2000:]}")


def _wait_started(node: Head | Worker, timeout_s: float) -> None:
    """Wait until ``ray start --block`` logs that the runtime started (no dashboard to ask)."""
    what = "head" if isinstance(node, Head) else "worker node"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not node.alive():
            raise RuntimeError(f"ray start exited: {node.log.read_text(errors='replace')[-2000:]}")
        if "Ray runtime started" in node.log.read_text(errors="replace"):
            return
        time.sleep(0.5)
    raise TimeoutError(f"{what} not started in {timeout_s}s; "
                       f"log: {node.log.read_text(errors='replace')[-2000:]}")


@dataclass
class Worker:
    """A worker node (``ray start --address=<head> --block``) in its own temp dir and
    process group."""

    proc: subprocess.Popen
    temp_dir: Path
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> float:
        """SIGKILL the node's whole process group (raylet, object store, its workers), as a
        lost machine goes; seconds until it is gone."""
        t0 = time.monotonic()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        gone = round(time.monotonic() - t0, 2)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return gone


def start_worker(head: Head | str, num_cpus: int, *, log: Path | None = None,
                 object_store_mb: int = 150, worker_ports: tuple[int, int] | None = None,
                 timeout_s: float = 90.0) -> Worker:
    """Start a worker node joining ``head`` (a :class:`Head` or its GCS address) on free
    ports and wait (at most ``timeout_s``) until ``ray start`` says the runtime started.

    ``log``: the file its output is appended to (default: ``worker.log`` in its temp dir);
    ``worker_ports``: ``(min, max)`` of its worker processes' ports, for several nodes on one
    machine (Ray's default range otherwise).
    """
    from automl.cluster import use_cluster_token

    use_cluster_token()  # the node authenticates to the head as this process does
    gcs_address = head.gcs_address if isinstance(head, Head) else head
    temp = Path(tempfile.mkdtemp(prefix="rn", dir="/tmp"))  # short: socket paths <= 107
    cmd = [str(VENV_BIN / "ray"), "start", "--block", f"--address={gcs_address}",
           f"--num-cpus={num_cpus}", f"--temp-dir={temp}",
           f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
           f"--runtime-env-agent-port={free_port()}",
           f"--dashboard-agent-listen-port={free_port()}",
           f"--dashboard-agent-grpc-port={free_port()}",
           f"--metrics-export-port={free_port()}",
           f"--object-store-memory={object_store_mb * 1024 * 1024}"]
    if worker_ports is not None:
        cmd += [f"--min-worker-port={worker_ports[0]}", f"--max-worker-port={worker_ports[1]}"]
    log = log or temp / "worker.log"
    with open(log, "a") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=_ray_env(),
                                cwd=temp, start_new_session=True)
    worker = Worker(proc, temp, log)
    try:
        _wait_started(worker, timeout_s)
    except BaseException:
        worker.kill()
        raise
    return worker


def fake_cluster_config(types: dict, gcs_address: str, head_cpus: int) -> dict:
    """A cluster config for ``provider.type: fake_multinode`` (the fields of Ray's
    ``fake_multi_node/example.yaml``, which the wheel does not ship)."""
    types = dict(types)
    idle = types.pop("idle_timeout_minutes", 0.1)
    nodes = {name: {"node_config": {}, **spec} for name, spec in types.items()}
    nodes["ray.head.default"] = {"resources": {"CPU": head_cpus}, "node_config": {},
                                 "max_workers": 0}
    return {
        "cluster_name": "fake_multinode",
        "max_workers": sum(t.get("max_workers", 0) for t in types.values()),
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True,
                     "disable_node_updaters": True, "disable_launch_config_check": True,
                     "gcs_address": gcs_address},
        "available_node_types": nodes,
        "head_node_type": "ray.head.default",
        "auth": {}, "upscaling_speed": 1.0, "idle_timeout_minutes": idle, "docker": {},
        "initialization_commands": [], "setup_commands": [], "head_setup_commands": [],
        "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [], "file_mounts": {}, "cluster_synced_files": [],
        "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [],
    }
