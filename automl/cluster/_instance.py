"""The local Ray instance a run started, recorded in its run directory, so a resume can
stop what a killed driver left behind.

A driver killed with SIGKILL takes most of its local Ray instance with it, but not
always all: processes in other process groups (raylet, GCS, dashboard, agents, workers)
can stay alive holding memory (FIELD-NOTES). :func:`record_instance` writes
``<run_dir>/ray.json`` (the driver's pid, the instance's session folder, GCS address and
the pids of the processes it started, each with its start time, so a reused pid is never
mistaken for ours); :func:`stop_leftover` stops exactly those processes and their
children, and any process naming that session folder on its command line. A Ray instance
the run did not start (``--address``, ``RAY_ADDRESS``) is never recorded, so never touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from automl.errors import RunError

RECORD = "ray.json"


def _same(pid: int, started: float):
    """The live process ``pid`` if it is the one that started at ``started``, else None."""
    import psutil

    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - started) < 1.0 and p.status() != psutil.STATUS_ZOMBIE:
            return p
    except psutil.Error:
        pass
    return None


def record_instance(run_dir: Path, handle) -> None:
    """Write ``<run_dir>/ray.json`` for a Ray instance this process started
    (``handle.started``); nothing for an instance it joined."""
    if not getattr(handle, "started", False):
        return
    import psutil

    me = psutil.Process()
    procs = []
    for p in me.children(recursive=True):
        try:
            procs.append({"pid": p.pid, "started": p.create_time(), "name": p.name()})
        except psutil.Error:
            continue
    rec = {"driver_pid": me.pid, "driver_started": me.create_time(),
           "session_dir": handle.session_dir, "gcs_address": handle.address,
           "dashboard_url": getattr(handle, "dashboard_url", None),
           "processes": procs}
    path = Path(run_dir) / RECORD
    tmp = path.with_name(f".{RECORD}.{os.getpid()}")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, path)


def forget_instance(run_dir: Path) -> None:
    """Remove the record (the instance was shut down cleanly)."""
    (Path(run_dir) / RECORD).unlink(missing_ok=True)


def stop_leftover(run_dir: Path, timeout_s: float = 10.0) -> str | None:
    """Stop the Ray instance the run's killed driver left (see the module doc).

    Returns:
        One line saying what was stopped, or None when nothing of it was alive.

    Raises:
        RunError: the run's driver is still alive (the run is not dead; resuming it now
            would run it twice).
    """
    path = Path(run_dir) / RECORD
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    import psutil

    driver = _same(int(rec.get("driver_pid", -1)), float(rec.get("driver_started", 0)))
    if driver is not None and driver.pid != os.getpid():
        raise RunError(f"the run's driver is still running (pid {driver.pid})", where=str(run_dir),
                       fix=f"wait for it to end, or stop it (kill {driver.pid}) before resuming")
    found: dict[int, psutil.Process] = {}
    for p in rec.get("processes", []):
        live = _same(int(p["pid"]), float(p["started"]))
        if live is not None:
            found[live.pid] = live
            try:
                found.update({c.pid: c for c in live.children(recursive=True)})
            except psutil.Error:
                pass
    session = rec.get("session_dir")
    if session:
        for p in psutil.process_iter(["cmdline"]):
            if any(session in a for a in (p.info.get("cmdline") or [])):
                found[p.pid] = p
    found.pop(os.getpid(), None)
    alive = [p for p in found.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    if not alive:
        forget_instance(run_dir)
        return None
    for p in alive:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=timeout_s / 2)
    for p in still:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(still, timeout=timeout_s / 2)
    forget_instance(run_dir)
    name = Path(session).name if session else rec.get("gcs_address")
    return (f"ray    stopped the Ray instance the killed driver left ({name}, "
            f"{len(alive)} processes)")
