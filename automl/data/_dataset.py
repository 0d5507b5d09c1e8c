"""The :class:`Dataset` record, the scikit-learn bundled sets, cleaning (exact
duplicates) and :func:`load_dataset`, which dispatches on ``data.source``."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from automl.errors import DataError

BUNDLED = ("digits", "breast_cancer", "wine", "iris")


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled dataset held in memory.

    Attributes:
        name: where it came from (``digits``, a file path, ...).
        X: images only: float32 ``(N, C, H, W)`` scaled to [0, 1]; None for tabular data.
        y: int64 ``(N,)`` class indices in ``[0, num_classes)``.
        classes: class names, indexed by ``y``.
        kind: ``"image"`` or ``"tabular"``.
        frame: tabular only: the raw features, ``N`` rows, numeric (float) and
            categorical (object: str or NaN) columns, missing values kept; scaled,
            one-hot encoded and imputed later on training rows only
            (:func:`automl.data.fit_transform`). A tabular ``X`` ``(N, F)`` given
            instead becomes a numeric frame with columns ``x0..``.
        cleaning: rows dropped while loading: ``missing_target_rows``, ``duplicate_rows``.
    """

    name: str
    X: np.ndarray | None
    y: np.ndarray
    classes: tuple[str, ...]
    kind: str
    frame: pd.DataFrame | None = None
    cleaning: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind == "tabular" and self.frame is None:
            if self.X is None or self.X.ndim != 2:
                raise ValueError("tabular data needs a frame or a 2-D X")
            cols = [f"x{i}" for i in range(self.X.shape[1])]
            object.__setattr__(self, "frame", pd.DataFrame(self.X, columns=cols))
            object.__setattr__(self, "X", None)
        if self.kind == "image" and (self.X is None or self.X.ndim != 4):
            raise ValueError("image data needs X of shape (N, C, H, W)")

    @property
    def n_rows(self) -> int:
        return int(len(self.y))

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One example's shape: ``(C, H, W)``, or ``(raw feature columns,)`` for tabular
        data (one-hot encoding widens it; models take the transformed width)."""
        if self.kind == "image":
            return tuple(int(d) for d in self.X.shape[1:])
        return (int(self.frame.shape[1]),)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

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
        if self.X is not None:
            h.update(np.ascontiguousarray(self.X).tobytes())
        else:
            h.update(",".join(map(str, self.frame.columns)).encode())
            h.update(pd.util.hash_pandas_object(self.frame, index=False).to_numpy().tobytes())
        h.update(np.ascontiguousarray(self.y).tobytes())
        return h.hexdigest()

    def subset(self, idx: np.ndarray, **cleaning: int) -> Dataset:
        """The rows ``idx`` (in that order), with ``cleaning`` counts added."""
        frame = None if self.frame is None else self.frame.iloc[idx].reset_index(drop=True)
        X = None if self.X is None else self.X[idx]
        return replace(self, X=X, y=self.y[idx], frame=frame,
                       cleaning={**self.cleaning, **cleaning})

    def describe(self) -> dict:
        """Shapes, classes, per-class counts, feature columns and cleaning (JSON-serialisable)."""
        counts = np.bincount(self.y, minlength=self.num_classes)
        out = {
            "name": self.name,
            "kind": self.kind,
            "rows": self.n_rows,
            "input_shape": list(self.input_shape),
            "classes": list(self.classes),
            "class_counts": {c: int(n) for c, n in zip(self.classes, counts, strict=True)},
        }
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
    return data.subset(keep, duplicate_rows=int(dup.sum()))


def _bundled(name: str) -> Dataset:
    from sklearn import datasets

    loader = getattr(datasets, f"load_{name}")
    bunch = loader()
    y = bunch.target.astype(np.int64)
    classes = tuple(str(c) for c in getattr(bunch, "target_names", np.unique(y)))
    if name == "digits":
        # 8x8 grayscale, pixel values 0..16 -> (N, 1, 8, 8) in [0, 1]
        X = (bunch.images.astype(np.float32) / 16.0)[:, None, :, :]
        return Dataset("digits", X, y, classes, "image")
    frame = pd.DataFrame(bunch.data.astype(np.float64), columns=list(bunch.feature_names))
    return Dataset(name, None, y, classes, "tabular", frame=frame)


def load_dataset(spec) -> Dataset:
    """Load, clean and describe the dataset a ``DataSpec`` names.

    Sources: scikit-learn's bundled ``digits`` (1,797 images (1, 8, 8), 10 classes),
    ``breast_cancer`` (569 x 30, 2 classes), ``wine`` (178 x 13, 3 classes),
    ``iris`` (150 x 4, 3 classes), no download; or a ``csv``, ``parquet``, ``npz``
    file or an ``image_folder`` at ``spec.path`` (see :mod:`automl.data._files`).
    Rows with a missing target are dropped and counted; with ``spec.dedupe``
    exact duplicate rows are too.

    Raises:
        DataError: unknown source, or a file that is missing or malformed (the
            message names the file and the problem).
    """
    if spec.source in BUNDLED:
        data = _bundled(spec.source)
    elif spec.source in ("csv", "parquet", "npz", "image_folder"):
        from automl.data._files import load_file

        data = load_file(spec)
    else:
        raise DataError(f"unknown data source {spec.source!r}", where="data.source")
    if getattr(spec, "dedupe", True):
        data = drop_duplicates(data)
    return data
