"""Data: loading (bundled sets, CSV/Parquet, npz, image folders), cleaning, the fixed
train/validation/test split, preprocessing fitted on training rows only, and
training-batch image augmentation.

Public API: :class:`Dataset`, :func:`load_dataset`, :func:`data_path`, :func:`drop_duplicates`,
:class:`Splits`, :func:`split_indices`, :func:`fit_transform`, :func:`fit_apply`,
:func:`fit_preprocessor`, :func:`apply_preprocessor`, :func:`save_preprocessor`,
:func:`load_preprocessor`,
:func:`make_augment` (imports torch when called).
"""

from automl.data._augment import make_augment
from automl.data._dataset import Dataset, drop_duplicates, load_dataset
from automl.data._files import data_path
from automl.data._preprocess import (
    PREPROCESSOR_FILE,
    apply_preprocessor,
    fit_apply,
    fit_preprocessor,
    fit_transform,
    load_preprocessor,
    make_preprocessor,
    save_preprocessor,
)
from automl.data._split import Splits, split_indices

__all__ = [
    "PREPROCESSOR_FILE",
    "Dataset",
    "Splits",
    "apply_preprocessor",
    "data_path",
    "drop_duplicates",
    "fit_apply",
    "fit_preprocessor",
    "fit_transform",
    "load_dataset",
    "load_preprocessor",
    "make_augment",
    "make_preprocessor",
    "save_preprocessor",
    "split_indices",
]
