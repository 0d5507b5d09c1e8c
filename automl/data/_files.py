"""Loaders for data files: a CSV or Parquet table with a named target column, ``.npz``
arrays, and an image folder (one subfolder per class).

Every error is a :class:`~automl.errors.DataError` whose ``where`` is the file (or
folder) and whose message says what is wrong with it. Relative paths resolve
against the current working directory.
"""

from __future__ import annotations

import difflib
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from automl.data._dataset import Dataset
from automl.errors import DataError, cut_list


def data_path(spec) -> Path:
    """``spec.path`` (a ``DataSpec``'s) as a path that exists, ``~`` expanded.

    Raises:
        DataError: nothing is there (relative paths resolve against the working directory).
    """
    path = Path(spec.path).expanduser()
    if not path.exists():
        raise DataError("no such file or folder", where=str(path),
                        fix=f"check data.path; relative paths resolve against {Path.cwd()}")
    return path


def load_file(spec, task: str | None = None) -> Dataset:
    """Read ``spec.path`` as ``spec.source`` (``csv``, ``parquet``, ``npz``, ``image_folder``)
    for ``task`` (None: a table's or npz's target type decides; an image folder's classes).

    Raises:
        DataError: the path is missing, unreadable or malformed.
    """
    path = data_path(spec)
    if spec.source == "image_folder":
        return load_image_folder(path, spec.image_size)
    if path.is_dir():
        raise DataError(f"is a folder, not a {spec.source} file", where=str(path))
    if spec.source == "npz":
        return load_npz(path, spec.target or "y", getattr(spec, "kind", None), task)
    return load_table(path, spec.target, spec.source, task)


def encode_target(values, task: str | None, where: str, name: str,
                  max_classes: int | None = 20
                  ) -> tuple[np.ndarray, tuple[str, ...], str, str | None]:
    """A target column (missing values already dropped) as ``(y, classes, task, reason)``:
    class indices and names, or float32 values and no classes for regression. With ``task``
    None the column's type decides (:func:`automl.task.infer_task`; ``reason`` says why).

    Raises:
        DataError: one class only; a regression target that holds text, values that are
            not finite, or a single value.
    """
    from automl.task import infer_task

    reason = None
    if task is None:
        task, reason = infer_task(values, max_classes)
        reason = f"target '{name}' {reason}"
    if task == "classification":
        y, classes = _encode_labels(values)
        if len(classes) < 2:
            raise DataError(f"target '{name}' has one class ({classes[0]!r}); classification "
                            "needs at least 2", where=where)
        return y, classes, task, reason
    raw = pd.Series(np.asarray(values, dtype=object) if not isinstance(values, pd.Series)
                    else values)
    num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    text = np.isnan(num) & raw.notna().to_numpy()
    if text.any():
        shown = cut_list(repr(v) for v in pd.unique(raw[text]))
        raise DataError(f"regression target '{name}' holds {int(text.sum())} values that are "
                        f"not numbers ({shown})", where=where,
                        fix="fix those values, or set task: classification for class labels")
    if not np.isfinite(num).all():
        raise DataError(f"regression target '{name}' holds {int((~np.isfinite(num)).sum())} "
                        "infinite values", where=where, fix="fix or drop those rows")
    if np.ptp(num) == 0:
        raise DataError(f"regression target '{name}' has one value ({num[0]:g}) in every row",
                        where=where, fix="a target to learn must vary")
    return num.astype(np.float32), (), task, reason


# --------------------------------------------------------------------------- tables
def _read_table(path: Path, fmt: str) -> pd.DataFrame:
    where = str(path)
    if fmt == "csv":
        try:
            return pd.read_csv(path, encoding="utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})",
                            where=where, fix="re-save the file as UTF-8") from None
        except pd.errors.EmptyDataError:
            raise DataError("the file is empty (no header, no rows)", where=where) from None
        except pd.errors.ParserError as e:
            raise DataError(f"not valid CSV: {str(e).strip().splitlines()[-1]}",
                            where=where) from None
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a bad file
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"not a readable Parquet file: {msg}", where=where) from None


