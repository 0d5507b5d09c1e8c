"""A tiny real sweep on MNIST-1D: every signal family, searched signal augmentation, the
paper's test split, CV, the refit with its standardisation, and the compression chain on
a 1D model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import write_spec
from rich.console import Console

from automl.pipeline import choose_run_dir, run_main_job
from automl.spec import load_spec

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

FAMILIES = {"resnet1d", "tcn", "transformer1d", "mlp"}
# random sampler, seed 17: the 6 trials draw all four families (asserted below)
TINY = """
name: tiny1d
data:
  source: mnist1d
  val_size: 0.2
  augment:
    shift: {type: int, low: 0, high: 3}
    noise: {type: float, low: 0.0, high: 0.1}
model:
  family: {type: categorical, choices: [resnet1d, tcn, transformer1d, mlp]}
  resnet1d: {depth: 1, width: 4}
  tcn: {depth: 2, width: 8, kernel: 3, dilation: {type: categorical, choices: [1, 2]}}
  transformer1d: {patch_size: 8, dim: 16, depth: 1, heads: 2}
  mlp: {depth: 1, width: 32}
training:
  optimizer: adam
  lr: {type: float, low: 1e-2, high: 3e-2, log: true}
  batch_size: 128
  epochs: {type: int, low: 1, high: 2}
search: {num_samples: 6, seed: 17, sampler: random}
scheduler: {grace_period: 1, reduction_factor: 2, max_epochs: 2}
selection: {top_k: 2, cv_folds: 2}
resources: {cpus_per_worker: 1}
tracking: {backend: none, tensorboard: false}
compression:
  latency_repeats: 3
  max_slowdown: null  # int8 of these tiny nets is slower at batch 1
  stages:
    - {stage: distill, student: {family: resnet1d, depth: 1, width: 2}, epochs: 1,
       max_accuracy_drop: 1.0}
    - {stage: prune, pruning_ratio: 0.5, max_accuracy_drop: 1.0}
    - {stage: quantize, method: static, calibration_batches: 2, max_accuracy_drop: 1.0}
"""


@pytest.fixture(scope="module")
def sweep(ray_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep1d")
    exp = load_spec(write_spec(tmp, TINY))
    run_dir = choose_run_dir(exp, str(tmp / "runs"), None)
    summary = run_main_job(exp, run_dir, console=Console(quiet=True))
    return exp, run_dir, summary


def test_signals_keep_their_shape_and_the_papers_test_split(sweep):
    exp, run_dir, summary = sweep
    data = json.loads((run_dir / "data.json").read_text())
    assert data["kind"] == "signal" and data["input_shape"] == [1, 40]
    assert data["model_input_shape"] == [1, 40]
    assert data["split"] == {"train": 3000, "val": 1000, "test": 1000}
    assert summary["test"]["rows"] == 1000 and summary["test"]["train_rows"] == 4000
    assert 0.15 < summary["test"]["accuracy"] <= 1.0  # chance: 0.1 (std 0.01 on 1,000 rows)


def test_every_family_trains_with_searched_augmentation(sweep):
    exp, run_dir, summary = sweep
    trials = json.loads((run_dir / "trials.json").read_text())
    assert len(trials) == 6 and summary["trials"]["failed"] == 0
    assert {t["config"]["arch"]["family"] for t in trials} == FAMILIES
    for t in trials:
        aug = t["config"]["augment"]
        assert set(aug) == {"shift", "scale", "noise"} and aug["scale"] == 0.0
        assert 0 <= aug["shift"] <= 3 and 0.0 <= aug["noise"] <= 0.1
        assert {"data.augment.shift", "data.augment.noise"} <= set(t["params"])
        assert t["history"] and all(0.0 <= h["val_accuracy"] <= 1.0 for h in t["history"])


def test_winner_reloads_with_its_standardisation_and_reproduces_the_test_score(sweep):
    exp, run_dir, summary = sweep
    from automl.data import load_dataset, load_preprocessor, split_dataset
    from automl.train import evaluate, load_checkpoint, to_tensors

    model, ckpt = load_checkpoint(run_dir / "best" / "model.pt")
    assert tuple(ckpt["input_shape"]) == (1, 40)
    pre = load_preprocessor(run_dir / "best" / "preprocessor.skops")  # fitted on 4,000 rows
    data = load_dataset(exp.data)
    test = split_dataset(data, exp.data).test
    X = pre.transform(data.X[test])
    assert abs(float(X.mean())) < 0.05 and X.dtype == np.float32
    acc = evaluate(model, *to_tensors(X, data.y[test]))["accuracy"]
    assert acc == pytest.approx(summary["test"]["accuracy"])
    cv = summary["cv"]
    assert len(cv["candidates"]) == 2 and cv["plan"]["n_folds"] == 2


def test_compression_chain_runs_on_the_1d_winner(sweep):
    exp, run_dir, summary = sweep
    from automl.compress import load_model

    comp = summary["compression"]
    assert comp["status"] == "completed"
    stages = {s["stage"]: s for s in comp["stages"]}
    assert [s["status"] for s in comp["stages"]] == ["accepted", "accepted", "rejected"], \
        comp["stages"]
    # static int8 of the pruned 2-channel student: its quantization parameters outweigh the
    # int8 weights, so its file is larger than its parent's, and it is rejected (issue 45)
    assert comp["stages"][2]["reason"].startswith("its file is larger than its parent 02_prune's")
    distill, prune = stages["distill"]["info"], stages["prune"]["info"]
    assert distill["student_params"] < distill["teacher_params"]
    assert prune["params_after"] < prune["params_before"] and prune["macs_ratio"] < 0.7
    assert stages["quantize"]["info"]["int8_modules"] > 0  # Conv1d (+BN+ReLU) in int8
    chain = json.loads((run_dir / "compression" / "chain.json").read_text())
    assert chain["table"][0]["test_accuracy"] == pytest.approx(summary["test"]["accuracy"])
    x = torch.zeros(3, 1, 40)
    for s in comp["stages"][:2]:  # the accepted ones (a rejected model leaves no file)
        assert s["export"]["outputs_match"]  # TorchScript reproduces the model
        name = f"{s['index']:02d}_{s['stage']}"
        assert load_model(run_dir / "compression", name)(x).shape == (3, 10)
