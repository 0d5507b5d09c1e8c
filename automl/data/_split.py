"""The fixed, stratified train/validation/test split (scikit-learn)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import train_test_split

from automl.errors import DataError, cut_list


@dataclass(frozen=True, eq=False)
class Splits:
    """Row indices into a :class:`Dataset`; disjoint, together all rows."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}

    @property
    def pool(self) -> np.ndarray:
        """Every row but the test split (train + validation), sorted: what
        cross-validation and the final refit train on."""
        return np.sort(np.concatenate([self.train, self.val]))


def split_indices(
    y: np.ndarray, test_size: float, val_size: float, seed: int, classes=None,
    task: str = "classification",
) -> Splits:
    """Stratified split of ``range(len(y))`` into train, validation and test: on the class,
    or for regression on quantile bins of the target (:meth:`automl.task.Task.stratify`;
    unstratified when the target is too small to bin).

    ``test_size`` and ``val_size`` are fractions of all rows. The same ``y`` and
    ``seed`` always give the same split, so the test rows stay held out across runs.

    Raises:
        DataError: a class has too few rows to appear in every split (names the class).
    """
    from automl.task import task_of

    strata = task_of(task).stratify(y, n_splits=4)
    try:
        return _split(len(y), strata, test_size, val_size, seed)
    except ValueError as e:
        if task == "classification":
            raise _split_error(y, classes, e) from None
        return _split(len(y), None, test_size, val_size, seed)  # too few rows per bin


def _split(n: int, strata: np.ndarray | None, test_size: float, val_size: float,
           seed: int) -> Splits:
    """Train / validation / test of ``range(n)``, stratified on ``strata`` (or not).

    Raises:
        ValueError: scikit-learn's, when a stratum is too small to split.
    """
    idx = np.arange(n)
    rest, test = train_test_split(idx, test_size=test_size, stratify=strata, random_state=seed)
    train, val = train_test_split(rest, test_size=val_size / (1.0 - test_size),
                                  stratify=None if strata is None else strata[rest],
                                  random_state=seed)
    return Splits(np.sort(train), np.sort(val), np.sort(test))


def _split_error(y: np.ndarray, classes, error: ValueError) -> DataError:
    """One line for a stratified split scikit-learn refused: the classes with a single row
    (scikit-learn's own message lists every one of them), cut to a few and a count."""
    counts = np.bincount(y)
    present = np.flatnonzero(counts)
    names = [classes[c] if classes is not None else str(c) for c in range(len(counts))]
    what = f"cannot split {len(y)} rows into stratified train/validation/test"
    fix = "add rows of that class, drop it, or change data.test_size / data.val_size"
    single = present[counts[present] < 2]
    if len(single) > 1:
        what += (f": {len(single)} of {len(present)} classes have a single row "
                 f"({cut_list(repr(names[c]) for c in single)}); each needs at least 2")
        fix = "add rows of those classes or drop them"
    else:
        small = present[np.argmin(counts[present])]
        # scikit-learn lists the classes it means in brackets: a few of them and a count
        reason = re.sub(r"\[([^\]]*)\]", lambda m: f"[{cut_list(m[1].split(', '))}]",
                        " ".join(str(error).split()))
        what += f": class '{names[small]}' has {counts[small]} rows ({reason})"
    if len(present) > max(20, len(y) // 4):  # hundreds of classes: a continuous target
        fix += (f"; a target with {len(present)} distinct values in {len(y)} rows looks like "
                "a regression target: set task: regression")
    return DataError(what, where="data", fix=fix)


def split_dataset(data, spec) -> Splits:
    """The train/validation/test split of ``data`` (a :class:`Dataset`) that ``spec`` (a
    ``DataSpec``) asks for.

    When the source brings its own test split (``data.test_mask``, MNIST-1D's), those rows
    are the test split and ``spec.test_size`` is not used; ``spec.val_size`` (a fraction of
    all rows) of the others, stratified, become the validation rows. Otherwise
    :func:`split_indices` draws all three.

    Raises:
        DataError: a class has too few rows to appear in every split (names the class).
    """
    if data.test_mask is None:
        return split_indices(data.y, spec.test_size, spec.val_size, spec.seed,
                             classes=data.classes, task=data.task)
    test = np.flatnonzero(data.test_mask)
    rest = np.flatnonzero(~data.test_mask)
    n_val = int(round(spec.val_size * len(data.y)))
    if not 0 < n_val < len(rest):
        raise DataError(f"data.val_size {spec.val_size} asks for {n_val} validation rows of "
                        f"the {len(rest)} outside the source's test split", where="data",
                        fix="choose a data.val_size that leaves training rows")
    from automl.task import task_of

    strata = task_of(data.task).stratify(data.y[rest], n_splits=2)
    try:
        train, val = train_test_split(rest, test_size=n_val, stratify=strata,
                                      random_state=spec.seed)
    except ValueError as e:
        raise DataError(f"cannot split the {len(rest)} rows outside the test split into "
                        f"stratified train/validation rows ({e})", where="data",
                        fix="change data.val_size") from None
    return Splits(np.sort(train), np.sort(val), np.sort(test))
