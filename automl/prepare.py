"""The data stage of a run, before any cluster starts: load and clean the data, check its
kind against the spec, split it, check the fold plan, and fit the search's preprocessing
on the train rows. ``automl search`` runs it before Ray starts and ``automl validate``
runs it instead of a search, so both refuse the same data in the same one line. A spec
that names the user's own model (an import path) has its factory imported, checked and
called once here, on the data's input shape (``automl.models.user``).

Imports neither ray nor torch (torch only for a user's model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from automl.errors import DataError, cut_list
from automl.spec import KIND_WORDS, Experiment, kind_mismatch

#: seconds the driver waits at most for the warm read workers before the sweep starts
WARM_WAIT_S = 20.0


@dataclass(frozen=True)
class Prepared:
    """The data of a run, loaded, cleaned and split, and the arrays the search trains on
    (preprocessing fitted on the train rows only).

    Attributes:
        dataset: the ``automl.data.Dataset``; splits: its ``Splits``; info: the
            ``data.json`` description; search_data: the search's ``TrialData`` arrays
            ``(X_train, y_train, X_val, y_val)``; notes: lines to print after the data line
            (a user's factory that raised for the configuration it was tried with).
    """

    dataset: Any
    splits: Any
    info: dict
    search_data: tuple
    #: the experiment with its task decided (a table's target column decides an unset one)
    exp: Experiment | None = None
    notes: tuple[str, ...] = field(default=())
    #: the image scan of data that stream (``automl.data.ImageScan``); None in memory
    scan: Any = None

    def ready(self, exp: Experiment, console: Console | None = None,
              concurrent: int = 1) -> dict:
        """Once Ray is up: what the data path needs before any trial reads. In memory,
        nothing; streaming, the Parquet cache built by Ray Data tasks, or found and reused
        (``automl.data.build_cache``). Returns the ``data`` section's path entries
        (``path``: ``in_memory`` or ``streaming``, with the cache's location, size and
        whether it was reused) and prints them in one line. ``concurrent``: trials that run
        at once (their streams' read workers are started now, warm, and waited for at most
        :data:`WARM_WAIT_S` seconds).

        Raises:
            DataError: an image cannot be decoded or has another size (named).
        """
        if self.scan is None:
            return {"path": "in_memory"}
        import ray

        from automl.cluster._ray_private import tune_trial_runtime_env
        from automl.data import build_cache, cache_root, start_ray_data, warm_read_workers

        note = None if console is None else (
            lambda line: console.print(line, highlight=False, markup=False))
        info = build_cache(self.scan, cache_root(exp), exp.data.seed, note).to_dict()
        # the trials' first reads (a train stream each, two read tasks at once) find
        # workers that have imported what the reads run on, started under the runtime
        # environment Tune gives its trials (their tasks inherit it; Ray reuses a worker
        # only within one environment)
        warm = warm_read_workers(min(8, 2 * max(1, concurrent)), tune_trial_runtime_env())
        if info["cache_reused"]:  # Ray Data's own actors, as a build would have started
            start_ray_data()
        # their start (imports, a few CPU-seconds each) done before the trials start, not
        # taken from the trials' first epoch (bounded: a busy cluster may start them later)
        ray.wait(warm, num_returns=len(warm), timeout=WARM_WAIT_S)
        if console is not None:
            how = ("reused" if info["cache_reused"]
                   else f"built in {info['cache_build_s']:.0f}s")
            size = info["cache_bytes"]
            size = f"{size / 2**20:.0f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"
            console.print(f"data   streaming from {info['cache']} "
                          f"({size} in {info['cache_files']} "
                          f"Parquet files, {how})", highlight=False, markup=False)
        return info

    def line(self) -> str:
        """The data line a run prints: rows, input shape, classes (regression: the
        target's range), what cleaning removed or skipped, the split."""
        info, data = self.info, self.dataset
        if data.task == "regression":
            t = info["target"]
            what = (f"a regression target ({t['min']:.4g} to {t['max']:.4g}, mean "
                    f"{t['mean']:.4g}, std {t['std']:.4g})")
        else:
            counts = cut_list((f"{c}: {n}" for c, n in info["class_counts"].items()), keep=12)
            what = f"{data.num_classes} classes ({counts})"
        path = ("; streams through Ray Data (data.streaming)" if self.scan is not None
                else "")
        return (f"data   {data.name}: {data.n_rows} rows, input "
                f"{tuple(info['model_input_shape'])}, {what}; "
                f"{cleaning_note(info['cleaning'])}; split {self.splits.sizes()}{path}")

    def task_line(self) -> str | None:
        """One line when the target column chose the task (the spec did not say)."""
        data = self.dataset
        if not data.task_reason:
            return None
        other = "classification" if data.task == "regression" else "regression"
        return (f"task   {data.task}: {data.task_reason} (set task: {other} in the spec to "
                "change it)")


def cleaning_note(cleaning: dict) -> str:
    """What loading left out, for the data line: ``removed 3 duplicate and 0 unlabelled
    rows; skipped 2 non-image files; dropped ID column 'id' (300 distinct values)``."""
    parts = [f"removed {cleaning.get('duplicate_rows', 0)} duplicate and "
             f"{cleaning.get('missing_target_rows', 0)} unlabelled rows"]
    if cleaning.get("non_image_files"):
        n = cleaning["non_image_files"]
        parts.append(f"skipped {n} non-image file{'s' * (n != 1)}")
    ids = cleaning.get("id_columns") or {}
    if len(ids) == 1:
        (col, n), = ids.items()
        parts.append(f"dropped ID column '{col}' ({n} distinct text values, not categories)")
    elif ids:
        parts.append(f"dropped {len(ids)} ID columns ({cut_list(repr(c) for c in ids)}: "
                     "distinct text values, not categories)")
    return "; ".join(parts)


def prepare(exp: Experiment, console: Console | None = None) -> Prepared:
    """Load and clean the data, split it (the test split is never searched on), check the
    fold plan (tiny classes fail here, before any cluster time is spent) and fit the
    search's preprocessing on the train rows; print :meth:`Prepared.line` on ``console``.

    Raises:
        DataError: the data cannot be loaded, hold another kind than the spec's choices
            need, or a class is too small for the split or folds.
        SpecError: a user's model family cannot be imported, its factory does not fit its
            section, or it builds no ``nn.Module`` with the data's shape
            (``automl.models.user.resolve`` and ``probe``).
    """
    from automl.data import (
        cache_root,
        fit_transform,
        load_dataset,
        scan_images,
        split_dataset,
        streamed_dataset,
        wants_streaming,
    )
    from automl.selection import make_folds

    if exp.user_code():  # a wrong import path fails before the data are read
        from automl.models.user import metric_mode, resolve

        resolve(exp)
        if metric_mode(exp) and exp.search.mode is None:  # the user metric's direction
            exp = exp.model_copy(update={"search": exp.search.model_copy(
                update={"mode": metric_mode(exp)})})
    scan = None
    if wants_streaming(exp.data, store_bytes(exp)):  # read from a cache, never held whole
        scan = scan_images(exp.data, exp.task)
        dataset = streamed_dataset(scan, cache_root(exp))
    else:
        dataset = load_dataset(exp.data, exp.task)
    exp = exp.with_task(dataset.task)  # a table's target decided an unset task
    check_kind(exp, dataset)
    splits = split_dataset(dataset, exp.data)  # MNIST-1D keeps the paper's own test split
    sel = exp.selection
    make_folds(dataset.y, splits.pool, sel.cv_folds, sel.cv_repeats, exp.data.seed,
               allow_fewer=sel.allow_fewer_folds, classes=dataset.classes, task=dataset.task)
    (X_tr, y_tr), (X_val, y_val), _ = fit_transform(
        dataset, splits.train, splits.val, splits.test, impute=exp.data.impute
    )
    info = {**dataset.describe(), "split": splits.sizes(),
            "model_input_shape": list(X_tr.shape[1:])}  # after one-hot encoding
    notes: list[str] = []
    if exp.model.user_families():
        from automl.models.user import probe

        notes = probe(exp, tuple(X_tr.shape[1:]), dataset.output_size)
    info["path"] = "streaming" if scan is not None else "in_memory"
    prepared = Prepared(dataset, splits, info, (X_tr, y_tr, X_val, y_val), exp=exp,
                        notes=tuple(notes), scan=scan)
    if console is not None:
        if line := prepared.task_line():
            console.print(line, highlight=False, markup=False)
        console.print(prepared.line(), highlight=False)
        for note in notes:
            console.print(f"model  {note}", highlight=False, markup=False)
    return prepared


def store_bytes(exp: Experiment) -> float:
    """Ray's object store in bytes, as ``streaming: auto`` weighs it: ``resources.
    object_store_mb``, else Ray's default for a local instance (30% of this machine's
    memory)."""
    if exp.resources.object_store_mb:
        return exp.resources.object_store_mb * 2**20
    import psutil

    return 0.3 * psutil.virtual_memory().total


def check_kind(exp: Experiment, dataset) -> None:
    """Spec choices that need another kind of data (images, 1D signals), checked against
    data whose kind only the file tells (an npz without ``data.kind``).

    Raises:
        DataError: a model family, augmentation or compression student that cannot train
            on ``dataset``'s kind (named, with the fix).
    """
    problem = kind_mismatch(dataset.kind, exp.model.families(), exp.data.augment,
                            [(i, s.family) for i, s in exp.compression.students()])
    if problem:
        key, needs, fix = problem
        raise DataError(f"holds {KIND_WORDS[dataset.kind]} but {key} {needs}",
                        where=dataset.name, fix=fix)
