"""Per-channel standardisation of 1D signals, as a scikit-learn transformer (its own
module: importing it imports scikit-learn, which image data never need)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted


class ChannelStandardizer(TransformerMixin, BaseEstimator):
    """Per-channel standardisation of 1D signals ``(N, C, L)`` (a scikit-learn transformer).

    ``fit`` stores ``mean_`` and ``scale_`` (float64 ``(C,)``: mean and standard deviation
    of each channel over all rows and time steps given; a constant channel gets scale 1);
    ``transform`` returns float32 ``(N, C, L)`` ``(X - mean_) / scale_``.

    Raises:
        ValueError: ``X`` is not 3-D, or has another channel count than at ``fit``.
    """

    def fit(self, X, y=None):
        X = self._check(X)
        self.mean_ = X.mean(axis=(0, 2))
        scale = X.std(axis=(0, 2))
        self.scale_ = np.where(scale > 0, scale, 1.0)
        self.n_channels_ = X.shape[1]
        return self

    def transform(self, X):
        check_is_fitted(self, "mean_")
        X = self._check(X)
        if X.shape[1] != self.n_channels_:
            raise ValueError(f"X has {X.shape[1]} channels; fitted on {self.n_channels_}")
        return ((X - self.mean_[:, None]) / self.scale_[:, None]).astype(np.float32)

    @staticmethod
    def _check(X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 3:
            raise ValueError(f"signals must be (N, C, L); got shape {X.shape}")
        return X
