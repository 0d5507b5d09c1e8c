"""Data: loading (bundled sets, MNIST-1D, CSV/Parquet, npz, image folders), cleaning, the
fixed train/validation/test split, preprocessing fitted on training rows only, and
training-batch augmentation of images and 1D signals.

Public API: :class:`Dataset`, :func:`load_dataset`, :func:`data_path`, :func:`drop_duplicates`,
:class:`Splits`, :func:`split_indices`, :func:`split_dataset`, :func:`fit_transform`,
:func:`fit_apply`, :class:`ChannelStandardizer`,
:func:`fit_preprocessor`, :func:`apply_preprocessor`, :func:`save_preprocessor`,
:func:`load_preprocessor`,
:func:`make_augment` (imports torch when called).
"""

from automl.data._augment import make_augment
from automl.data._dataset import Dataset, drop_duplicates
from automl.data._files import data_path
from automl.data._load import load_dataset
from automl.data._preprocess import (
    PREPROCESSOR_FILE,
    ChannelStandardizer,
    apply_preprocessor,
    fit_apply,
    fit_preprocessor,
    fit_transform,
    load_preprocessor,
    make_preprocessor,
    save_preprocessor,
)
from automl.data._split import Splits, split_dataset, split_indices

__all__ = [
    "PREPROCESSOR_FILE",
    "ChannelStandardizer",
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
    "split_dataset",
    "split_indices",
]
