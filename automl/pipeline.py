"""The main job, stage by stage: data -> search -> best model on the held-out test split.

Each stage writes its result into the run directory (atomically), so a reader of
``summary.json`` needs nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from automl._io import write_json, write_text
from automl.errors import ResourceError, RunError, SpecError
from automl.spec import Experiment


def choose_run_dir(exp: Experiment, output: str | None, name: str | None) -> Path:
    """``<output>/<name>``; without an explicit name, the spec's name with ``-2``, ``-3``...
    appended when taken. An explicit name that is taken is an error (nothing is overwritten).

    Raises:
        SpecError: ``name`` would escape the output folder, or is already used.
        ResourceError: the output folder cannot be created or written.
    """
    root = Path(output or exp.output.dir)
    if name is not None:
        if not name or "/" in name or "\\" in name or name.startswith(".") or name in ("..",):
            raise SpecError(f"run name {name!r} must be a plain folder name", where="--name")
        run_dir = root / name
        if run_dir.exists() and any(run_dir.iterdir()):
            raise SpecError(f"run directory {run_dir} already exists", where="--name",
                            fix="choose another --name or remove that directory")
    else:
        run_dir, n = root / exp.name, 1
        while run_dir.exists() and any(run_dir.iterdir()):
            n += 1
            run_dir = root / f"{exp.name}-{n}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / f".automl-write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise ResourceError(f"cannot write to the output folder: {e.strerror}", where=str(root),
                            fix="pass --output to a writable folder") from None
    return run_dir


def spec_hash(exp: Experiment) -> str:
    """sha256 of the resolved spec (canonical JSON), for lineage."""
    return hashlib.sha256(json.dumps(exp.to_dict(), sort_keys=True).encode()).hexdigest()


def run_main_job(
    exp: Experiment,
    run_dir: Path,
    *,
    address: str | None = None,
    console: Console | None = None,
) -> dict:
    """Load data, run the search on Ray, score the best trial on the test split.

    Returns:
        The summary dict also written to ``<run_dir>/summary.json``.

    Raises:
        DataError: the data cannot be loaded (before Ray starts).
        ResourceError: trials cannot be placed.
        RunError: no trial finished.
    """
    import yaml

    from automl.data import fit_transform, load_dataset, split_indices

    console = console or Console()
    t0 = time.perf_counter()
    dataset = load_dataset(exp.data)
    splits = split_indices(dataset.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    (X_tr, y_tr), (X_val, y_val), (X_te, y_te) = fit_transform(
        dataset, splits.train, splits.val, splits.test
    )
    data_info = {**dataset.describe(), "split": splits.sizes()}
    console.print(f"data   {dataset.name}: {len(dataset.y)} rows, input {dataset.input_shape}, "
                  f"{dataset.num_classes} classes; split {splits.sizes()}")

    from automl import runtime
    from automl.search import admit, run_search
    from automl.search._trainable import TrialData

    handle = runtime.connect(address, exp.resources.num_cpus, exp.resources.object_store_mb)
    try:
        console.print(f"ray    {'started locally' if handle.started else 'connected'}"
                      + (f"; dashboard {handle.dashboard_url}" if handle.dashboard_url else ""))
        # admission before anything is written: an impossible request leaves no run dir
        admission = admit({"CPU": exp.resources.cpus_per_trial}, exp.search.max_concurrent)
        run_dir.mkdir(parents=True, exist_ok=True)
        write_text(run_dir / "spec.yaml", yaml.safe_dump(exp.to_dict(), sort_keys=False))
        write_json(run_dir / "data.json", data_info)
        data = TrialData(X_tr, y_tr, X_val, y_val, dataset.input_shape, dataset.num_classes)
        console.print(f"search {exp.search.num_samples} trials, sampler {exp.search.sampler}, "
                      f"scheduler {exp.scheduler.type}, {admission.max_concurrent} at a time, "
                      f"run dir {run_dir}")
        result = run_search(exp, data, run_dir, admission, console)
    finally:
        runtime.shutdown(handle)

    write_json(run_dir / "trials.json", [t.to_dict() for t in result.trials])
    top = result.ranked[: exp.selection.top_k]
    leaderboard = [_row(t, result.metric) for t in top]
    write_json(run_dir / "leaderboard.json", leaderboard)
    if result.best is None:
        raise RunError(f"no trial finished ({result.counts()}); see {run_dir}/trials.json",
                       where=str(run_dir))
    test = _score_best(result.best, run_dir, X_te, y_te)
    summary = {
        "name": exp.name,
        "run_dir": str(run_dir),
        "spec_sha256": spec_hash(exp),
        "data": data_info,
        "metric": result.metric,
        "mode": result.mode,
        "best": {
            "trial_id": result.best.trial_id,
            "params": result.best.params,
            "config": result.best.config,
            "epochs": result.best.epochs_run,
            "val": result.best.metrics,
            "checkpoint": str(run_dir / "best" / "model.pt"),
        },
        "test": test,
        "trials": result.counts(),
        "search": {k: v for k, v in result.to_dict().items() if k not in ("trials", "ranked")},
        "leaderboard": leaderboard,
        "wall_time_s": round(time.perf_counter() - t0, 2),
    }
    write_json(run_dir / "summary.json", summary)
    print_leaderboard(console, leaderboard, result.metric)
    console.print(
        f"best   trial {result.best.trial_id}: val {result.metric}="
        f"{result.best.metrics.get(result.metric, float('nan')):.4f}, "
        f"test accuracy={test['accuracy']:.4f}; trials {result.counts()}; "
        f"wall {summary['wall_time_s']:.0f}s; summary {run_dir / 'summary.json'}"
    )
    return summary


def _row(t, metric: str) -> dict:
    return {"trial_id": t.trial_id, metric: t.metrics.get(metric), "epochs": t.epochs_run,
            "end_state": t.end_state, "params": t.params}


def _score_best(best, run_dir: Path, X_te, y_te) -> dict:
    """Reload the best trial's checkpoint (weights_only) and score it once on the test split."""
    from automl.train import evaluate, load_checkpoint, to_tensors

    if best.checkpoint is None:
        raise RunError(f"best trial {best.trial_id} left no checkpoint", where=str(run_dir))
    src = Path(best.checkpoint) / "checkpoint.pt"
    dst = run_dir / "best" / "model.pt"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    model, _ = load_checkpoint(dst)
    scores = evaluate(model, *to_tensors(X_te, y_te))
    return {"accuracy": scores["accuracy"], "loss": scores["loss"], "f1": scores["f1"],
            "rows": int(len(y_te)), "model": "best trial checkpoint, reloaded"}


def print_leaderboard(console: Console, rows: list[dict], metric: str) -> None:
    table = Table(title="leaderboard", show_lines=False)
    for col in ("rank", "trial", metric, "epochs", "end", "config"):
        table.add_column(col)
    # show what differs between the rows; what they share is in spec.yaml
    keys = sorted({k for r in rows for k in r["params"]})
    varying = [k for k in keys if len({repr(r["params"].get(k)) for r in rows}) > 1] or keys
    for i, r in enumerate(rows, 1):
        value = r.get(metric)
        cfg = " ".join(f"{k.split('.')[-1]}={_fmt(r['params'][k])}" for k in varying
                       if k in r["params"])
        table.add_row(str(i), r["trial_id"], f"{value:.4f}" if value is not None else "-",
                      str(r["epochs"]), r["end_state"], cfg)
    console.print(table)


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
