"""Stratified (repeated) k-fold plans over the training rows, with the tiny-class check."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import RepeatedKFold, RepeatedStratifiedKFold

from automl.errors import DataError


@dataclass(frozen=True, eq=False)
class FoldPlan:
    """Folds as row indices into the dataset (not into ``pool``).

    Attributes:
        folds: ``(train_rows, val_rows)`` per fold, repeat-major: fold ``i`` is repeat
            ``i // n_folds``, split ``i % n_folds``.
        n_folds: splits per repeat (may be fewer than asked, see ``warnings``).
        n_repeats: repeats, each with a fresh shuffle.
        seed: the ``random_state`` of scikit-learn's ``RepeatedStratifiedKFold``.
        warnings: one line each, e.g. fewer folds than asked.
    """

    folds: tuple[tuple[np.ndarray, np.ndarray], ...]
    n_folds: int
    n_repeats: int
    seed: int
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"n_folds": self.n_folds, "n_repeats": self.n_repeats, "seed": self.seed,
                "warnings": list(self.warnings),
                "sizes": [[len(tr), len(va)] for tr, va in self.folds]}


def make_folds(
    y: np.ndarray,
    pool: np.ndarray,
    n_folds: int,
    n_repeats: int = 1,
    seed: int = 0,
    *,
    allow_fewer: bool = False,
    classes: tuple[str, ...] | None = None,
    task: str = "classification",
) -> FoldPlan:
    """Stratified k-fold (repeated ``n_repeats`` times) over the rows ``pool`` of ``y``.

    Classification: every fold's validation part holds each class, so each class needs at
    least ``n_folds`` rows in ``pool``. Regression: stratified on quantile bins of the
    target (:meth:`automl.task.Task.stratify`), plain shuffled k-fold when it cannot be
    binned so that each bin holds ``n_folds`` rows.

    Raises:
        DataError: a class has fewer rows than ``n_folds`` (names the class and its
            count) unless ``allow_fewer``, which lowers the fold count to that class's
            rows with a warning; even then every class needs at least 2 rows.
    """
    pool = np.asarray(pool)
    if task != "classification":
        from automl.task import task_of

        if len(pool) < 2 * n_folds:
            raise DataError(f"{len(pool)} training rows cannot make {n_folds} "
                            "cross-validation folds", where="selection.cv_folds",
                            fix="lower selection.cv_folds or add rows")
        strata = task_of(task).stratify(y[pool], n_splits=n_folds)
        if strata is None:
            splitter = RepeatedKFold(n_splits=n_folds, n_repeats=n_repeats, random_state=seed)
            folds = tuple((pool[tr], pool[va]) for tr, va in splitter.split(pool))
        else:
            splitter = RepeatedStratifiedKFold(n_splits=n_folds, n_repeats=n_repeats,
                                               random_state=seed)
            folds = tuple((pool[tr], pool[va]) for tr, va in splitter.split(pool, strata))
        return FoldPlan(folds, n_folds, n_repeats, seed)
    counts = np.bincount(y[pool], minlength=len(classes) if classes else 0)
    present = np.flatnonzero(counts)
    small = int(present[np.argmin(counts[present])])
    have = int(counts[small])
    name = classes[small] if classes else str(small)
    warnings: list[str] = []
    if have < n_folds:
        if not allow_fewer or have < 2:
            fix = "add rows of that class or drop it"
            if have >= 2:
                fix = (f"lower selection.cv_folds to {have}, set selection.allow_fewer_folds: "
                       "true, or add rows of that class")
            raise DataError(
                f"class '{name}' has {have} training row{'s' * (have != 1)}, fewer than "
                f"the {n_folds} cross-validation folds", where="selection.cv_folds", fix=fix,
            )
        warnings.append(f"class '{name}' has {have} training rows: cross-validating with "
                        f"{have} folds instead of {n_folds}")
        n_folds = have
    splitter = RepeatedStratifiedKFold(n_splits=n_folds, n_repeats=n_repeats, random_state=seed)
    folds = tuple((pool[tr], pool[va]) for tr, va in splitter.split(pool, y[pool]))
    return FoldPlan(folds, n_folds, n_repeats, seed, tuple(warnings))
