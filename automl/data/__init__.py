"""Data: loading (bundled sets, MNIST-1D, CSV/Parquet, npz, image folders), cleaning, the
fixed train/validation/test split, preprocessing fitted on training rows only, and
training-batch augmentation of images and 1D signals.

Public API: :class:`Dataset`, :func:`load_dataset`, :func:`data_path`, :func:`drop_duplicates`,
:class:`Splits`, :func:`split_indices`, :func:`split_dataset`, :func:`fit_transform`,
:func:`fit_apply`, :class:`ChannelStandardizer`,
:func:`fit_preprocessor`, :func:`apply_preprocessor`, :func:`save_preprocessor`,
:func:`load_preprocessor`,
:func:`make_augment` (imports torch when called); streaming images through Ray Data from
a Parquet cache built once: :func:`wants_streaming`, :func:`scan_images`,
:func:`streamed_dataset`, :func:`build_cache`, :func:`cache_root`, :class:`CachedImages`,
:func:`is_stream`, :func:`warm_read_workers`, :func:`start_ray_data`.

The names are imported when first used (PEP 562): a Ray worker that trains a fold of
image data unpickles a :class:`Dataset` and calls :func:`fit_apply` without importing
scikit-learn, SciPy or pandas (about 1 s of a new worker's start on a 2-core machine);
tabular and signal data import them where they are fitted.
"""

from __future__ import annotations

from automl._lazy import lazy_exports

_WHERE = {
    "PREPROCESSOR_FILE": "_preprocess",
    "CachedImages": "_stream",
    "ChannelStandardizer": "_channel",
    "Dataset": "_dataset",
    "Splits": "_split",
    "apply_preprocessor": "_preprocess",
    "build_cache": "_stream",
    "cache_root": "_stream",
    "data_path": "_files",
    "drop_duplicates": "_dataset",
    "fit_apply": "_preprocess",
    "fit_preprocessor": "_preprocess",
    "fit_transform": "_preprocess",
    "is_stream": "_stream",
    "load_dataset": "_load",
    "load_preprocessor": "_preprocess",
    "make_augment": "_augment",
    "make_preprocessor": "_preprocess",
    "save_preprocessor": "_preprocess",
    "scan_images": "_stream",
    "split_dataset": "_split",
    "split_indices": "_split",
    "start_ray_data": "_stream",
    "streamed_dataset": "_stream",
    "wants_streaming": "_stream",
    "warm_read_workers": "_stream",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
