"""The main job, stage by stage: data -> search -> best model on the held-out test split.

Each stage writes its result into the run directory (atomically), so a reader of
``summary.json`` needs nothing else.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from automl._io import write_json, write_text
from automl.errors import DataError, ResourceError, RunError, SpecError
from automl.spec import IMAGE_FAMILIES, Experiment


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
    # probe the nearest existing folder: nothing is created before the run really starts
    probe_dir = root
    while not probe_dir.exists() and probe_dir != probe_dir.parent:
        probe_dir = probe_dir.parent
    try:
        if not probe_dir.is_dir():
            raise NotADirectoryError(20, "not a directory")
        probe = probe_dir / f".automl-write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise ResourceError(f"cannot write to the output folder: {e.strerror}", where=str(root),
                            fix="pass --output to a writable folder") from None
    return run_dir


def check_same_data(run_dir: Path, data_info: dict) -> None:
    """A resumed run must see the data it started with (same sha256).

    Raises:
        DataError: the data changed since the run started.
    """
    before = json.loads((run_dir / "data.json").read_text()) if (run_dir / "data.json").exists() else {}
    if before.get("sha256") and before["sha256"] != data_info.get("sha256"):
        raise DataError(
            f"data changed since this run started (sha256 {before['sha256'][:12]} -> "
            f"{data_info['sha256'][:12]})", where=str(run_dir / "data.json"),
            fix="start a new run instead of resuming",
        )


def find_unfinished(exp: Experiment, output: str | None, name: str | None) -> Path:
    """The run directory ``automl search SPEC --resume`` continues: ``<output>/<name>``, or
    the most recent run of the spec's name (``name``, ``name-2``, ...) without a summary
    (``summary.json``); when all have one, the most recent run, which says it finished.

    Raises:
        SpecError: no such run directory.
    """
    root = Path(output or exp.output.dir)
    if name is not None:
        cands = [root / name]
    else:
        cands = [p for p in root.glob(f"{exp.name}*")
                 if p.name == exp.name or p.name.removeprefix(exp.name + "-").isdigit()]
    cands = [p for p in cands if (p / "spec.yaml").exists()]
    if not cands:
        raise SpecError(f"no run of '{name or exp.name}' to resume in {root}", where="--resume",
                        fix="check --output/--name, or start a new run without --resume")
    # the newest unfinished run; when every run has finished, the newest (which says so)
    unfinished = [p for p in cands if not (p / "summary.json").exists()]
    return max(unfinished or cands, key=lambda p: p.stat().st_mtime)


def check_storage(exp: Experiment, nodes: int) -> None:
    """On a cluster of several nodes, trial checkpoints must go where every node can
    write and the driver can read: a storage URI or a declared shared filesystem.

    Raises:
        ResourceError: more than one node and a node-local output folder.
    """
    if nodes > 1 and not (exp.output.storage_uri or exp.output.shared):
        raise ResourceError(
            f"the cluster has {nodes} nodes but output.dir '{exp.output.dir}' is local to "
            "this node", where="output",
            fix="set output.storage_uri (s3://..., gs://...) or output.shared: true "
                "if that folder is a shared filesystem",
        )


def spec_hash(exp: Experiment) -> str:
    """sha256 of the resolved spec (canonical JSON), for lineage."""
    return hashlib.sha256(json.dumps(exp.to_dict(), sort_keys=True).encode()).hexdigest()


def run_main_job(
    exp: Experiment,
    run_dir: Path,
    *,
    address: str | None = None,
    console: Console | None = None,
    dashboard_host: str = "127.0.0.1",
    dashboard_port: int = 8265,
    metrics_port: int | None = None,
    resume: bool = False,
) -> dict:
    """Load and clean data, run the search on Ray, cross-validate the top k, retrain the
    winner on all training rows (train + validation) and score it once on the test split.

    With ``resume``, ``run_dir`` is an unfinished run (its driver was killed): the Tune
    experiment is restored (finished trials kept, unfinished ones continue from their
    last checkpoint, the Optuna study keeps its history) and the later stages run again.

    Returns:
        The summary dict also written to ``<run_dir>/summary.json``.

    Raises:
        DataError: the data cannot be loaded, or a class is too small for the split or
            the folds (before Ray starts).
        ResourceError: trials cannot be placed.
        RunError: no trial finished, or cross-validation failed or timed out.
    """
    import yaml

    from automl.data import fit_transform, load_dataset, split_indices
    from automl.selection import make_folds

    console = console or Console()
    t0 = time.perf_counter()
    dataset = load_dataset(exp.data)
    _check_kind(exp, dataset)
    splits = split_indices(dataset.y, exp.data.test_size, exp.data.val_size, exp.data.seed,
                           classes=dataset.classes)
    # the fold plan is checked now (tiny classes), before any cluster time is spent
    sel = exp.selection
    make_folds(dataset.y, splits.pool, sel.cv_folds, sel.cv_repeats, exp.data.seed,
               allow_fewer=sel.allow_fewer_folds, classes=dataset.classes)
    (X_tr, y_tr), (X_val, y_val), _ = fit_transform(
        dataset, splits.train, splits.val, splits.test, impute=exp.data.impute
    )
    data_info = {**dataset.describe(), "split": splits.sizes(),
                 "model_input_shape": list(X_tr.shape[1:])}  # after one-hot encoding
    counts = ", ".join(f"{c}: {n}" for c, n in list(data_info["class_counts"].items())[:12])
    console.print(f"data   {dataset.name}: {dataset.n_rows} rows, input {tuple(X_tr.shape[1:])}, "
                  f"{dataset.num_classes} classes ({counts}); removed "
                  f"{data_info['cleaning']['duplicate_rows']} duplicate and "
                  f"{data_info['cleaning']['missing_target_rows']} unlabelled rows; "
                  f"split {splits.sizes()}", highlight=False)

    from automl import runtime
    from automl.search import admit_trials, run_search
    from automl.search._trainable import TrialData

    handle = runtime.connect(address, exp.resources.num_cpus, exp.resources.object_store_mb,
                             dashboard_host=dashboard_host, dashboard_port=dashboard_port,
                             metrics_export_port=metrics_port)
    try:
        console.print(f"ray    {'started locally' if handle.started else 'connected'}"
                      + (f"; dashboard {handle.dashboard_url}" if handle.dashboard_url else "")
                      + (f"; metrics {handle.metrics_url}" if handle.metrics_url else ""))
        # admission before anything is written: an impossible request leaves no run dir
        admission = admit_trials(exp.resources)
        check_storage(exp, admission.nodes)
        if resume:
            check_same_data(run_dir, data_info)
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
            write_text(run_dir / "spec.yaml", yaml.safe_dump(exp.to_dict(), sort_keys=False))
            write_json(run_dir / "data.json", data_info)
        from automl import nightly as nightly_hooks  # warm start, transfer, champion

        nightly = nightly_hooks.before_search(exp, run_dir, data_info, console, resume)
        data = TrialData(X_tr, y_tr, X_val, y_val, tuple(X_tr.shape[1:]), dataset.num_classes,
                         init=nightly.transfer)
        console.print(f"search {exp.search.num_samples} trials, sampler {exp.search.sampler}, "
                      f"scheduler {exp.scheduler.type}, {admission.max_concurrent} at a time, "
                      f"run dir {run_dir}")
        from automl.tracking._callbacks import sweep_callbacks

        target, callbacks = sweep_callbacks(exp, run_dir)
        result = run_search(exp, data, run_dir, admission, console, callbacks=callbacks,
                            resume=resume)
        write_json(run_dir / "trials.json", [t.to_dict() for t in result.trials])
        top = result.ranked[: exp.selection.top_k]
        leaderboard = [_row(t, result.metric) for t in top]
        write_json(run_dir / "leaderboard.json", leaderboard)
        if result.best is None:
            raise RunError(f"no trial finished ({result.counts()}); see {run_dir}/trials.json",
                           where=str(run_dir))
        print_leaderboard(console, leaderboard, result.metric)
        cv, final = _select(exp, dataset, splits, top, run_dir, console)
        nightly_hooks.after_selection(exp, nightly, dataset, splits, cv, data_info, console)
    finally:
        runtime.shutdown(handle)
    winner = cv.winner_candidate
    from automl.compress.job import compress_step  # the spec's chain, on the winner

    compression = compress_step(exp, dataset, splits, run_dir, console=console,
                                cv_accuracy=(winner.summary.get("accuracy") or {}).get("mean"))
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
        },
        "winner": {
            "trial_id": winner.trial_id,
            "reason": cv.reason,
            "search_rank": winner.rank,
            "changed_vs_search_best": winner.trial_id != result.best.trial_id,
            "params": winner.params,
            "config": winner.config,
            "n_params": winner.n_params,
            "cv": winner.summary,
            "checkpoint": str(run_dir / "best" / "model.pt"),
            "trained_on": "train + validation rows",
        },
        "cv": cv.to_dict(),
        "test": {**final["test"], "model": "CV winner retrained on train + validation rows"},
        "compression": compression,
        "confusion_matrix": str(run_dir / "confusion_matrix.json"),
        "trials": result.counts(),
        "search": {k: v for k, v in result.to_dict().items() if k not in ("trials", "ranked")},
        "leaderboard": leaderboard,
        "wall_time_s": round(time.perf_counter() - t0, 2),
    }
    from automl.publish import publish

    summary.update(publish(exp, run_dir, summary, target, console))
    summary.update(nightly_hooks.after_publish(exp, nightly, summary, console))
    write_json(run_dir / "summary.json", summary)
    s = winner.summary[cv.metric]
    console.print(
        f"winner trial {winner.trial_id} (search rank {winner.rank}): CV {cv.metric} "
        f"{s['mean']:.4f} ± {s['std']:.4f}; retrained on {final['test']['train_rows']} rows, "
        f"test accuracy={final['test']['accuracy']:.4f}"
        + (f", {cv.metric}={final['test'][cv.metric]:.4f}" if cv.metric != "accuracy" else "")
        + "; trials " + ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in
                                  summary["trials"].items() if state != "total")
        + f" of {summary['trials']['total']}; "
        f"wall {summary['wall_time_s']:.0f}s; summary {run_dir / 'summary.json'}", highlight=False
    )
    return summary


def _row(t, metric: str) -> dict:
    return {"trial_id": t.trial_id, metric: t.metrics.get(metric), "epochs": t.epochs_run,
            "end_state": t.end_state, "params": t.params}


def _check_kind(exp: Experiment, dataset) -> None:
    """Spec choices that need images, checked against data whose kind only the file
    tells (npz)."""
    if dataset.kind == "image":
        return
    families = [f for f in exp.model.families() if f in IMAGE_FAMILIES]
    if families:
        raise DataError(f"holds tabular features but model.family '{families[0]}' needs images",
                        where=dataset.name, fix="use model.family: mlp")
    if not exp.data.augment.is_identity():
        raise DataError("holds tabular features but data.augment needs images",
                        where=dataset.name, fix="remove data.augment")


def _select(exp: Experiment, dataset, splits, top, run_dir: Path, console):
    """Cross-validate ``top``, refit the winner on train + validation rows and score it once
    on the test split; writes ``cv.json``, ``best/model.pt`` (with tabular data also
    ``best/preprocessor.skops``), ``confusion_matrix.json`` and ``reproducibility.json``.
    Folds are single-process Ray tasks with their own admission (one worker's resources)."""
    import torch

    from automl.data import PREPROCESSOR_FILE, save_preprocessor
    from automl.selection import cross_validate, print_cv_table, refit_and_test

    sel = exp.selection
    console.print(f"cv     top {len(top)} trials, {sel.cv_folds} folds x {sel.cv_repeats} "
                  f"repeat(s) on {len(splits.pool)} training rows"
                  + (", fold halving" if sel.fold_halving else ""), highlight=False)
    cv = cross_validate(exp, dataset, splits.pool, top, console=console)
    write_json(run_dir / "cv.json", cv.to_dict())
    print_cv_table(console, cv)
    final = refit_and_test(exp, dataset, splits, cv.winner_candidate.config)
    dst = run_dir / "best" / "model.pt"
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".model.pt.{os.getpid()}")
    torch.save(final["checkpoint"], tmp)
    os.replace(tmp, dst)
    if final["preprocessor"] is not None:  # tabular data: the preprocessing the refit used
        save_preprocessor(final["preprocessor"], dst.with_name(PREPROCESSOR_FILE))
    write_json(run_dir / "confusion_matrix.json", final["confusion_matrix"])
    from automl.reproduce import write_record  # what `automl reproduce` retrains from

    write_record(run_dir, exp, splits, final, spec_sha256=spec_hash(exp),
                 data_sha256=dataset.checksum)
    return cv, final


