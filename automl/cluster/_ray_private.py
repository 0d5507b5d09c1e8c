"""Every use of a private Ray API in this package, in one place, each with why no public
one serves and the Ray issue that asks for it. Each call degrades to a documented
fallback when a Ray release moves it.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

#: ``ray.init``'s keyword for the Prometheus export port of a node it starts. Public only
#: as ``ray start --metrics-export-port``; ``ray.init`` takes it underscore-prefixed
#: (ray#18162). Without it Ray picks a port the driver cannot name in its output.
METRICS_PORT_KWARG = "_metrics_export_port"

#: Loggers of the Jobs SDK's upload path that print per-file progress; they live under
#: ``ray._private`` (no public switch; quieted by name only).
CHATTY_JOB_LOGGERS = ("ray.dashboard.modules.job.sdk", "ray.dashboard.modules.dashboard_sdk",
                      "ray." "_private.runtime_env.packaging",
                      "ray." "_private.runtime_env.working_dir")


def gcs_cluster_config() -> Any | None:
    """The cluster config the v2 autoscaler reports to GCS (``node_group_configs``), or
    None. Ray has no public getter (ray#37838, open); Ray Data reads it the same way."""
    try:
        import ray._private.state as state

        return state.state.get_cluster_config()
    except Exception as e:  # not connected, or a Ray without this API
        logger.debug("no cluster config in GCS: %s", e)
        return None


def token_loader_has_token() -> bool | None:
    """Whether Ray's own token loader finds an auth token (env var, token file or default
    path), or None when this Ray has no such loader. Ray 2.60 clients only attach a token
    when ``RAY_AUTH_MODE=token`` is set, and offer no public way to ask whether one exists
    (ray#64755, review of the change that turned token auth on by default)."""
    try:
        from ray._raylet import AuthenticationTokenLoader

        return bool(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True))
    except (ImportError, AttributeError, TypeError):
        return None


def reload_auth_config() -> None:
    """Make this process's Ray see a ``RAY_AUTH_MODE`` set after Ray cached its config
    (same issue as :func:`token_loader_has_token`); a no-op when this Ray has no cache."""
    try:
        from ray._raylet import Config

        Config.initialize("")
    except (ImportError, AttributeError):
        pass


def tune_trial_runtime_env() -> dict | None:
    """The runtime environment Ray Tune gives every trial actor: ``{"env_vars": ...}`` with
    ``PL_DISABLE_FORK`` (ray#28197) and the driver's Ray Train and AWS variables it passes
    on (``ray.tune.execution.class_cache``, an internal module: Tune has no public getter).
    Tasks a trial starts (its Ray Data reads) inherit it, and Ray's worker pool keeps
    workers apart by runtime environment (ray#15371), so only workers started with this
    same environment can run a trial's first reads without a new process. None when this
    Ray moved it (workers are then warmed without one, as the driver's tasks run)."""
    import os

    try:
        from ray.tune.execution.class_cache import DEFAULT_ENV_VARS, ENV_VARS_TO_PROPAGATE
    except ImportError:
        return None
    env = dict(DEFAULT_ENV_VARS)
    env.update({k: os.environ[k] for k in ENV_VARS_TO_PROPAGATE if k in os.environ})
    return {"env_vars": env}
