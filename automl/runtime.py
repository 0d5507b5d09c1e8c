"""Connecting to Ray: start a local instance (dashboard on loopback) or join a cluster."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

# Before ray is imported anywhere: no usage-stats prompt or upload, quiet Tune output.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0")
os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")


@dataclass(frozen=True)
class RayHandle:
    """What :func:`connect` did: ``started`` is True when this process owns the instance."""

    started: bool
    address: str
    dashboard_url: str | None


def connect(
    address: str | None = None,
    num_cpus: int | None = None,
    object_store_mb: int = 512,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int = 8265,
) -> RayHandle:
    """Join the cluster at ``address`` (or ``RAY_ADDRESS``), or start a local Ray.

    A local instance gets ``num_cpus`` logical CPUs (default: this machine's
    cores), an object store capped at ``object_store_mb`` MiB, and the dashboard
    on ``dashboard_host:dashboard_port`` (loopback unless asked otherwise; Ray
    Train needs the dashboard's State API, see FIELD-NOTES). An already
    initialised Ray in this process is reused as is.
    """
    import ray

    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        return RayHandle(False, ctx.gcs_address, None)
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        info = ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
        return RayHandle(False, address, _dashboard(info))
    info = ray.init(
        num_cpus=num_cpus or os.cpu_count() or 1,
        object_store_memory=object_store_mb * 1024 * 1024,
        include_dashboard=True,
        dashboard_host=dashboard_host,
        dashboard_port=dashboard_port,
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    return RayHandle(True, info.address_info.get("gcs_address", ""), _dashboard(info))


def _dashboard(info) -> str | None:
    url = getattr(info, "dashboard_url", None) or None
    return f"http://{url}" if url and not url.startswith("http") else url


def shutdown(handle: RayHandle) -> None:
    """Stop Ray if this process started it."""
    import ray

    if handle.started and ray.is_initialized():
        ray.shutdown()
