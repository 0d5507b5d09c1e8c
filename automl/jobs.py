"""Sweeps as Ray jobs: ``automl submit`` / ``status`` / ``stop`` through Ray's Jobs SDK
(``ray.job_submission.JobSubmissionClient``, the dashboard's HTTP API, port 8265).

A submitted sweep runs ``python -m automl search SPEC ...`` as the job's entrypoint on
the head node. The spec is validated here first, then travels in the job's environment
(``AUTOML_SPEC_YAML``), so the job runs exactly the file that was checked. By default
this repository travels as the job's ``working_dir`` (without ``.venv``, ``runs``,
``.git``, ``benchmarks/results``): the code on the cluster is the code you submitted.
Dependencies are not shipped (the nodes have them, see ``cluster/``) unless ``pip`` asks.

Errors: an unreachable address or a refused token -> :class:`ResourceError` (exit 3);
an unknown job id -> :class:`JobNotFound` (exit 2); a job that ends FAILED or STOPPED
while followed -> :class:`RunError` (exit 1).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shlex
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from automl.cluster._ray_private import CHATTY_JOB_LOGGERS as _CHATTY
from automl.errors import EXIT_BAD_INPUT, AutoMLError, ResourceError, RunError

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
SPEC_ENV = "AUTOML_SPEC_YAML"
EXCLUDES = [".venv", "runs", ".git", "benchmarks/results", "wandb", "**/__pycache__",
            "*.egg-info", ".pytest_cache", ".ruff_cache"]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")



class JobNotFound(AutoMLError):
    """No job with that id on the cluster; ``where`` is the job id."""

    exit_code = EXIT_BAD_INPUT


def repo_root() -> Path | None:
    """This project's source folder (holding ``pyproject.toml``), or None when automl is
    installed as a package (nothing to ship then)."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def resolve_address(address: str | None) -> str:
    """``address``, else ``$RAY_API_SERVER_ADDRESS``, else ``http://127.0.0.1:8265``; a bare
    ``host:port`` gets ``http://``."""
    address = address or os.environ.get("RAY_API_SERVER_ADDRESS") or DEFAULT_ADDRESS
    return address if "://" in address else f"http://{address}"


def connect(address: str | None):
    """A ``JobSubmissionClient`` for the dashboard at ``address`` (token sent when available).

    Raises:
        ResourceError: nothing answers there, it is not a Ray dashboard, or it refused
            the token (or its absence).
    """
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    from automl.cluster._token import TOKEN_FIX, use_cluster_token

    url = resolve_address(address)
    use_cluster_token()
    for name in _CHATTY:  # upload and websocket chatter; the job's own output is what counts
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        return JobSubmissionClient(url)
    except AuthenticationError as e:
        first = str(e).strip().splitlines()[0]
        raise ResourceError(f"the cluster refused this client: {first}", where=url,
                            fix=TOKEN_FIX) from None
    except (ConnectionError, OSError, ValueError, RuntimeError) as e:
        raise ResourceError(
            f"cannot reach the Ray dashboard ({type(e).__name__})", where=url,
            fix="start the cluster with `ray up` or `ray start --head`, or open a tunnel to "
                "it: `ray dashboard cluster/aws.yaml` or `kubectl port-forward "
                "svc/automl-head-svc 8265:8265`; then pass --address http://HOST:8265",
        ) from None


def _call(fn, job_id: str, url: str):
    try:
        return fn(job_id)
    except RuntimeError as e:
        if "404" in str(e) or "does not exist" in str(e):
            raise JobNotFound("no such job on this cluster", where=job_id,
                              fix=f"list jobs with `ray job list --address {url}`") from None
        raise