def _encode_labels(labels: pd.Series | np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Sorted distinct labels -> class names, and each row's class index (int64)."""
    values = np.asarray(labels)
    if values.dtype.kind == "f" and np.all(np.mod(values, 1) == 0):
        values = values.astype(np.int64)
    if values.dtype.kind not in "biuf":
        values = values.astype(str)
    uniq, y = np.unique(values, return_inverse=True)
    return y.astype(np.int64), tuple(str(u) for u in uniq)


def _features(frame: pd.DataFrame) -> pd.DataFrame:
    """Numeric and boolean columns -> float64; everything else -> object (str or NaN)."""
    out = {}
    for col in frame.columns:
        s = frame[col]
        if pd.api.types.is_bool_dtype(s) or pd.api.types.is_numeric_dtype(s):
            out[str(col)] = s.astype("float64")
        else:
            out[str(col)] = pd.Series(
                [str(v) if pd.notna(v) else np.nan for v in s], dtype=object, index=s.index
            )
    return pd.DataFrame(out).reset_index(drop=True)


def load_table(path: Path, target: str, fmt: str = "csv", task: str | None = None) -> Dataset:
    """A CSV (UTF-8, header row) or Parquet table for ``task`` (None: the target column's
    type decides, :func:`encode_target`); ``target`` is the label column, every
    other column a feature (numeric, or categorical when not numeric). Rows whose
    target is missing are dropped and counted in ``cleaning["missing_target_rows"]``;
    text columns that look like identifiers (:func:`id_columns`) are dropped and named
    in ``cleaning["id_columns"]`` (column -> distinct values).

    Raises:
        DataError: empty, not UTF-8, not parseable, no such target column, no feature
            column (besides identifiers), no labelled row, or a single class.
    """
    where = str(path)
    df = _read_table(path, fmt)
    cols = [str(c) for c in df.columns]
    df.columns = cols
    if target not in cols:
        near = difflib.get_close_matches(target, cols, n=1)
        hint = f"; did you mean '{near[0]}'?" if near else f" (columns: {cut_list(cols)})"
        raise DataError(f"no target column '{target}'{hint}", where=where,
                        fix="set data.target to the label column")
    if len(cols) < 2:
        raise DataError(f"has no feature columns besides the target '{target}'", where=where)
    if len(df) == 0:
        raise DataError("has a header but no rows", where=where)
    missing = df[target].isna().to_numpy()
    df = df.loc[~missing]
    if len(df) == 0:
        raise DataError(f"every row's target '{target}' is missing", where=where)
    y, classes, task, reason = encode_target(df[target], task, where, target)
    frame = _features(df.drop(columns=[target]))
    cleaning: dict = {"missing_target_rows": int(missing.sum())}
    ids = id_columns(frame)
    if ids:
        if len(ids) == frame.shape[1]:
            raise DataError(f"its only feature columns ({cut_list(ids)}) hold a different text "
                            "value in (nearly) every row, like an ID, which cannot be learned "
                            "from", where=where, fix="add feature columns")
        frame = frame.drop(columns=list(ids))
        cleaning["id_columns"] = ids
    return Dataset(where, None, y, classes, "tabular", frame=frame, cleaning=cleaning,
                   task=task, task_reason=reason)


#: a text column with more distinct values than this, and than ID_FRACTION of the rows, is
#: an identifier (a customer ID, a name, free text): not a category a model can learn from
ID_MIN_DISTINCT = 50
ID_FRACTION = 0.5


def id_columns(frame: pd.DataFrame) -> dict[str, int]:
    """The text (object) columns of ``frame`` that look like identifiers, with their counts
    of distinct values: more than :data:`ID_MIN_DISTINCT` distinct values and more than
    :data:`ID_FRACTION` of the rows. One-hot encoding such a column would turn every value
    into an input of its own, seen in one training row; :func:`load_table` drops them, once,
    so that the search, the refit and ``best/preprocessor.skops`` never see them."""
    out = {}
    for col in frame.columns:
        if frame[col].dtype == object:
            n = int(frame[col].nunique(dropna=True))
            if n > ID_MIN_DISTINCT and n > ID_FRACTION * len(frame):
                out[str(col)] = n
    return out


# --------------------------------------------------------------------------- npz
def load_npz(path: Path, target: str = "y", kind: str | None = None,
             task: str | None = None) -> Dataset:
    """Arrays ``X`` and ``target`` (default ``y``) from an ``.npz`` archive (no pickles).

    ``kind`` (``data.kind``) says how ``X`` is read. ``signal``: ``(N, L)`` (one channel)
    or ``(N, C, L)`` are 1D signals, any finite numbers (standardised per channel later,
    on training rows only). Without it (or ``tabular`` / ``image``) ``X`` ``(N, F)`` is
    tabular; ``(N, H, W)`` or ``(N, C, H, W)`` are images, uint8 (scaled by 1/255) or
    floats already in [0, 1]. Optional ``classes`` names the labels when ``y`` holds class
    indices; optional ``feature_names`` names columns. Labels that are NaN are dropped and
    counted.

    Raises:
        DataError: not an npz archive, pickled objects, missing array, row counts that
            differ, a shape that does not fit ``kind``, image values outside [0, 1] or
            signal values that are not finite.
    """
    where = str(path)
    if not zipfile.is_zipfile(path):
        raise DataError("not a readable .npz archive (not a zip file)", where=where,
                        fix="write it with numpy.savez")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as e:
        if "pickle" in str(e).lower():
            raise DataError("holds pickled Python objects, which are not loaded",
                            where=where, fix="save plain numeric or string arrays") from None
        raise DataError(f"not a readable .npz archive: {e}", where=where) from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise DataError(f"not a readable .npz archive: {e}", where=where) from None
    for key in ("X", target):
        if key not in arrays:
            raise DataError(f"has no array '{key}' (arrays: {cut_list(arrays)})",
                            where=where, fix="save the features as X and the labels as "
                            f"{target} (np.savez(path, X=..., {target}=...))")
    X, labels = arrays["X"], arrays[target]
    if labels.ndim != 1 or len(labels) != len(X):
        raise DataError(f"'{target}' must be 1-D with one label per row of X "
                        f"(X has shape {X.shape}, {target} {labels.shape})", where=where)
    keep = ~pd.isna(labels) if labels.dtype.kind in "fO" else np.ones(len(labels), bool)
    X, labels = X[keep], labels[keep]
    if len(labels) == 0:
        raise DataError("has no labelled rows", where=where)
    # images and signals: whole numbers are class labels however many there are
    y, classes, task, reason = encode_target(labels, task, where, target,
                                             20 if X.ndim == 2 and kind != "signal" else None)
    if "classes" in arrays and labels.dtype.kind in "iu" and task == "classification":
        names = [str(c) for c in arrays["classes"]]
        if labels.min() < 0 or labels.max() >= len(names):
            raise DataError(f"labels run {labels.min()}..{labels.max()} but 'classes' names "
                            f"{len(names)}", where=where)
        y, classes = labels.astype(np.int64), tuple(names)
    cleaning = {"missing_target_rows": int((~keep).sum())}
    if X.dtype.kind not in "biuf":
        raise DataError(f"X must be numeric (got dtype {X.dtype})", where=where)
    if kind == "signal":
        if X.ndim not in (2, 3):
            raise DataError(f"X must be (N, L) or (N, C, L) for data.kind: signal; got shape "
                            f"{X.shape}", where=where)
        signals = (X[:, None, :] if X.ndim == 2 else X).astype(np.float32)
        if not np.isfinite(signals).all():
            raise DataError(f"X holds {int((~np.isfinite(signals)).sum())} values that are not "
                            "finite (NaN or inf)", where=where, fix="fill or drop them")
        return Dataset(where, signals, y, classes, "signal", cleaning=cleaning, task=task,
                       task_reason=reason)
    if kind == "tabular" and X.ndim != 2:
        raise DataError(f"X must be (N, F) for data.kind: tabular; got shape {X.shape}",
                        where=where)
    if kind == "image" and X.ndim not in (3, 4):
        raise DataError(f"X must be (N, H, W) or (N, C, H, W) for data.kind: image; got "
                        f"shape {X.shape}", where=where)
    if X.ndim == 2:
        names = arrays.get("feature_names")
        cols = ([str(c) for c in names] if names is not None
                else [f"x{i}" for i in range(X.shape[1])])
        frame = pd.DataFrame(X.astype(np.float64), columns=cols)
        return Dataset(where, None, y, classes, "tabular", frame=frame, cleaning=cleaning,
                       task=task, task_reason=reason)
    if X.ndim not in (3, 4):
        raise DataError(f"X must be (N, F), (N, H, W) or (N, C, H, W); got shape {X.shape}",
                        where=where, fix="for 1D signals (N, C, L) set data.kind: signal")
    images = X[:, None] if X.ndim == 3 else X
    if images.dtype == np.uint8:
        images = images.astype(np.float32) / 255.0
    images = images.astype(np.float32)
    if not np.isfinite(images).all() or images.min() < 0 or images.max() > 1:
        raise DataError(f"image values must be uint8 or floats in [0, 1] (got "
                        f"{np.nanmin(images):.3g}..{np.nanmax(images):.3g}, "
                        f"{int((~np.isfinite(images)).sum())} not finite)", where=where,
                        fix="scale images to [0, 1], or set data.kind: signal if X holds "
                            "1D signals (N, C, L)")
    return Dataset(where, images, y, classes, "image", cleaning=cleaning, task=task,
                   task_reason=reason)


# --------------------------------------------------------------------------- images
_GRAY_MODES = {"1", "L", "LA", "I", "I;16", "F"}
#: file extensions read as images (lower case); any other file in a class folder, such as
#: notes.txt or README.md, is skipped and counted (``cleaning["non_image_files"]``)
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff",
                              ".webp", ".ppm", ".pgm", ".pbm", ".pnm"})
