"""Synthetic labelled images as a Parquet table of encoded PNGs (the layout Hugging Face
and Ray Data write: one ``image`` column of bytes, one ``label`` column), for the
streaming benchmark and its tests: no download.

Each class has its own mean colour and a bright square at its own place, under uniform
noise, so a small network learns them but not at once.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np


def write_images(path: str | Path, n: int, size: int = 32, classes: int = 10, seed: int = 0,
                 shards: int = 4, row_group: int = 2048, noise: int = 96,
                 spread: int = 80) -> Path:
    """Write ``n`` RGB ``size x size`` PNG images in ``shards`` Parquet files under folder
    ``path`` (``image``: bytes, ``label``: int64 in ``[0, classes)``); returns the folder.
    ``noise``: the uniform noise's range; ``spread``: how far the class colours lie from
    mid-grey (smaller is harder).
    The same arguments write the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    colours = rng.integers(128 - spread, 128 + spread, size=(classes, 3))
    side = max(2, size // 4)
    spots = rng.integers(0, size - side, size=(classes, 2))
    per = -(-n // shards)
    for s in range(shards):
        rows = range(s * per, min(n, (s + 1) * per))
        labels = rng.integers(0, classes, size=len(rows))
        blobs = []
        for c in labels:
            img = rng.integers(-noise // 2, noise // 2, size=(size, size, 3)) + colours[c]
            r, q = spots[c]
            img[r:r + side, q:q + side] += 60
            buf = io.BytesIO()
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, format="PNG",
                                                                         compress_level=1)
            blobs.append(buf.getvalue())
        table = pa.table({"image": pa.array(blobs, pa.binary()),
                          "label": pa.array(labels, pa.int64())})
        pq.write_table(table, root / f"part-{s:04d}.parquet", row_group_size=row_group)
    return root
