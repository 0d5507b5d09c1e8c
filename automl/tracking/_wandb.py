"""W&B basics: which mode a sweep logs in, deterministic run ids, starting a run.

All runs are started from the driver process (see ``_sinks.WandbTrials``), in the
run directory (``<run_dir>/wandb/``), with W&B's console capture, system metrics,
git and code saving off: a run's start costs about 0.25 s once W&B's service runs
(measured; ``benchmarks/bench_wandb.py``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from automl._redact import add_secret
from automl.errors import SpecError
from automl.spec import Experiment, TrackingSpec

DEFAULT_HOST = "https://api.wandb.ai"
_ENV_MODES = {"offline": "offline", "dryrun": "offline", "disabled": "disabled",
              "online": "online", "run": "online"}


def api_key_source(environ: dict[str, str] | None = None) -> str | None:
    """Where a W&B API key is configured: ``"WANDB_API_KEY"``, the netrc file's path, or
    None. The key's value is registered for redaction, never returned."""
    env = os.environ if environ is None else environ
    if env.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    host = env.get("WANDB_BASE_URL", DEFAULT_HOST)
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        key = read_netrc_auth(host=host)
    except Exception:  # an unreadable/malformed netrc counts as no key (wandb warns itself)
        key = None
    if not key:
        return None
    add_secret(key)
    return env.get("NETRC") or str(Path("~/.netrc").expanduser())


def resolve_mode(tracking: TrackingSpec, environ: dict[str, str] | None = None) -> str:
    """``disabled``, ``offline`` or ``online``.

    ``backend: none`` -> disabled. ``WANDB_MODE`` set to offline/dryrun/disabled in the
    environment wins over the spec (an operator's brake). Otherwise the spec's
    ``mode``; ``auto`` is online exactly when :func:`api_key_source` finds a key.
    """
    env = os.environ if environ is None else environ
    if tracking.backend == "none":
        return "disabled"
    forced = _ENV_MODES.get(env.get("WANDB_MODE", "").strip().lower())
    if forced in ("offline", "disabled"):
        return forced
    if tracking.mode != "auto":
        return tracking.mode
    if forced == "online":
        return "online"
    return "online" if api_key_source(env) else "offline"


def run_id(sweep: str, run_dir: str | Path, trial_id: str) -> str:
    """Deterministic W&B run id of one trial: sha1(sweep, resolved run dir, trial id)[:16].

    A resumed sweep (same run directory, same Tune trial ids) gets the same ids, so its
    runs continue instead of being duplicated; another sweep never collides.
    """
    key = f"{sweep}\0{Path(run_dir).resolve()}\0{trial_id}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class WandbTarget:
    """Where and how a sweep's runs are logged (JSON-serialisable; recorded in the
    registry so a later ``promote`` can reach the same runs).

    Attributes:
        mode: ``offline`` or ``online``.
        setting: the spec's mode (``auto``/``offline``/``online``), re-resolved later.
        group: the sweep id (the run directory's name); one W&B group per sweep.
        dir: the folder holding ``wandb/`` (the run directory).
    """

    mode: str
    setting: str
    project: str
    entity: str | None
    group: str
    dir: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sync_command(self) -> str:
        return f"wandb sync {Path(self.dir) / 'wandb'}"


#: seconds an online W&B server gets to answer before the sweep logs offline
PROBE_TIMEOUT_S = 5.0
#: W&B's own bound on starting an online run (its default is 90 s)
INIT_TIMEOUT_S = 10.0


def unreachable(base_url: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the W&B server at ``base_url`` (default ``WANDB_BASE_URL`` or api.wandb.ai)
    cannot be reached within ``timeout`` seconds, or None when it answers (any HTTP
    status counts as an answer)."""
    url = base_url or os.environ.get("WANDB_BASE_URL", DEFAULT_HOST)
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        return f"{url} unreachable ({type(reason).__name__}: {reason})"[:240]


def go_offline(target: WandbTarget, why: str, note=print) -> WandbTarget:
    """``target`` in offline mode, said in one line with the ``wandb sync`` hint."""
    note(f"wandb  {why}: logging offline; upload later with `{target.sync_command()}`")
    return replace(target, mode="offline")


def wandb_target(exp: Experiment, run_dir: Path, note=print,
                 probe_timeout: float = PROBE_TIMEOUT_S) -> WandbTarget | None:
    """The sweep's :class:`WandbTarget`, or None when tracking resolves to disabled. An
    online target whose server does not answer within ``probe_timeout`` seconds
    (:func:`unreachable`) is returned offline, said through ``note``.

    Raises:
        SpecError: W&B is asked for but the ``wandb`` package is not installed.
    """
    mode = resolve_mode(exp.tracking)
    if mode == "disabled":
        return None
    if importlib.util.find_spec("wandb") is None:
        raise SpecError("the wandb package is not installed", where="tracking.backend",
                        fix="pip install wandb, or set tracking.backend: none")
    target = WandbTarget(mode, exp.tracking.mode, exp.tracking.project or exp.name,
                         exp.tracking.entity, run_dir.name, str(Path(run_dir).resolve()))
    if mode == "online":
        why = unreachable(timeout=probe_timeout)
        if why is not None:
            target = go_offline(target, why, note)
    return target


def start_run(target: WandbTarget, trial_id: str, config: dict | None = None,
              job_type: str = "trial"):
    """``wandb.init`` for one trial's run (id from :func:`run_id`, ``resume="allow"``,
    ``reinit="create_new"`` so several runs can be open at once in the driver).

    Returns:
        The ``wandb.Run``; the caller finishes it.
    """
    import wandb

    settings = wandb.Settings(console="off", x_disable_stats=True, x_disable_machine_info=True,
                              disable_git=True, save_code=False, silent=True,
                              x_disable_meta=True, allow_offline_artifacts=True,
                              init_timeout=INIT_TIMEOUT_S)
    Path(target.dir).mkdir(parents=True, exist_ok=True)
    return wandb.init(
        project=target.project, entity=target.entity, group=target.group, name=trial_id,
        id=run_id(target.group, target.dir, trial_id), job_type=job_type, config=config,
        dir=target.dir, mode=target.mode, resume="allow", reinit="create_new",
        settings=settings,
    )
