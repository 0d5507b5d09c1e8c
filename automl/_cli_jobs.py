"""``automl submit`` / ``status`` / ``stop``: sweeps as Ray jobs (see :mod:`automl.jobs`).

Registered on the main typer app by :func:`register` (called from ``automl.cli``), so
the job commands live beside the module they drive.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from automl.errors import EXIT_INTERRUPTED, AutoMLError, RunError

ADDRESS_HELP = ("Ray dashboard (Jobs API) address, e.g. http://127.0.0.1:8265 through a tunnel "
                "(default: $RAY_API_SERVER_ADDRESS, else http://127.0.0.1:8265)")


def register(app: typer.Typer, console: Console, err_console: Console,
             fail: Callable[[AutoMLError], None]) -> None:
    """Add the ``submit``, ``status`` and ``stop`` commands to ``app``."""

    @app.command()
    def submit(
        spec: Path = typer.Argument(..., help="experiment spec (YAML), validated here first"),
        address: Optional[str] = typer.Option(None, help=ADDRESS_HELP),
        name: Optional[str] = typer.Option(None, help="run name (folder under --output)"),
        output: Optional[str] = typer.Option(
            None, help="folder for run directories, as the cluster sees it: a shared "
            "filesystem path (/mnt/runs) or the spec's output.dir"),
        num_samples: Optional[int] = typer.Option(None, min=1, help="number of trials"),
        warm_start: Optional[str] = typer.Option(
            None, help="previous run directory (on the cluster) or registry NAME@ALIAS"),
        follow: bool = typer.Option(True, help="stream the job's logs until it ends"),
        working_dir: bool = typer.Option(
            True, help="ship this repository as the job's working directory (off: use the "
            "automl installed on the cluster)"),
        pip: Optional[list[str]] = typer.Option(
            None, help="pip requirement to install in the job's environment (repeatable; "
            "default none: the cluster's nodes already have the project's dependencies)"),
        python: str = typer.Option("python", help="Python interpreter on the head's PATH"),
        timeout: Optional[float] = typer.Option(
            None, help="stop following after this many seconds (the job keeps running)"),
    ) -> None:
        """Submit the sweep SPEC as a Ray job, print its id and follow its logs."""
        from automl import jobs
        from automl.spec import load_spec

        try:
            exp = load_spec(spec)
            out = output or exp.output.dir
            if working_dir and not Path(out).is_absolute() and "://" not in out:
                err_console.print(
                    f"warning: output '{out}' is relative: on the cluster it resolves inside "
                    "the job's working directory on the head node; pass --output with a "
                    "shared path (or set output.dir) to keep the results", style="yellow",
                    highlight=False)
            sub = jobs.submit(spec, address, name=name, output=output, num_samples=num_samples,
                              warm_start=warm_start, ship_code=working_dir, pip=pip,
                              python=python)
            console.print(f"job    {sub.job_id} submitted to {sub.address} in "
                          f"{sub.submit_s:.1f}s", highlight=False)
            console.print(f"       automl status {sub.job_id} --address {sub.address}  |  "
                          f"automl stop {sub.job_id} --address {sub.address}", highlight=False)
            if not follow:
                return
            status = jobs.follow(address, sub.job_id, timeout_s=timeout)
            console.print(f"job    {sub.job_id} {status}", highlight=False)
            if status != "SUCCEEDED":
                msg = jobs.info(address, sub.job_id).get("message") or ""
                raise RunError(f"job ended {status}: {msg}".strip().rstrip(":"),
                               where=sub.job_id,
                               fix=f"`ray job logs {sub.job_id} --address {sub.address}`")
        except AutoMLError as e:
            fail(e)
        except KeyboardInterrupt:
            err_console.print("stopped following; the job keeps running (automl stop JOB_ID "
                              "to end it)")
            raise typer.Exit(EXIT_INTERRUPTED) from None

    @app.command()
    def status(job_id: str = typer.Argument(..., help="job id printed by `automl submit`"),
               address: Optional[str] = typer.Option(None, help=ADDRESS_HELP)) -> None:
        """Print a submitted job's status, times, message and entrypoint."""
        from automl import jobs

        try:
            d = jobs.info(address, job_id)
        except AutoMLError as e:
            fail(e)
        took = f" ({d['duration_s']:.0f}s)" if d["duration_s"] is not None else ""
        console.print(f"{d['job_id']}: {d['status']}{took}", highlight=False)
        for key in ("message", "start", "end", "entrypoint"):
            if d[key]:
                console.print(f"  {key}: {d[key]}", markup=False, highlight=False)
        meta = d["metadata"]
        if meta.get("automl_output"):
            console.print(f"  results: {meta['automl_output']}/{meta.get('automl_name', '')}",
                          markup=False, highlight=False)

    @app.command()
    def stop(job_id: str = typer.Argument(..., help="job id printed by `automl submit`"),
             address: Optional[str] = typer.Option(None, help=ADDRESS_HELP),
             timeout: float = typer.Option(60.0, help="seconds to wait for the job to end")
             ) -> None:
        """Stop a submitted job and wait for it to end."""
        from automl import jobs

        try:
            sent, final = jobs.stop(address, job_id, timeout_s=timeout)
        except AutoMLError as e:
            fail(e)
        if not sent:
            console.print(f"{job_id} had already ended: {final}", highlight=False)
        elif final in jobs.TERMINAL:
            console.print(f"{job_id} {final}", highlight=False)
        else:
            err_console.print(f"error: {job_id}: still {final} after {timeout:g}s (stop was "
                              "sent; check again with automl status)", highlight=False)
            raise typer.Exit(1)
