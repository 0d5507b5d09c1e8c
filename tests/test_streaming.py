"""Streaming images through Ray Data (``data.streaming``, issue 42): the scan keeps the
in-memory path's rows and split, the Parquet cache holds the same pixels and is reused,
streams give every row once per epoch in a seeded order, and a tiny search runs on it with
the path said in ``summary.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from automl.data import (
    CachedImages,
    build_cache,
    is_stream,
    load_dataset,
    scan_images,
    split_dataset,
    streamed_dataset,
    wants_streaming,
)
from automl.errors import SpecError
from automl.spec import DataSpec, load_spec
from benchmarks._images import write_images
from tests.conftest import REPO


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """240 RGB 8x8 PNGs in 2 shards, plus a copy with one duplicate and one unlabelled row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = write_images(tmp_path_factory.mktemp("img") / "shards", 240, size=8, classes=4,
                        shards=2, row_group=50, noise=16)
    table = pq.read_table(root / "part-0000.parquet")
    dirty = tmp_path_factory.mktemp("dirty") / "one.parquet"
    labels = table.column("label").to_pylist()
    labels[7] = None
    extra = pa.table({"image": [table.column("image")[3].as_py()], "label": [labels[3]]})
    pq.write_table(pa.concat_tables([pa.table({"image": table.column("image"),
                                               "label": pa.array(labels, pa.int64())}),
                                     extra]), dirty, row_group_size=40)
    return root, dirty


def _spec(path, **kw) -> DataSpec:
    return DataSpec(source="parquet", kind="image", path=str(path), target="label", **kw)


def test_the_scan_keeps_the_in_memory_rows_and_split(images):
    _, dirty = images
    scan = scan_images(_spec(dirty))
    memory = load_dataset(_spec(dirty, streaming=False))
    assert scan.cleaning["missing_target_rows"] == 1 and scan.cleaning["duplicate_rows"] == 1
    assert memory.describe()["cleaning"]["duplicate_rows"] == 1
    assert len(scan.kept) == memory.n_rows == 119 and 7 not in scan.kept and 120 not in scan.kept
    assert np.array_equal(scan.y, memory.y) and scan.classes == memory.classes
    assert scan.shape == (3, 8, 8) and memory.input_shape == (3, 8, 8)
    streamed = streamed_dataset(scan, "/nowhere")
    assert is_stream(streamed.X) and streamed.input_shape == (3, 8, 8)
    a, b = split_dataset(streamed, _spec(dirty)), split_dataset(memory, _spec(dirty))
    for part in ("train", "val", "test"):
        assert np.array_equal(getattr(a, part), getattr(b, part))
    # the key is a content hash: the same bytes give it, another preprocessing does not
    assert scan_images(_spec(dirty)).key == scan.key
    assert scan_images(_spec(dirty, image_size=4)).key != scan.key
    assert isinstance(streamed.X[a.train], CachedImages) and len(streamed.X[a.train]) == \
        len(a.train)


def test_auto_streams_only_what_would_not_fit(images):
    root, _ = images
    decoded = 240 * 3 * 8 * 8 * 4
    assert wants_streaming(_spec(root), store_bytes=decoded)  # more than a quarter
    assert not wants_streaming(_spec(root), store_bytes=decoded * 8)
    assert wants_streaming(_spec(root, streaming=True), store_bytes=1e12)
    assert not wants_streaming(_spec(root, streaming=False), store_bytes=1)
    assert not wants_streaming(DataSpec(source="digits"), store_bytes=1)