def new_job_id(name: str) -> str:
    """``automl-<name>-<UTC yyyymmdd-hhmmss>-<4 hex>``: sortable, unique, readable."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"automl-{name}-{stamp}-{secrets.token_hex(2)}"


def entrypoint(job_id: str, args: dict[str, str | int | None], python: str = "python") -> str:
    """The job's shell command (POSIX ``sh``): write the shipped spec to a temporary
    file, run ``python -m automl search FILE --flag value ...`` (values shell-quoted;
    ``python`` is the cluster's interpreter, found on the head's PATH), and delete the
    file when the shell exits, also when the job is stopped (SIGTERM, SIGINT). The run
    directory keeps its own copy of the spec, which ``automl resume`` reads."""
    spec = f'"${{TMPDIR:-/tmp}}/{job_id}.yaml"'
    flags = " ".join(f"--{k.replace('_', '-')} {shlex.quote(str(v))}"
                     for k, v in args.items() if v is not None)
    return (f"trap 'rm -f {spec}' EXIT && trap 'exit 143' TERM INT && "
            f"printf '%s' \"${SPEC_ENV}\" > {spec} && "
            f"{shlex.quote(python)} -m automl search {spec}" + (f" {flags}" if flags else ""))


def runtime_env(spec_text: str, working_dir: Path | None, pip: list[str] | None) -> dict:
    """The job's runtime environment: the spec, unbuffered output, the working dir
    (minus :data:`EXCLUDES`), and pip packages only when asked."""
    env: dict = {"env_vars": {SPEC_ENV: spec_text, "PYTHONUNBUFFERED": "1"}}
    if working_dir is not None:
        env.update(working_dir=str(working_dir), excludes=list(EXCLUDES))
    if pip:
        env["pip"] = list(pip)
    return env


@dataclass(frozen=True)
class Submitted:
    """What :func:`submit` sent: ``job_id``, the dashboard ``address``, the
    ``entrypoint``, and seconds the submission took (upload included)."""

    job_id: str
    address: str
    entrypoint: str
    submit_s: float


def submit(spec: Path, address: str | None, *, name: str | None = None,
           output: str | None = None, num_samples: int | None = None,
           warm_start: str | None = None, working_dir: Path | None = None,
           ship_code: bool = True, pip: list[str] | None = None,
           python: str = "python") -> Submitted:
    """Validate ``spec`` here, then submit it as a Ray job.

    Args:
        working_dir: folder shipped as the job's working directory (default: this
            repository when automl runs from source); ignored when ``ship_code`` is False.
        pip: packages installed into the job's environment (default: none).

    Raises:
        SpecError: the spec is invalid (nothing is submitted).
        ResourceError: the cluster cannot be reached or refused the token.
    """
    from automl.spec import load_spec

    overrides = {"search.num_samples": num_samples} if num_samples is not None else {}
    exp = load_spec(spec, overrides)  # SpecError here: nothing reaches the cluster
    text = Path(spec).read_text()
    client = connect(address)
    job_id = new_job_id(name or exp.name)
    command = entrypoint(job_id, {"name": name, "output": output, "num_samples": num_samples,
                                  "warm_start": warm_start}, python)
    folder = (working_dir or repo_root()) if ship_code else None
    t0 = time.perf_counter()
    client.submit_job(
        entrypoint=command, submission_id=job_id,
        runtime_env=runtime_env(text, folder, pip),
        metadata={"automl_spec": str(spec), "automl_name": name or exp.name,
                  "automl_output": output or exp.output.dir},
    )
    return Submitted(job_id, resolve_address(address), command, time.perf_counter() - t0)


def follow(address: str | None, job_id: str, out: TextIO | None = None,
           timeout_s: float | None = None) -> str:
    """Stream the job's logs to ``out`` (default stdout) until it ends; returns its final
    status (``SUCCEEDED``, ``FAILED``, ``STOPPED``).

    Raises:
        JobNotFound: no such job.
        RunError: still running after ``timeout_s`` seconds (the job keeps running).
    """
    client = connect(address)
    url = resolve_address(address)
    _call(client.get_job_status, job_id, url)
    out = out or sys.stdout

    async def tail() -> None:
        async for lines in client.tail_job_logs(job_id):
            out.write(lines)
            out.flush()

    try:
        asyncio.run(asyncio.wait_for(tail(), timeout_s))
    except asyncio.TimeoutError:
        raise RunError(f"still running after {timeout_s:g}s", where=job_id,
                       fix=f"`automl status {job_id}` or `automl stop {job_id}`") from None
    # the log stream closes when the job ends; its status can lag by a moment
    deadline = time.monotonic() + 30
    status = str(_call(client.get_job_status, job_id, url))
    while status not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
        status = str(_call(client.get_job_status, job_id, url))
    return status


def info(address: str | None, job_id: str) -> dict:
    """``{job_id, status, message, entrypoint, start, end, duration_s, metadata}`` of a job
    (times in UTC ISO 8601; ``end`` and ``duration_s`` None while it runs).

    Raises:
        JobNotFound: no such job.
    """
    client = connect(address)
    details = _call(client.get_job_info, job_id, resolve_address(address))

    def iso(ms):
        if not ms:
            return None
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    start, end = details.start_time, details.end_time
    return {"job_id": job_id, "status": str(details.status), "message": details.message,
            "entrypoint": details.entrypoint, "start": iso(start), "end": iso(end),
            "duration_s": round((end - start) / 1000, 1) if start and end else None,
            "metadata": dict(details.metadata or {})}


def stop(address: str | None, job_id: str, timeout_s: float = 60.0) -> tuple[bool, str]:
    """Ask the job to stop (SIGTERM to its entrypoint, then SIGKILL after Ray's grace
    period) and wait up to ``timeout_s`` seconds for it to end.

    Returns:
        ``(stop was sent, final status)``; the first is False when the job had already
        ended.

    Raises:
        JobNotFound: no such job.
    """
    client = connect(address)
    url = resolve_address(address)
    sent = bool(_call(client.stop_job, job_id, url))
    deadline = time.monotonic() + timeout_s
    status = str(_call(client.get_job_status, job_id, url))
    while status not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
        status = str(_call(client.get_job_status, job_id, url))
    return sent, status
