"""Feature preprocessing fitted on training rows only.

Tabular data (scikit-learn ``ColumnTransformer``): numeric columns are imputed
(``SimpleImputer``) then standardised (``StandardScaler``); categorical columns are imputed
then one-hot encoded (``OneHotEncoder(handle_unknown="ignore")``: a category first seen in
validation or test rows encodes as all zeros). 1D signals (:class:`ChannelStandardizer`):
each channel is standardised with the mean and standard deviation of its values over the
training rows and every time step. Images are scaled to [0, 1] at load and pass through.
The preprocessor is fitted on the indices it is given and nothing else, so a fold's
validation rows and the test split never shape the statistics.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from automl.data._dataset import Dataset
from automl.errors import DataError

if TYPE_CHECKING:  # scikit-learn is imported where tabular or signal data are fitted
    from sklearn.compose import ColumnTransformer

    from automl.data._channel import ChannelStandardizer

#: the fitted tabular preprocessor beside ``best/model.pt`` (skops format, no pickle)
PREPROCESSOR_FILE = "preprocessor.skops"
#: module prefixes of the only types :func:`load_preprocessor` lets skops rebuild
TRUSTED_PREFIXES = ("sklearn.", "numpy.")
#: and our own preprocessors, by their full name (files written before it moved to
#: ``_channel`` name it here; :func:`__getattr__` still resolves that name)
TRUSTED_TYPES = ("automl.data._channel.ChannelStandardizer",
                 "automl.data._preprocess.ChannelStandardizer")


def __getattr__(name: str) -> Any:
    """``ChannelStandardizer`` under its old module path, for skops files that name it."""
    if name == "ChannelStandardizer":
        from automl.data._channel import ChannelStandardizer

        return ChannelStandardizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_preprocessor(data: Dataset, impute=None) -> ColumnTransformer:
    """An unfitted ``ColumnTransformer`` for ``data.frame``'s columns.

    Args:
        impute: ``.numeric`` and ``.categorical`` ``SimpleImputer`` strategies
            (a ``automl.spec.ImputeSpec``); default median / most frequent.
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

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


def fit_preprocessor(data: Dataset, fit_idx: np.ndarray,
                     impute=None) -> ColumnTransformer | ChannelStandardizer | None:
    """The preprocessor fitted on rows ``fit_idx`` only: a ``ColumnTransformer`` for tabular
    data, a :class:`ChannelStandardizer` for 1D signals, None for images (nothing to fit)."""
    if data.kind == "image":
        return None
    if data.kind == "signal":
        from automl.data._channel import ChannelStandardizer

        return ChannelStandardizer().fit(data.X[fit_idx])
    return make_preprocessor(data, impute).fit(data.frame.iloc[fit_idx])


def fit_transform(
    data: Dataset, fit_idx: np.ndarray, *apply_idx: np.ndarray, impute=None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fit preprocessing on ``fit_idx`` rows only and apply it to each index set.

    Returns:
        ``[(X, y) for fit_idx, then for each of apply_idx]``; X float32 ``(n, C, H, W)``,
        ``(n, C, L)`` or ``(n, F')`` where ``F'`` counts numeric columns plus one per
        category seen in ``fit_idx``; y int64 ``(n,)``.
    """
    return fit_apply(data, fit_idx, *apply_idx, impute=impute)[1]


def fit_apply(
    data: Dataset, fit_idx: np.ndarray, *apply_idx: np.ndarray, impute=None
) -> tuple[ColumnTransformer | None, list[tuple[np.ndarray, np.ndarray]]]:
    """:func:`fit_transform` that also returns the preprocessor it fitted (None for image
    data), for callers that keep it (the refit of the winner saves it)."""
    pre = fit_preprocessor(data, fit_idx, impute)
    return pre, [apply_preprocessor(pre, data, i) for i in (fit_idx, *apply_idx)]


def apply_preprocessor(pre: ColumnTransformer | None, data: Dataset,
                       idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of rows ``idx`` through a fitted preprocessor (``pre`` None: image data,
    taken as they are); shapes as :func:`fit_transform` gives them."""
    if pre is None:
        return data.X[idx], data.y[idx]
    if data.kind == "signal":
        return pre.transform(data.X[idx]), data.y[idx]
    return pre.transform(data.frame.iloc[idx]).astype(np.float32), data.y[idx]


def save_preprocessor(pre: ColumnTransformer, path: str | Path) -> Path:
    """Write a fitted preprocessor to ``path`` with ``skops.io`` (a zip of plain data, not a
    pickle), atomically. :func:`load_preprocessor` reads it back."""
    import skops.io as sio

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    sio.dump(pre, tmp)
    os.replace(tmp, path)
    return path


def load_preprocessor(path: str | Path) -> ColumnTransformer | ChannelStandardizer:
    """The fitted preprocessor that :func:`save_preprocessor` wrote.

    Only scikit-learn and numpy types and :class:`ChannelStandardizer` are rebuilt
    (``skops.io.load`` with those trusted). Tabular: ``pre.transform(frame)`` maps raw rows
    (a ``pandas.DataFrame`` with the training columns) to the model's ``(n, F')`` float
    inputs; signals: ``pre.transform(X)`` maps raw ``(n, C, L)`` signals to the model's.

    Raises:
        DataError: the file is missing, not a skops file, or holds another type (named).
    """
    import skops.io as sio

    path = Path(path)
    if not path.is_file():
        raise DataError("no such file", where=str(path),
                        fix="image data needs no preprocessor; tabular and signal runs write "
                            f"best/{PREPROCESSOR_FILE}")
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as e:  # zipfile.BadZipFile, json errors: not a skops file
        raise DataError(f"not a skops file ({type(e).__name__})", where=str(path)) from None
    refused = [t for t in untrusted
               if not t.startswith(TRUSTED_PREFIXES) and t not in TRUSTED_TYPES]
    if refused:
        raise DataError(f"holds type {refused[0]}, which is not scikit-learn or numpy; "
                        "refusing to load it", where=str(path),
                        fix="load only preprocessors written by automl")
    return sio.load(path, trusted=untrusted)
