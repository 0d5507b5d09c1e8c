"""The fixed, stratified train/validation/test split and preprocessing fitted on
training rows only (scikit-learn)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from automl.data._dataset import Dataset


@dataclass(frozen=True, eq=False)
class Splits:
    """Row indices into a :class:`Dataset`; disjoint, together all rows."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def sizes(self) -> dict[str, int]:
        return {"train": len(self.train), "val": len(self.val), "test": len(self.test)}


def split_indices(y: np.ndarray, test_size: float, val_size: float, seed: int) -> Splits:
    """Stratified split of ``range(len(y))`` into train, validation and test.

    ``test_size`` and ``val_size`` are fractions of all rows. The same ``y`` and
    ``seed`` always give the same split, so the test rows stay held out across runs.
    """
    idx = np.arange(len(y))
    rest, test = train_test_split(idx, test_size=test_size, stratify=y, random_state=seed)
    val_frac = val_size / (1.0 - test_size)
    train, val = train_test_split(rest, test_size=val_frac, stratify=y[rest], random_state=seed)
    return Splits(np.sort(train), np.sort(val), np.sort(test))


def fit_transform(
    data: Dataset, fit_idx: np.ndarray, *apply_idx: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fit preprocessing on ``fit_idx`` rows only and apply it to each index set.

    Images are already scaled to [0, 1] at load and pass through. Tabular
    features are standardised with a ``StandardScaler`` fitted on ``fit_idx``:
    validation and test rows never influence the statistics.

    Returns:
        ``[(X, y) for fit_idx, then for each of apply_idx]``; X float32, y int64.
    """
    sets = (fit_idx, *apply_idx)
    if data.kind == "image":
        return [(data.X[i], data.y[i]) for i in sets]
    scaler = StandardScaler().fit(data.X[fit_idx])
    return [(scaler.transform(data.X[i]).astype(np.float32), data.y[i]) for i in sets]
