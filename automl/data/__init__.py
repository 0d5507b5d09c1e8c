"""Data: loading a dataset, the fixed train/validation/test split, and preprocessing
fitted on training rows only.

Public API: :class:`Dataset`, :func:`load_dataset`, :class:`Splits`,
:func:`split_indices`, :func:`fit_transform`.
"""

from automl.data._dataset import Dataset, load_dataset
from automl.data._split import Splits, fit_transform, split_indices

__all__ = ["Dataset", "Splits", "fit_transform", "load_dataset", "split_indices"]
