"""Command line: ``automl search``, ``automl validate``.

Every error this package raises on purpose becomes one line on stderr and a
stable exit code: 0 success, 1 failed run, 2 bad input (spec, data, flags),
3 resources (a trial cannot be placed, output not writable), 130 interrupted.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from automl.errors import EXIT_INTERRUPTED, AutoMLError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Hyperparameter search and AutoML for PyTorch on Ray Tune, Optuna and ASHA.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True)


def _fail(error: AutoMLError) -> None:
    err_console.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(error.exit_code)


@app.command()
def validate(spec: Path = typer.Argument(..., help="experiment spec (YAML)")) -> None:
    """Validate SPEC, print the resolved experiment and the size of its search space."""
    import yaml

    from automl.space import describe
    from automl.spec import load_spec

    try:
        exp = load_spec(spec)
    except AutoMLError as e:
        _fail(e)
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
    console.print(f"{spec}: valid")


@app.command()
def search(
    spec: Path = typer.Argument(..., help="experiment spec (YAML)"),
    name: Optional[str] = typer.Option(None, help="run name (folder under --output)"),
    output: Optional[str] = typer.Option(None, help="folder for run directories"),
    num_samples: Optional[int] = typer.Option(None, help="number of trials"),
    address: Optional[str] = typer.Option(
        None, help="Ray cluster address (default: $RAY_ADDRESS, else start Ray locally)"
    ),
) -> None:
    """Run the sweep SPEC describes and write a run directory with summary.json."""
    from automl.spec import load_spec

    overrides = {"search.num_samples": num_samples} if num_samples is not None else {}
    try:
        exp = load_spec(spec, overrides)
        from automl.pipeline import choose_run_dir, run_main_job

        run_dir = choose_run_dir(exp, output, name)
        run_main_job(exp, run_dir, address=address, console=console)
    except AutoMLError as e:
        _fail(e)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None


def main() -> None:
    """Entry point of the ``automl`` script and ``python -m automl``."""
    app(prog_name="automl")


if __name__ == "__main__":
    sys.exit(main())
