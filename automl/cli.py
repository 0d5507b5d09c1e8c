"""Command line: ``automl search``, ``automl validate``, ``automl report``,
``automl dashboard``, ``automl compress``, ``automl reproduce``, ``automl registry list|show|promote``, and
``automl submit|status|stop`` for sweeps run as Ray jobs (``automl._cli_jobs``).

Every error this package raises on purpose becomes one line on stderr and a
stable exit code: 0 success, 1 failed run, 2 bad input (spec, data, flags),
3 resources (a trial cannot be placed, output not writable), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import math
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

from automl._io import shown
from automl.errors import EXIT_FAILED_RUN, EXIT_INTERRUPTED, EXIT_OK, AutoMLError, SpecError
from automl.registry import DEFAULT_REGISTRY


def _no_type_for_flags() -> None:
    """typer 0.29 labels every on/off flag ``<bool>`` in ``--help``, as if it took a value;
    a flag takes none, so its type column is left empty (options keep theirs)."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "_automl", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    display_type_rich._automl = True
    TyperOption.display_type_rich = display_type_rich


class _OneLineUsage(TyperGroup):
    """Usage errors (a bad flag value, an unknown option, a missing argument) in every
    command, as every other error: one line on stderr, ``error: <what> (see <command>
    --help)``, exit 2, instead of typer's boxed usage. ``automl`` (or ``automl registry``)
    alone prints its help on stdout and exits 0; ``--help`` is unchanged."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:  # not standalone: typer returns exit codes and raises what it would print
            code = super().main(args, prog_name, complete_var, False, **extra)
        except typer.TyperException as e:  # typer's own click: UsageError and the like
            ctx = getattr(e, "ctx", None)
            if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
                console.print(ctx.get_help(), markup=False, highlight=False)
                sys.exit(EXIT_OK)
            err_console.print(f"error: {_usage_line(e, ctx)}", markup=False, highlight=False,
                              soft_wrap=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            err_console.print("aborted")
            sys.exit(EXIT_FAILED_RUN)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def _usage_line(error: Exception, ctx) -> str:
    """A usage error in the project's form: ``no such option: --nam; did you mean --name?
    (see automl search --help)``."""
    what = " ".join(error.format_message().split()).replace("Input should be ", "must be ")
    what = re.sub(r"\.? \(Possible options?: ([^)]*)\)$", r"; did you mean \1?", what)
    what = re.sub(r"\. Did you mean ", "; did you mean ", what).rstrip(".")
    fix = f"see {ctx.command_path} --help" if ctx is not None else None
    return AutoMLError(what[:1].lower() + what[1:], fix=fix).one_line()


_no_type_for_flags()
app = typer.Typer(
    cls=_OneLineUsage,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Hyperparameter search and AutoML for PyTorch on Ray Tune, Optuna and ASHA.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True)


def _fail(error: AutoMLError) -> None:
    """Print ``error`` as one line on stderr and exit with its code (2 input, 3 resources)."""
    err_console.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(error.exit_code)


@contextlib.contextmanager
def _cli_errors(spec: Path | None = None) -> Iterator[None]:
    """Every command's error rule: an :class:`AutoMLError` becomes one line and its exit
    code (:func:`_fail`), Ctrl-C prints ``interrupted`` and exits 130. An error that names
    only a key path of the spec (``selection.cv_folds``, found once the data were read) is
    prefixed with ``spec``, the file it is in."""
    try:
        yield
    except AutoMLError as e:
        if spec is not None and e.where and e.where.split(".")[0] in _spec_sections():
            e.where = f"{spec}: {e.where}"
            e.args = (e.one_line(),)
        _fail(e)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _spec_sections() -> set[str]:
    from automl.spec import Experiment

    return set(Experiment.model_fields)


@app.command()
def validate(spec: Path = typer.Argument(..., help="experiment spec (YAML)")) -> None:
    """Check SPEC and its data as `search` does before Ray starts; print spec, space, data.

    The data are loaded, split and folded (a missing target column, a class too small for
    the folds: one line, exit 2); no Ray starts."""
    import yaml

    from automl.prepare import prepare
    from automl.space import describe
    from automl.spec import load_spec

    with _cli_errors(spec):
        exp = load_spec(spec)
        prepared = prepare(exp)  # what `search` refuses before Ray starts, refused here
        exp = prepared.exp or exp  # the task decided by a table's target
    console.print(yaml.safe_dump(exp.to_dict(), sort_keys=False), markup=False, highlight=False)
    info = describe(exp)
    size = "continuous (infinitely many)" if math.isinf(info["size"]) else f"{info['size']:,.0f}"
    cond = sum(1 for p in info["parameters"] if p["when"] and "fixed" not in p["domain"])
    console.print(f"search space: {info['searched']} searched parameters ({cond} conditional), "
                  f"{size} configurations")
    for p in info["parameters"]:
        if "fixed" not in p["domain"]:
            when = f"   when {p['when']}" if p["when"] else ""
            dom = {k: v for k, v in p["domain"].items() if v is not None and v is not False}
            console.print(f"  {p['name']}: {dom}{when}", markup=False, highlight=False)
    if exp.search.sampler in ("cmaes", "qmc") and any(
        p["domain"].get("type") == "categorical" for p in info["parameters"]
    ):
        console.print(f"warning: sampler {exp.search.sampler} samples categorical parameters at "
                      "random (Optuna's independent sampler); tpe models them", style="yellow")
    if line := prepared.task_line():
        console.print(line, markup=False, highlight=False)
    console.print(prepared.line(), markup=False, highlight=False)
    for note in prepared.notes:  # the user's own model: where it was found, what it built
        console.print(f"model  {note}", markup=False, highlight=False)
    console.print(f"{spec}: valid")


@app.command()
def search(
    spec: Path = typer.Argument(..., help="experiment spec (YAML)"),
    name: Optional[str] = typer.Option(None, help="run name (folder under --output)"),
    output: Optional[str] = typer.Option(None, help="folder for run directories"),
    num_samples: Optional[int] = typer.Option(None, min=1, help="number of trials"),
    address: Optional[str] = typer.Option(
        None, help="Ray cluster address (default: $RAY_ADDRESS, else start Ray locally)"
    ),
    dashboard_host: str = typer.Option(
        "127.0.0.1", help="interface the local Ray dashboard listens on (port 8265); "
        "anything but loopback exposes it to the network"
    ),
    dashboard_port: int = typer.Option(8265, help="port of the local Ray dashboard (0: any)"),
    metrics_port: Optional[int] = typer.Option(
        None, help="Prometheus metrics port of the local Ray node (default: a free port)"
    ),
    resume: bool = typer.Option(
        False, "--resume", help="continue the latest unfinished run of SPEC (or --name) "
        "after a crash, with the spec recorded in its run directory"
    ),
    warm_start: Optional[str] = typer.Option(
        None, help="start from a previous run: its directory or a registry NAME@ALIAS "
        "(sets nightly.warm_start)"
    ),
) -> None:
    """Run the sweep SPEC describes and write a run directory with summary.json."""
    from automl.cluster import is_loopback
    from automl.spec import load_spec

    if not is_loopback(dashboard_host):
        err_console.print(f"warning: the Ray dashboard will listen on {dashboard_host}, "
                          "reachable from the network; anyone who can reach it and holds the "
                          "cluster token (`ray get-auth-token`) can run code on this machine",
                          style="yellow", highlight=False)

    overrides = {"search.num_samples": num_samples} if num_samples is not None else {}
    if warm_start is not None:
        overrides["nightly.warm_start"] = warm_start
    with _cli_errors(spec):
        exp = load_spec(spec, overrides)
        if exp.nightly.warm_start and not resume:  # a wrong path fails before Ray starts
            from automl.nightly import check_source

            check_source(exp.nightly.warm_start)
        if exp.nightly.transfer_from and not resume:
            from automl.nightly._sources import check_sources

            check_sources(exp)
        from automl.nightly import run_job
        from automl.pipeline import choose_run_dir, find_unfinished

        again = _resume_command(spec, exp, output)
        if resume:
            _resume(find_unfinished(exp, output, name), address, dashboard_host,
                    dashboard_port, metrics_port, again=again)
            return
        run_dir = choose_run_dir(exp, output, name)
        _quiet_optuna()
        with _job_interrupts(run_dir, again(run_dir)):
            run_job(exp, run_dir, address=address, console=console,
                    dashboard_host=dashboard_host, dashboard_port=dashboard_port,
                    metrics_port=metrics_port)


def _resume_command(spec: Path, exp, output: str | None):
    """``run_dir -> the command that resumes it``: ``automl search SPEC --resume``, with
    ``--output`` and ``--name`` only where the spec's own would not find that run."""
    import shlex

    def command(run_dir: Path) -> str:
        words = ["automl", "search", str(spec), "--resume"]
        if output is not None:
            words += ["--output", output]
        if run_dir.name != exp.name:
            words += ["--name", run_dir.name]
        return shlex.join(words)
    return command