#: unreadable images an error names before "and N more"
SHOWN_PATHS = 3


def list_image_folder(root: Path) -> tuple[list[Path], list[list[Path]], int]:
    """``root/<class>/<image>`` listed without reading an image: the class folders (sorted,
    hidden ones left out), each one's image files by extension (:data:`IMAGE_EXTENSIONS`,
    sorted), and how many other files were skipped.

    Raises:
        DataError: not a folder, fewer than 2 class folders, or a class folder without
            images (named, with how many other files it holds).
    """
    if not root.is_dir():
        raise DataError("an image_folder source must be a folder", where=str(root))
    class_dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if len(class_dirs) < 2:
        raise DataError(f"needs one subfolder per class (at least 2); found {len(class_dirs)}",
                        where=str(root))
    per_class, skipped = [], 0
    for d in class_dirs:
        files = sorted(f for f in d.iterdir() if f.is_file() and not f.name.startswith("."))
        kept = [f for f in files if f.suffix.lower() in IMAGE_EXTENSIONS]
        skipped += len(files) - len(kept)
        if not kept:
            other = f" ({len(files)} other files skipped)" if files else ""
            raise DataError(f"class folder holds no images{other}", where=str(d),
                            fix="add images (.png, .jpg, .bmp, .tif and others) or remove "
                                "the folder")
        per_class.append(kept)
    return class_dirs, per_class, skipped