def print_leaderboard(console: Console, rows: list[dict], metric: str) -> None:
    """The top trials as a table: the sampled params that differ between rows, per row;
    those every row shares, once, in the caption (all are in ``leaderboard.json``)."""
    table = Table(title="leaderboard", show_lines=False)
    for col in ("rank", "trial", metric, "epochs", "end", "config"):
        # piped output is 80 columns: values wrap onto more lines rather than being cut
        table.add_column(col, overflow="fold")
    keys = sorted({k for r in rows for k in r["params"]})
    varying = [k for k in keys if len({repr(r["params"].get(k)) for r in rows}) > 1] or keys
    shared = [k for k in keys if k not in varying and all(k in r["params"] for r in rows)]
    if shared:
        table.caption = "every row: " + _params_text(rows[0]["params"], shared)
    for i, r in enumerate(rows, 1):
        value = r.get(metric)
        cfg = _params_text(r["params"], varying)
        table.add_row(str(i), r["trial_id"], f"{value:.4f}" if value is not None else "-",
                      str(r["epochs"]), r["end_state"], cfg)
    console.print(table)


def _params_text(params: dict, keys: list[str]) -> str:
    """``name=value`` of ``keys`` present in ``params``, by the last part of each key."""
    return " ".join(f"{k.split('.')[-1]}={_fmt(params[k])}" for k in keys if k in params)


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