#: the main job's stages in order, as ``<run_dir>/stages/<name>.json`` records them
_JOB_STAGES = ("search", "cv", "refit", "compression", "publish")


@contextlib.contextmanager
def _job_interrupts(run_dir: Path, resume_with: str) -> Iterator[None]:
    """Ctrl-C while the main job runs (:class:`automl._interrupt.JobInterrupts`): the
    first stops it within seconds, says in one line where it stopped and how to resume,
    and exits 130; the second stops at once. An error raised while the job unwinds after
    a Ctrl-C is the interrupt's, not a failure of its own."""
    from automl._interrupt import JobInterrupts, interrupted, leave

    def say(line: str) -> None:
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)

    with JobInterrupts(say):
        try:
            yield
        except (KeyboardInterrupt, Exception) as e:
            if not (isinstance(e, KeyboardInterrupt) or interrupted()):
                raise
            say(_interrupted_line(run_dir, resume_with))
            leave()


def _interrupted_line(run_dir: Path, resume_with: str) -> str:
    """One line: the stage the job stopped in, that nothing was published, and how to
    resume (or that nothing was written yet)."""
    if not (run_dir / "spec.yaml").exists():
        return ("interrupted before the run directory was written; nothing to resume "
                "(run the same command again)")
    done = [n for n in _JOB_STAGES if (run_dir / "stages" / f"{n}.json").exists()]
    left = next((n for n in _JOB_STAGES if n not in done), None)
    where = f"in stage {left}" if left else "after the last stage"
    before = f" ({', '.join(done)} finished before)" if done else ""
    published = "" if "publish" in done else "; nothing was published"
    return f"interrupted {where}{before}{published}; resume with: {resume_with}"


