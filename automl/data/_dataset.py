"""The :class:`Dataset` record and the loaders for scikit-learn's bundled sets."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from automl.errors import DataError


@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled dataset held in memory.

    Attributes:
        name: where it came from (``digits``, a file path, ...).
        X: features. Images: float32 ``(N, C, H, W)`` scaled to [0, 1].
            Tabular: float32 ``(N, F)`` raw (scaled later, on training rows only).
        y: int64 ``(N,)`` class indices in ``[0, num_classes)``.
        classes: class names, indexed by ``y``.
        kind: ``"image"`` or ``"tabular"``.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    classes: tuple[str, ...]
    kind: str

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.X.shape[1:])

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def checksum(self) -> str:
        """sha256 over the feature and label bytes (hex); changes when any value does."""
        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.X).tobytes())
        h.update(np.ascontiguousarray(self.y).tobytes())
        return h.hexdigest()

    def describe(self) -> dict:
        """Shapes, classes and per-class counts (JSON-serialisable)."""
        counts = np.bincount(self.y, minlength=self.num_classes)
        return {
            "name": self.name,
            "kind": self.kind,
            "rows": int(len(self.y)),
            "input_shape": list(self.input_shape),
            "classes": list(self.classes),
            "class_counts": {c: int(n) for c, n in zip(self.classes, counts)},
            "sha256": self.checksum,
        }


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
    return Dataset(name, bunch.data.astype(np.float32), y, classes, "tabular")


def load_dataset(spec) -> Dataset:
    """Load the dataset a ``DataSpec`` names.

    Sources: scikit-learn's bundled ``digits`` (1,797 images (1, 8, 8), 10 classes),
    ``breast_cancer`` (569 x 30, 2 classes), ``wine`` (178 x 13, 3 classes),
    ``iris`` (150 x 4, 3 classes). No download.

    Raises:
        DataError: unknown source.
    """
    if spec.source in ("digits", "breast_cancer", "wine", "iris"):
        return _bundled(spec.source)
    raise DataError(f"unknown data source {spec.source!r}", where="data.source")