def test_streaming_a_source_held_in_memory_is_one_line(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("data: {source: digits, streaming: true}\n")
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    line = str(e.value)
    assert "\n" not in line and "data.streaming" in line and "image_folder" in line


@pytest.mark.timeout(600)
def test_the_cache_holds_the_same_pixels_and_streams_every_row(images, tmp_path, ray_cluster):
    root, _ = images
    from automl.data._stream import decode_all

    scan = scan_images(_spec(root))
    info = build_cache(scan, str(tmp_path / "cache"), seed=0)
    assert not info.reused and info.rows == 240 and info.files >= 1 and info.bytes > 0
    again = build_cache(scan, str(tmp_path / "cache"), seed=0)
    assert again.reused and again.path == info.path
    X = streamed_dataset(scan, str(tmp_path / "cache")).X
    pixels = decode_all(scan)  # the in-memory path's float32 images
    rows = np.array([5, 200, 17, 5, 99])  # any order, a row twice
    got = X[rows].outputs(lambda x: x.flatten(1), batch_size=2)
    assert np.array_equal(got.numpy(), pixels[rows].reshape(len(rows), -1))
    # an epoch gives each row once, with its own label; another seed another order
    import torch

    label_of = {pixels[i].tobytes(): scan.y[i] for i in range(100)}
    orders = []
    for seed in (1, 2):
        got = list(X[np.arange(100)].batches(16, seed=seed))
        y = torch.cat([yb for _, yb in got]).numpy()
        assert len(y) == 100 and sorted(y.tolist()) == sorted(scan.y[:100].tolist())
        assert all(label_of[x.numpy().tobytes()] == t for xb, yb in got
                   for x, t in zip(xb, yb.tolist(), strict=True))
        orders.append(y)
    assert not np.array_equal(*orders)
    # a pass left after one batch (its reader runs ahead): the next pass is whole, once
    next(iter(X[np.arange(100)].batches(16, seed=4)))
    y = torch.cat([yb for _, yb in X[np.arange(100)].batches(16, seed=5)]).numpy()
    assert sorted(y.tolist()) == sorted(scan.y[:100].tolist())
    # a seed gives the same order whatever the reader read before
    y = torch.cat([yb for _, yb in X[np.arange(100)].batches(16, seed=1)]).numpy()
    assert np.array_equal(y, orders[0])
    # two ranks: as many batches each, together every row
    shares = [list(X[np.arange(101)].batches(16, seed=3, rank=r, world=2)) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 7  # ceil(51 / 8)
    assert sum(len(b[1]) for s in shares for b in s) >= 101


def test_the_cache_build_shuffles_pieces_ray_keeps_out_of_the_driver(images):
    """The build's shuffle cuts each of ``k`` blocks into ``k`` pieces; a piece under
    100 KiB would be returned inline to the driver (which held 280 MB more at 40,000
    images when every source row group was a block)."""
    from dataclasses import replace

    from automl.data._stream import SHUFFLE_PIECE_BYTES, shuffle_blocks

    scan = scan_images(_spec(images[0]))
    assert shuffle_blocks(scan) == 1  # 240 small images: one block
    big = replace(scan, kept=np.arange(40_000), shape=(3, 32, 32), chunks=[{}] * 40)
    k = shuffle_blocks(big)
    assert 1 < k < 40 and 40_000 * 3 * 32 * 32 / k**2 >= SHUFFLE_PIECE_BYTES


def _automl(*args, timeout=600):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, "-m", "automl", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


SPEC = """
name: stream
data: {{source: parquet, kind: image, path: {path}, target: label, streaming: true}}
model: {{family: mlp, mlp: {{depth: 1, width: 32}}}}
training: {{optimizer: adam, lr: {{type: float, low: 1e-2, high: 3e-2, log: true}},
            batch_size: 16, epochs: 8}}
search: {{seed: 0, num_samples: 2, metric: val_accuracy}}
scheduler: {{type: none}}
selection: {{top_k: 1, cv_folds: 2}}
compression: {{enabled: false}}
resources: {{num_cpus: 2}}
output: {{dir: {out}}}
tracking: {{backend: none}}
"""


@pytest.mark.timeout(900)
def test_a_search_streams_from_its_cache(images, tmp_path):
    root, _ = images
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(path=root, out=tmp_path / "runs"))
    done = _automl("search", str(spec), "--dashboard-port", "0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "data   streaming from" in done.stdout
    summary = json.loads((tmp_path / "runs" / "stream" / "summary.json").read_text())
    data = summary["data"]
    assert data["path"] == "streaming" and data["cache_reused"] is False
    assert data["cache"].startswith(str(tmp_path / "runs" / "data_cache"))
    assert summary["trials"]["completed"] == 2
    # the trials learned from the streamed rows (4 classes: chance is 0.25); the refit's
    # test score on 48 rows of 192 trained ones varies with the drawn learning rate. 8
    # epochs of 9 batches: after 4 of 5 (the spec before), a trial was at 0.25-0.5 or at
    # 1.0 depending on the cache's row order alone (training on 144 rows is that noisy)
    best = max(json.loads(line).get("val_accuracy", 0.0) for line in
               (tmp_path / "runs" / "stream" / "trials.jsonl").read_text().splitlines())
    assert best > 0.5
    assert summary["test"]["rows"] == summary["data"]["split"]["test"]


def test_admission_keeps_a_cpu_free_for_ray_data():
    from automl.cluster import admit_bundles, keep_cpus

    nodes = [{"CPU": 3.0}]
    try:
        keep_cpus(1)
        assert admit_bundles([{"CPU": 1.0}], "auto", nodes).max_concurrent == 2
        assert admit_bundles([{"CPU": 1.0}], "auto", [{"CPU": 1.0}]).max_concurrent == 1
    finally:
        keep_cpus(0)
    assert admit_bundles([{"CPU": 1.0}], "auto", nodes).max_concurrent == 3


def test_spilled_bytes_are_read_from_the_raylets_own_lines(tmp_path):
    from automl.cluster import spilled_bytes

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "raylet.out").write_text(
        "[info] Spilled 12 MiB, 3 objects, write throughput 100 MiB/s\n"
        "[info] Spilled 40 MiB, 9 objects, write throughput 90 MiB/s\n")
    assert spilled_bytes(str(tmp_path)) == 40 * 2**20
    assert spilled_bytes(None) == 0 and spilled_bytes(str(tmp_path / "none")) == 0


def test_read_workers_are_warmed_in_the_runtime_environment_tune_gives_its_trials():
    """A trial's Ray Data reads inherit its actor's runtime environment and Ray reuses a
    worker only within one, so the warm read workers are started in Tune's (measured: the
    first batch 5.6-7.2 s with workers warmed without it, which the trials never used)."""
    from ray.tune.execution.class_cache import _ActorClassCache

    from automl.cluster._ray_private import tune_trial_runtime_env

    class Trainable:
        pass

    tunes = _ActorClassCache().get(Trainable)._default_options["runtime_env"]
    ours = tune_trial_runtime_env()
    assert ours == tunes and ours["env_vars"]["PL_DISABLE_FORK"] == "1"