def _quiet_optuna() -> None:
    """Optuna's INFO lines ("A new study created in RDB ...") off: the CLI prints progress."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _resume(run_dir: Path, address, dashboard_host="127.0.0.1", dashboard_port=8265,
            metrics_port=None, again=None) -> None:
    """Continue the unfinished run ``run_dir``; ``again(run_dir)`` is the command a
    Ctrl-C names to resume it (default: ``automl resume RUN_DIR``)."""
    import shlex

    from automl.nightly import run_job
    from automl.spec import load_run_spec

    if (run_dir / "summary.json").exists():
        console.print(f"{run_dir} already finished (summary.json exists); nothing to resume")
        return
    exp = load_run_spec(run_dir)
    _quiet_optuna()
    console.print(f"resume {run_dir}")
    with _job_interrupts(run_dir, again(run_dir) if again else
                         shlex.join(["automl", "resume", str(run_dir)])):
        run_job(exp, run_dir, address=address, console=console,
                dashboard_host=dashboard_host, dashboard_port=dashboard_port,
                metrics_port=metrics_port, resume=True)


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., help="run directory of a sweep whose driver died"),
    address: Optional[str] = typer.Option(None, help="Ray cluster address"),
    dashboard_port: int = typer.Option(8265, help="port of the local Ray dashboard (0: any)"),
) -> None:
    """Continue an unfinished run after a crash; a finished run is left as it is.

    Finished trials are kept; unfinished ones continue from their last checkpoint; ASHA and the study resume."""
    with _cli_errors():
        from automl.rundir import require_run_dir

        require_run_dir(run_dir)
        if not (run_dir / "spec.yaml").exists():
            raise SpecError("not a run directory (no spec.yaml)", where=str(run_dir),
                            fix="pass the folder `automl search` printed as its run dir")
        _resume(run_dir, address, dashboard_port=dashboard_port)


registry_app = typer.Typer(no_args_is_help=True, help="The local model registry.")
app.add_typer(registry_app, name="registry")
RegistryDir = typer.Option(DEFAULT_REGISTRY, "--dir", help="registry folder")


@registry_app.command("list")
def registry_list(registry_dir: Path = RegistryDir) -> None:
    """List registered models: versions, latest, aliases, and the latest's test accuracy
    with what its model trained on (and, for a compressed model, its teacher's figure on
    the same rows, the one it compares with)."""
    from rich import box
    from rich.table import Table

    from automl.registry import Registry, test_figure

    reg = Registry(registry_dir)
    names = reg.names()
    if not names:
        console.print(f"no models registered in {registry_dir}")
        return
    table = Table(title=f"registry {registry_dir}", box=box.SIMPLE_HEAD)
    for col in ("name", "versions", "latest", "aliases", "kind", "test acc", "its teacher",
                "model trained on", "created (UTC)"):
        table.add_column(col, no_wrap=col in ("name", "created (UTC)"))
    for name in names:
        versions = reg.versions(name)
        last = versions[-1]
        aliases = ", ".join(f"{a}->{e['version']}" for a, e in sorted(reg.aliases(name).items()))
        fig = test_figure(last)
        table.add_row(name, str(len(versions)), str(last.version), aliases or "-",
                      str(last.lineage.get("kind", "-")),
                      f"{fig['accuracy']:.4f}" if fig["accuracy"] is not None else "-",
                      f"{fig['teacher_accuracy']:.4f}" if fig["teacher_accuracy"] is not None
                      else "-", fig["trained_on"],
                      last.created_at.replace("T", " ").removesuffix("Z"))
    # piped output would be cut at 80 columns: names and times must stay whole
    out = console if console.is_terminal else Console(width=200)
    out.print(table)
    out.print("test acc: on the run's test split. A compressed model and its teacher trained "
              "on the train rows only, the winner's refit on train + validation rows: compare "
              "a compressed model with its teacher, not with the winner.", highlight=False)


@registry_app.command("show")
def registry_show(ref: str = typer.Argument(..., help="NAME, NAME@VERSION or NAME@ALIAS"),
                  registry_dir: Path = RegistryDir) -> None:
    """Print one version's record (files, lineage, aliases, tracking, card) as JSON on
    stdout, and the path of its model card on stderr."""
    import json

    from automl.registry import Registry

    with _cli_errors():
        version = Registry(registry_dir).get(ref)
    console.print(json.dumps(version.to_dict(), indent=2), markup=False, highlight=False)
    # on stderr, so that stdout stays one JSON document (also under "card")
    err_console.print(f"model card: {version.card.resolve()}" if version.card else
                      "model card: none (registered before model cards)", markup=False,
                      highlight=False, soft_wrap=True)


@registry_app.command("promote")
def registry_promote(
    ref: str = typer.Argument(..., help="NAME@VERSION to promote"),
    alias: str = typer.Option("champion", help="alias to point at it"),
    registry_dir: Path = RegistryDir,
    wandb: bool = typer.Option(True, help="also add the alias to the W&B model artifact"),
) -> None:
    """Point ALIAS at NAME@VERSION (moving it from any other version)."""
    from automl.registry import Registry

    with _cli_errors():
        version = Registry(registry_dir).set_alias(ref, alias)
    console.print(f"{version.ref} is now {version.name}@{alias}", highlight=False)
    if wandb and version.tracking:
        from automl.tracking import log_alias

        try:
            mode = log_alias(version, alias)
        except Exception as e:  # the registry change stands; say what W&B refused
            err_console.print(f"warning: W&B alias not logged: {type(e).__name__}: {e}",
                              style="yellow", highlight=False)
            return
        if mode:
            console.print(f"wandb  artifact {version.tracking['artifact']}:{alias} logged "
                          f"({mode})", highlight=False)


@app.command()
def report(run_dir: Path = typer.Argument(..., help="run directory of a finished search"),
           out: Optional[Path] = typer.Option(None, help="output folder (default RUN_DIR/report)")
           ) -> None:
    """Write an HTML report with PNG figures of RUN_DIR (opens offline)."""
    with _cli_errors():
        from automl.report import build_report

        result = build_report(run_dir, out)
    for name, why in result.skipped.items():
        console.print(f"  {name}: not drawn ({why})", highlight=False)
    console.print(f"report {shown(result.index)} ({len(result.figures)} figures)",
                  highlight=False)


@app.command()
def dashboard(
    run_dir: Path = typer.Argument(..., help="run directory (its study.db), running or finished"),
    host: str = typer.Option("127.0.0.1", help="interface to listen on; anything but loopback "
                             "exposes the study to the network"),
    port: int = typer.Option(8080, help="port (0: any free port)"),
) -> None:
    """Serve RUN_DIR's Optuna study in optuna-dashboard, live while the sweep runs.

    Prints its URL, the Ray dashboard's and the job's latest ETA with its range (a new line
    as the estimate changes, at most every 10 s); Ctrl-C stops it (exit 0)."""
    from automl.cluster import is_loopback

    with _cli_errors():
        from automl.dashboard import eta_line, ray_dashboard_url, start

        board = start(run_dir, host, port)
    if not is_loopback(host):
        err_console.print(f"warning: the study is served on {host}, reachable from the "
                          "network", style="yellow", highlight=False)
    console.print(f"optuna-dashboard {board.url}", highlight=False)
    ray_url = ray_dashboard_url(run_dir)
    console.print(f"ray dashboard    {ray_url}" if ray_url else
                  "ray dashboard    none (the run's Ray instance has stopped, or it joined "
                  "a cluster: see that cluster's dashboard)", highlight=False)
    last, at = eta_line(run_dir), time.monotonic()
    console.print(f"job              {last}", highlight=False)
    try:
        while board.thread.is_alive():
            board.thread.join(1.0)
            if time.monotonic() - at >= 10.0:
                line = eta_line(run_dir)
                if line.rsplit(", ", 1)[0] != last.rsplit(", ", 1)[0]:  # a new estimate
                    console.print(f"job              {line}", highlight=False)
                    last, at = line, time.monotonic()
    except KeyboardInterrupt:
        pass
    finally:
        board.stop()


@app.command()
def compress(
    run_dir: Path = typer.Argument(..., help="run directory of a finished search"),
    spec: Optional[Path] = typer.Option(
        None, help="spec whose compression section replaces the run's (data and split "
        "still come from RUN_DIR/spec.yaml)"),
) -> None:
    """Re-run compression alone on RUN_DIR's winner; register the accepted models.

    Rewrites RUN_DIR/compression/ and summary.json; new models are children of the registered winner."""
    with _cli_errors():
        from automl.compress.job import compress_run
        from automl.publish import register_recompressed

        compress_run(run_dir, spec, console=console)
        register_recompressed(run_dir, console)


@app.command()
def reproduce(run_dir: Path = typer.Argument(..., help="run directory of a finished search")
              ) -> None:
    """Retrain RUN_DIR's winner from its record and compare it with best/model.pt.

    Prints one line: weights identical, or else test score within the CV standard error; exit 1 when neither held."""
    from automl.reproduce import reproduce_run

    with _cli_errors():
        result = reproduce_run(run_dir)
    console.print(result.line(), markup=False, highlight=False)


from automl._cli_jobs import register as _register_job_commands  # noqa: E402

_register_job_commands(app, console, err_console, _fail)  # submit, status, stop


def main() -> None:
    """Entry point of the ``automl`` script and ``python -m automl``."""
    app(prog_name="automl")


if __name__ == "__main__":
    sys.exit(main())
