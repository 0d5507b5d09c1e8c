"""Feature preprocessing fitted on training rows only (scikit-learn ``ColumnTransformer``).

Tabular data: numeric columns are imputed (``SimpleImputer``) then standardised
(``StandardScaler``); categorical columns are imputed then one-hot encoded
(``OneHotEncoder(handle_unknown="ignore")``: a category first seen in validation
or test rows encodes as all zeros). Images are scaled to [0, 1] at load and pass
through. The transformer is fitted on the indices it is given and nothing else, so
a fold's validation rows and the test split never shape the statistics.
"""

from __future__ import annotations

import numpy as np
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from automl.data._dataset import Dataset


def make_preprocessor(data: Dataset, impute=None) -> ColumnTransformer:
    """An unfitted ``ColumnTransformer`` for ``data.frame``'s columns.

    Args:
        impute: ``.numeric`` and ``.categorical`` ``SimpleImputer`` strategies
            (a ``automl.spec.ImputeSpec``); default median / most frequent.
    """
    numeric = getattr(impute, "numeric", "median")
    categorical = getattr(impute, "categorical", "most_frequent")
    num = Pipeline([("impute", SimpleImputer(strategy=numeric)), ("scale", StandardScaler())])
    cat = Pipeline([
        ("impute", SimpleImputer(strategy=categorical, fill_value="missing")),
        ("onehot", OneHotEncoder(handle_unknown="ignore", sparse_output=False)),
    ])
    return ColumnTransformer(
        [("num", num, data.numeric_columns), ("cat", cat, data.categorical_columns)],
        remainder="drop", sparse_threshold=0.0,
    )


def fit_preprocessor(data: Dataset, fit_idx: np.ndarray, impute=None) -> ColumnTransformer | None:
    """The preprocessor fitted on rows ``fit_idx`` only; None for images (nothing to fit)."""
    if data.kind == "image":
        return None
    return make_preprocessor(data, impute).fit(data.frame.iloc[fit_idx])


def fit_transform(
    data: Dataset, fit_idx: np.ndarray, *apply_idx: np.ndarray, impute=None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fit preprocessing on ``fit_idx`` rows only and apply it to each index set.

    Returns:
        ``[(X, y) for fit_idx, then for each of apply_idx]``; X float32 ``(n, C, H, W)``
        or ``(n, F')`` where ``F'`` counts numeric columns plus one per category seen
        in ``fit_idx``; y int64 ``(n,)``.
    """
    sets = (fit_idx, *apply_idx)
    pre = fit_preprocessor(data, fit_idx, impute)
    if pre is None:
        return [(data.X[i], data.y[i]) for i in sets]
    return [(pre.transform(data.frame.iloc[i]).astype(np.float32), data.y[i]) for i in sets]
