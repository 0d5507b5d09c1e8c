"""The :class:`Dataset` record and cleaning (exact duplicates); loading is
:mod:`automl.data._load`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a frame is built: image data never needs it
    import pandas as pd


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled dataset held in memory.

    Attributes:
        name: where it came from (``digits``, a file path, ...).
        X: images: float32 ``(N, C, H, W)`` scaled to [0, 1]; 1D signals: float32
            ``(N, C, L)`` as loaded (standardised later, per channel, on training rows
            only); None for tabular data.
        y: classification: int64 ``(N,)`` class indices in ``[0, num_classes)``;
            regression: float32 ``(N,)`` target values.
        classes: class names, indexed by ``y`` (empty for regression).
        kind: ``"image"``, ``"tabular"`` or ``"signal"``.
        frame: tabular only: the raw features, ``N`` rows, numeric (float) and
            categorical (object: str or NaN) columns, missing values kept; scaled,
            one-hot encoded and imputed later on training rows only
            (:func:`automl.data.fit_transform`). A tabular ``X`` ``(N, F)`` given
            instead becomes a numeric frame with columns ``x0..``.
        cleaning: what loading left out: counts of rows (``missing_target_rows``,
            ``duplicate_rows``) and of skipped files (``non_image_files``), and the text
            columns dropped as identifiers (``id_columns``: column -> distinct values).
        test_mask: bool ``(N,)``, True for the rows of the source's own test split
            (MNIST-1D's); None when the split is drawn (``automl.data.split_dataset``).
        task: ``classification`` or ``regression`` (:mod:`automl.task`).
        task_reason: why, when a table's target column decided it (a few words).
    """

    name: str
    X: np.ndarray | None
    y: np.ndarray
    classes: tuple[str, ...]
    kind: str
    frame: pd.DataFrame | None = None
    cleaning: dict[str, Any] = field(default_factory=dict)
    test_mask: np.ndarray | None = None
    task: str = "classification"
    task_reason: str | None = None

    def __post_init__(self) -> None:
        if self.kind == "tabular" and self.frame is None:
            if self.X is None or self.X.ndim != 2:
                raise ValueError("tabular data needs a frame or a 2-D X")
            import pandas as pd

            cols = [f"x{i}" for i in range(self.X.shape[1])]
            object.__setattr__(self, "frame", pd.DataFrame(self.X, columns=cols))
            object.__setattr__(self, "X", None)
        if self.kind == "image" and (self.X is None or self.X.ndim != 4):
            raise ValueError("image data needs X of shape (N, C, H, W)")
        if self.kind == "signal" and (self.X is None or self.X.ndim != 3):
            raise ValueError("signal data needs X of shape (N, C, L)")
        if self.test_mask is not None and self.test_mask.shape != self.y.shape:
            raise ValueError("test_mask needs one entry per row")

    @property
    def n_rows(self) -> int:
        return int(len(self.y))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One example's shape: ``(C, H, W)``, ``(C, L)`` for signals, or ``(raw feature
        columns,)`` for tabular data (one-hot encoding widens it; models take the
        transformed width)."""
        if self.X is not None:
            return tuple(int(d) for d in self.X.shape[1:])
        return (int(self.frame.shape[1]),)

    @property
    def num_classes(self) -> int:
        """Classes (0 for regression)."""
        return len(self.classes)

    @property
    def output_size(self) -> int:
        """The model's output width: the classes, or 1 for regression."""
        from automl.task import task_of

        return task_of(self.task).output_size(self.num_classes)

    @property
    def categorical_columns(self) -> list[str]:
        if self.frame is None:
            return []
        return [str(c) for c in self.frame.columns if self.frame[c].dtype == object]

    @property
    def numeric_columns(self) -> list[str]:
        if self.frame is None:
            return []
        cat = set(self.categorical_columns)
        return [str(c) for c in self.frame.columns if str(c) not in cat]

    @property
    def checksum(self) -> str:
        """sha256 over the feature and label bytes (hex); changes when any value does."""
        h = hashlib.sha256()
        if hasattr(self.X, "checksum_bytes"):  # rows that stream: the cache's content key
            h.update(self.X.checksum_bytes())
        elif self.X is not None:
            h.update(np.ascontiguousarray(self.X).tobytes())
        else:
            import pandas as pd

            h.update(",".join(map(str, self.frame.columns)).encode())
            h.update(pd.util.hash_pandas_object(self.frame, index=False).to_numpy().tobytes())
        h.update(np.ascontiguousarray(self.y).tobytes())
        return h.hexdigest()

    def subset(self, idx: np.ndarray, **cleaning: int) -> Dataset:
        """The rows ``idx`` (in that order), with ``cleaning`` counts added."""
        frame = None if self.frame is None else self.frame.iloc[idx].reset_index(drop=True)
        X = None if self.X is None else self.X[idx]
        mask = None if self.test_mask is None else self.test_mask[idx]
        return replace(self, X=X, y=self.y[idx], frame=frame, test_mask=mask,
                       cleaning={**self.cleaning, **cleaning})

    def describe(self) -> dict:
        """Task, shapes, classes and per-class counts (regression: the target's range,
        mean and standard deviation), feature columns and cleaning (JSON-serialisable)."""
        out = {
            "name": self.name,
            "kind": self.kind,
            "task": self.task,
            "rows": self.n_rows,
            "input_shape": list(self.input_shape),
            "classes": list(self.classes),
        }
        if self.task_reason:
            out["task_reason"] = self.task_reason
        if self.task == "regression":
            y = self.y.astype(np.float64)
            out["class_counts"] = {}
            out["target"] = {"min": float(y.min()), "max": float(y.max()),
                             "mean": float(y.mean()), "std": float(y.std())}
        else:
            counts = np.bincount(self.y, minlength=self.num_classes)
            out["class_counts"] = {c: int(n) for c, n in zip(self.classes, counts, strict=True)}
        if self.frame is not None:
            out["features"] = {"numeric": self.numeric_columns,
                               "categorical": self.categorical_columns,
                               "missing_values": int(self.frame.isna().to_numpy().sum())}
        out["cleaning"] = {"missing_target_rows": 0, "duplicate_rows": 0, **self.cleaning}
        out["sha256"] = self.checksum
        return out


def drop_duplicates(data: Dataset) -> Dataset:
    """Remove exact duplicate rows (same features and same label), keeping the first.

    Run before splitting, so no copy of a row can sit on both sides of the
    train/test boundary. The number removed is ``cleaning["duplicate_rows"]``.
    """
    if data.frame is not None:
        dup = data.frame.assign(__target__=data.y).duplicated(keep="first").to_numpy()
    else:
        flat = np.ascontiguousarray(data.X.reshape(len(data.y), -1))
        rows = np.concatenate([flat, data.y[:, None].astype(flat.dtype)], axis=1)
        _, first = np.unique(rows, axis=0, return_index=True)
        dup = np.ones(len(data.y), dtype=bool)
        dup[first] = False
    keep = np.flatnonzero(~dup)
    return data.subset(keep, duplicate_rows=int(dup.sum())
                       + int(data.cleaning.get("duplicate_rows", 0)))
