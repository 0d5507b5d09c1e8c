"""Data: loading (bundled sets, CSV/Parquet, npz, image folders), cleaning, the fixed
train/validation/test split, preprocessing fitted on training rows only, and
training-batch image augmentation.

Public API: :class:`Dataset`, :func:`load_dataset`, :func:`drop_duplicates`,
:class:`Splits`, :func:`split_indices`, :func:`fit_transform`,
:func:`fit_preprocessor`, :func:`make_augment` (imports torch when called).
"""

from automl.data._augment import make_augment
from automl.data._dataset import Dataset, drop_duplicates, load_dataset
from automl.data._preprocess import fit_preprocessor, fit_transform, make_preprocessor
from automl.data._split import Splits, split_indices

__all__ = [
    "Dataset",
    "Splits",
    "drop_duplicates",
    "fit_preprocessor",
    "fit_transform",
    "load_dataset",
    "make_augment",
    "make_preprocessor",
    "split_indices",
]