def load_image_folder(root: Path, image_size: int | None = None) -> Dataset:
    """``root/<class>/<image>``: classes are the subfolder names (sorted), every
    non-hidden file in them with an image extension (:data:`IMAGE_EXTENSIONS`) an image
    PIL must read; other files are skipped and counted in ``cleaning["non_image_files"]``.
    Grayscale when every image is, else RGB; ``(N, C, H, W)`` float32 in [0, 1]. With
    ``image_size`` each image is resized to ``image_size x image_size``; without it all
    must share one size.

    Raises:
        DataError: not a folder, fewer than 2 class folders, a class folder without
            images, unreadable images (one line: the count and the first few paths), or
            sizes that differ without ``image_size``.
    """
    from PIL import Image, UnidentifiedImageError

    class_dirs, per_class, skipped = list_image_folder(root)
    images, labels, unreadable = [], [], []
    for label, kept in enumerate(per_class):
        for f in kept:
            try:
                with Image.open(f) as im:
                    im.load()
                    images.append((f, im.copy()))
            except (UnidentifiedImageError, OSError, ValueError) as e:
                unreadable.append((f, e))
            labels.append(label)
    if len(unreadable) == 1:
        f, e = unreadable[0]
        raise DataError(f"cannot read image: {e}", where=str(f), fix="remove or replace the file")
    if unreadable:
        paths = cut_list((str(f.relative_to(root)) for f, _ in unreadable), keep=SHOWN_PATHS)
        first, e = unreadable[0]
        why = str(e).replace(str(first), first.name)  # PIL names the whole path
        raise DataError(f"{len(unreadable)} of {len(labels)} images cannot be read: {paths} "
                        f"(the first: {why})", where=str(root),
                        fix="remove or replace those files")
    mode = "L" if all(im.mode in _GRAY_MODES for _, im in images) else "RGB"
    arrays, size = [], None
    for f, im in images:
        im = im.convert(mode)
        if image_size is not None:
            im = im.resize((image_size, image_size), Image.Resampling.BILINEAR)
        size = size or im.size
        if im.size != size:
            raise DataError(f"is {im.size[0]}x{im.size[1]} but the first image is "
                            f"{size[0]}x{size[1]}", where=str(f),
                            fix="set data.image_size to resize every image")
        arrays.append(np.asarray(im, dtype=np.uint8))
    X = np.stack(arrays)  # (N, H, W) or (N, H, W, 3)
    X = X[:, None] if X.ndim == 3 else X.transpose(0, 3, 1, 2)  # (N, C, H, W)
    classes = tuple(d.name for d in class_dirs)
    return Dataset(str(root), X.astype(np.float32) / 255.0, np.asarray(labels, np.int64),
                   classes, "image", cleaning={"non_image_files": skipped} if skipped else {})
