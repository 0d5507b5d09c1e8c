"""Connecting to Ray: start a local instance (dashboard on loopback) or join a cluster.

Importing this module sets the Ray and Tune environment defaults below, before ray is
imported anywhere."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import socket
from dataclasses import dataclass

from automl.cluster._ray_private import METRICS_PORT_KWARG
from automl.errors import ResourceError

logger = logging.getLogger(__name__)

# Before ray is imported anywhere: no usage-stats prompt or upload, quiet Tune output.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
# Tune's own CSV/JSON/TensorBoard loggers off: the sweep's ledger and its sinks record.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
#: Ray Train's settings for data-parallel trials. Set here for a local instance (its
#: raylet, so every worker, inherits this process's environment) and again in each
#: data-parallel trial's process (a cluster's workers do not inherit it): Train passes
#: them on to its controller and workers.
TRAIN_ENV = {
    "RAY_TRAIN_V2_ENABLED": "1",
    # the controller polls its workers at this interval and a report waits for the poll:
    # the default 2 s adds up to 2 s per epoch to every data-parallel trial
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",
    # one actor process less per trial (start-up, issue 42): the watcher of node drains
    # (ray#63807) only turns a spot node's preemption into a separate retry budget; a
    # preempted worker still fails the group, which restarts from the trial's checkpoint
    # (resources.max_failures)
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
}
for _k, _v in TRAIN_ENV.items():
    os.environ.setdefault(_k, _v)
# Resume reads the run directory (study.db, trials.jsonl, the trials' checkpoints), never
# Tune's experiment snapshots: let Tune write them rarely (it still does at the end).
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "3600")


#: Ray's system settings of a local instance whose data streams (issue 42): its idle
#: workers are kept (a minute, and up to this many) instead of killed after 1 s above one
#: per CPU. Each chunk of a stream is a short Ray Data execution whose tasks need workers;
#: with Ray's defaults every chunk started new worker processes (about 1-2 s of CPU each:
#: Python, Ray, pyarrow) beside the trials. Measured here (2 trials streaming 6,000 rows for
#: 3 epochs, AMD EPYC, idle): 59 worker processes started -> 13, the run 209 s -> 137 s.
STREAM_WORKERS = {"idle_worker_killing_time_threshold_ms": 60_000,
                  "num_workers_soft_limit": 16}


def _streaming(spill_dir: str | None) -> dict:
    """``ray.init`` keywords of a local instance whose data streams: spilling to
    ``spill_dir`` (Ray's filesystem spilling) and :data:`STREAM_WORKERS`; none without one."""
    if not spill_dir:
        return {}
    import json

    os.makedirs(spill_dir, exist_ok=True)
    return {"_system_config": {"object_spilling_config": json.dumps(
        {"type": "filesystem", "params": {"directory_path": spill_dir}}), **STREAM_WORKERS}}


def spilled_bytes(session_dir: str | None) -> int:
    """Bytes the local raylet of ``session_dir`` spilled so far: the largest total in its
    own ``Spilled N MiB`` log lines (0 when it spilled nothing or the log is not here)."""
    import re
    from pathlib import Path

    if not session_dir:
        return 0
    top = 0.0
    for log in Path(session_dir, "logs").glob("raylet*.out"):
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for m in re.findall(r"Spilled (\d+(?:\.\d+)?) MiB", text):
            top = max(top, float(m))
    return int(top * 2**20)


@dataclass(frozen=True)
class RayHandle:
    """What :func:`connect` did: ``started`` is True when this process owns the instance;
    ``dashboard_url`` is None when the cluster runs without the dashboard (and so without
    the State API), ``dashboard_known`` False when this process found Ray initialised by
    someone else and cannot tell; ``metrics_url`` is the Prometheus endpoint of the local
    node (None when joining a cluster: each node exports its own)."""

    started: bool
    address: str
    dashboard_url: str | None
    metrics_url: str | None = None
    session_dir: str | None = None
    dashboard_known: bool = True


#: the handle of the connection :func:`connect` made in this process, by GCS address
_current: dict[str, RayHandle] = {}


def _remember(handle: RayHandle, info) -> RayHandle:
    """Keep ``handle`` as this process's connection (``info``: what ``ray.init`` returned)."""
    _current.clear()
    _current[info.address_info.get("gcs_address", "")] = handle
    return handle


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def port_free(host: str, port: int) -> bool:
    """True when a TCP server could listen on ``host:port`` now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port that is free right now on every interface (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def connect(
    address: str | None = None,
    num_cpus: int | None = None,
    object_store_mb: int = 512,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int = 8265,
    metrics_export_port: int | None = None,
    py_modules: list[str] | None = None,
    spill_dir: str | None = None,
) -> RayHandle:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), or start a local Ray.

    A local instance spills objects that do not fit its store to ``spill_dir`` when given
    (a folder of the run, for streaming data; its idle workers are then kept,
    :data:`STREAM_WORKERS`), else to Ray's temp folder.

    A local instance gets ``num_cpus`` logical CPUs (default: this machine's
    cores), an object store capped at ``object_store_mb`` MiB, and the dashboard
    on ``dashboard_host:dashboard_port`` (loopback unless asked otherwise; Ray
    Train needs the dashboard's State API, see FIELD-NOTES). An already
    initialised Ray in this process is reused as is.

    Metrics (Ray's and this package's ``ray_automl_*``, see ``automl.monitoring``) are
    exported in Prometheus format on ``metrics_export_port`` (default: a port Ray's agent
    binds itself, read back from ``ray.nodes()``); Ray's exporter listens on every
    interface, like its other services.

    A local start is always a new instance of this process's own (``address="local"``):
    another Ray cluster on the machine, or the address file a killed ``ray start`` left
    in Ray's temp folder (``ray_current_cluster``), is never joined by accident (plain
    ``ray.init()`` reads that file and then refuses ``num_cpus``). A local start that
    fails (Ray raises when its node does not come up in 30 s, e.g. a port taken while it
    starts) is retried once with new ports.

    ``py_modules`` (local package folders or ``.py`` files, a user's model code) become the
    job's runtime environment (Ray's ``runtime_env={"py_modules": ...}``): Ray uploads them
    once and every worker on every node imports them. None (the default, no user model)
    leaves the runtime environment empty, as before. An already initialised Ray keeps its
    own.

    Raises:
        ResourceError: a named port is in use, or the local Ray did not start twice.
    """
    import ray

    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        if py_modules:  # the caller's own ray.init() (a notebook's) set the runtime env
            logger.warning("Ray was started before this job: its workers import the user's "
                           "code (%s) only if that ray.init() shipped it (runtime_env "
                           "py_modules) or it is installed", ", ".join(map(str, py_modules)))
        mine = _current.get(ctx.gcs_address)
        if mine is not None:  # ours, connected earlier (a test's, a benchmark's)
            return dataclasses.replace(mine, started=False)
        return RayHandle(False, ctx.gcs_address, None, dashboard_known=False)
    env = {"runtime_env": {"py_modules": list(py_modules)}} if py_modules else {}
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        from automl.cluster._token import use_cluster_token

        use_cluster_token()  # Ray 2.60 clusters require their token by default
        info = ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True,
                        **env)
        return _remember(RayHandle(False, address, _dashboard(info)), info)
    for port, what, flag in ((dashboard_port, "dashboard", "--dashboard-port"),
                             (metrics_export_port, "metrics", "--metrics-port")):
        if port and not port_free(dashboard_host if what == "dashboard" else "", port):
            raise ResourceError(f"port {port} for the Ray {what} is already in use (another "
                                "Ray instance?)", where=f"{dashboard_host}:{port}",
                                fix=f"stop it, or pass {flag} 0 to use a free port")
    # Ray's agents bind their own metrics port (port 0) unless one is named: a port picked
    # here and released would race with the ports Ray binds while it starts (seen once in
    # a full test run: "Address already in use", then "The current node timed out during
    # startup" 30 s later). Ray then reports the port it bound in ``ray.nodes()``.
    metrics = {METRICS_PORT_KWARG: metrics_export_port} if metrics_export_port else {}
    for attempt in (1, 2):
        port = dashboard_port or free_port()
        # Ray Train's placement-group cleaner finds the State API by auto-detection, which
        # fails when several Ray instances run on one machine ("Found multiple active Ray
        # instances"): the cleaner dies, a stopped trial's placement group is never freed
        # and the next trial's worker group waits forever. Naming our dashboard in the
        # environment the raylet (and so every worker) inherits pins it to this instance.
        host = "127.0.0.1" if dashboard_host in ("0.0.0.0", "::") else dashboard_host
        os.environ["RAY_API_SERVER_ADDRESS"] = f"http://{host}:{port}"
        try:
            info = ray.init(
                address="local",  # a new instance, whatever address file is lying around
                num_cpus=num_cpus or os.cpu_count() or 1,
                object_store_memory=object_store_mb * 1024 * 1024,
                include_dashboard=True,
                dashboard_host=dashboard_host,
                dashboard_port=port,
                logging_level=logging.WARNING,
                log_to_driver=False,
                **metrics,
                **env,
                **_streaming(spill_dir),
            )
            break
        except Exception as e:  # Ray raises a bare Exception when its node does not start
            ray.shutdown()
            last = (str(e).strip().splitlines() or [repr(e)])[-1]
            if attempt == 2 or (dashboard_port and metrics_export_port):
                raise ResourceError(f"local Ray did not start: {last}", where="ray.init",
                                    fix="see the raylet and agent logs under "
                                        "/tmp/ray/session_latest/logs") from None
            logger.warning("local Ray did not start (%s); retrying once with new ports", last)
    mport = metrics_export_port or _metrics_port()
    return _remember(RayHandle(True, info.address_info.get("gcs_address", ""),
                               _dashboard(info),
                               f"http://127.0.0.1:{mport}/metrics" if mport else None,
                               info.address_info.get("session_dir")), info)


def _metrics_port() -> int | None:
    """The Prometheus export port this driver's node bound (public ``ray.nodes()``)."""
    import ray

    me = ray.get_runtime_context().get_node_id()
    return next((n.get("MetricsExportPort") for n in ray.nodes() if n.get("NodeID") == me),
                None)


def _dashboard(info) -> str | None:
    url = getattr(info, "dashboard_url", None) or None
    return f"http://{url}" if url and not url.startswith("http") else url


def shutdown(handle: RayHandle) -> None:
    """Stop Ray if this process started it."""
    import ray

    if handle.started and ray.is_initialized():
        ray.shutdown()
    if handle.started:
        os.environ.pop("RAY_API_SERVER_ADDRESS", None)
    if not ray.is_initialized():
        _current.clear()
