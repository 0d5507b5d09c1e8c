"""1D signals without Ray: MNIST-1D loading and its split, npz signals, per-channel
standardisation fitted on training rows only, the signal model families, signal
augmentation of training batches only, and spec validation. (The compression chain on a
1D model runs in ``test_mnist1d_e2e.py``.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import write_spec
from torch import nn

from automl.data import (
    ChannelStandardizer,
    fit_preprocessor,
    fit_transform,
    load_dataset,
    load_preprocessor,
    make_augment,
    save_preprocessor,
    split_dataset,
)
from automl.errors import DataError, SpecError
from automl.models import build_model
from automl.spec import DataSpec, load_spec

SIGNAL = (1, 40)


@pytest.fixture(scope="module")
def mnist1d():
    return load_dataset(DataSpec(source="mnist1d"))


# --------------------------------------------------------------------------- data
#: sha256 of the 1,000 test signals (float32) that mnist1d 0.0.2.post1 generates with the
#: paper's arguments and seed (``make_dataset(get_dataset_args())["x_test"]``)
TEST_SHA256 = "30addc43827c82aafa5db8bc97cea63349ca687e87db2f201cc4f5415d9a4ebd"


def test_mnist1d_is_the_papers_data_and_split(mnist1d):
    import hashlib

    data = mnist1d
    assert data.kind == "signal" and data.X.shape == (5000, 1, 40) and data.X.dtype == np.float32
    assert data.classes == tuple("0123456789") and data.input_shape == SIGNAL
    assert data.cleaning["duplicate_rows"] == 0
    assert data.test_mask.sum() == 1000 and data.test_mask[4000:].all()  # the package's order
    assert hashlib.sha256(data.X[data.test_mask].tobytes()).hexdigest() == TEST_SHA256
    assert data.y[:6].tolist() == [2, 6, 4, 5, 6, 6] and np.bincount(data.y).min() == 500
    splits = split_dataset(data, DataSpec(source="mnist1d", val_size=0.2, seed=3))
    assert splits.sizes() == {"train": 3000, "val": 1000, "test": 1000}
    assert np.array_equal(splits.test, np.flatnonzero(data.test_mask))  # the paper's test rows
    assert not data.test_mask[splits.pool].any()  # validation is carved from training rows
    assert np.bincount(data.y[splits.val]).min() >= 90  # stratified: ~100 per digit


def test_shuffled_variant_permutes_time_steps_once(mnist1d):
    shuffled = load_dataset(DataSpec(source="mnist1d_shuffled"))
    assert np.array_equal(shuffled.y, mnist1d.y)
    # one permutation of the 40 positions, the same for every signal
    first = [int(np.flatnonzero(np.isclose(mnist1d.X[0, 0], v))[0]) for v in shuffled.X[0, 0]]
    assert sorted(first) == list(range(40)) and first != list(range(40))
    assert np.allclose(shuffled.X, mnist1d.X[:, :, first])


def test_standardisation_is_fitted_on_training_rows_only(mnist1d, tmp_path):
    splits = split_dataset(mnist1d, DataSpec(source="mnist1d"))
    X = mnist1d.X.copy()
    X[splits.test] += 100.0  # test rows far away must not move the statistics
    from dataclasses import replace

    data = replace(mnist1d, X=X)
    pre = fit_preprocessor(data, splits.train)
    assert isinstance(pre, ChannelStandardizer) and pre.mean_.shape == (1,)
    assert pre.mean_[0] == pytest.approx(X[splits.train].mean(), abs=1e-5)
    (X_tr, _), (X_te, _) = fit_transform(data, splits.train, splits.test)
    assert X_tr.dtype == np.float32 and X_tr.shape == (3000, 1, 40)
    assert abs(X_tr.mean()) < 1e-4 and X_tr.std() == pytest.approx(1.0, abs=1e-4)
    assert X_te.mean() > 50  # the test rows were scaled with the training statistics
    back = load_preprocessor(save_preprocessor(pre, tmp_path / "pre.skops"))
    assert np.array_equal(back.transform(X[:5]), pre.transform(X[:5]))
    two = ChannelStandardizer().fit(np.stack([np.zeros((4, 6)), np.ones((4, 6)) * 3], axis=1))
    assert two.mean_.tolist() == [0.0, 3.0] and two.scale_.tolist() == [1.0, 1.0]  # constant
    with pytest.raises(ValueError, match="has 1 channels; fitted on 2"):
        two.transform(np.zeros((2, 1, 6)))


def test_npz_signals_need_data_kind(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "one.npz", X=rng.normal(size=(30, 16)) * 5, y=np.arange(30) % 3)
    np.savez(tmp_path / "multi.npz", X=rng.normal(size=(30, 2, 16)), y=np.arange(30) % 3)
    one = load_dataset(DataSpec(source="npz", path=str(tmp_path / "one.npz"), kind="signal"))
    assert one.kind == "signal" and one.X.shape == (30, 1, 16) and one.test_mask is None
    multi = load_dataset(DataSpec(source="npz", path=str(tmp_path / "multi.npz"), kind="signal"))
    assert multi.input_shape == (2, 16)
    assert split_dataset(multi, DataSpec(source="npz", path="x", kind="signal",
                                         test_size=0.2, val_size=0.2)).sizes()["test"] == 6
    # without data.kind a 2-D X stays tabular and a 3-D one is read as images
    assert load_dataset(DataSpec(source="npz", path=str(tmp_path / "one.npz"))).kind == "tabular"
    with pytest.raises(DataError, match=r"multi\.npz: image values must be .*data\.kind: signal"):
        load_dataset(DataSpec(source="npz", path=str(tmp_path / "multi.npz")))
    np.savez(tmp_path / "four.npz", X=np.zeros((6, 1, 2, 3)), y=np.arange(6) % 2)
    with pytest.raises(DataError, match=r"four\.npz: X must be \(N, L\) or \(N, C, L\)"):
        load_dataset(DataSpec(source="npz", path=str(tmp_path / "four.npz"), kind="signal"))
    bad = rng.normal(size=(6, 8))
    bad[2, 3] = np.nan
    np.savez(tmp_path / "nan.npz", X=bad, y=np.arange(6) % 2)
    with pytest.raises(DataError, match=r"nan\.npz: X holds 1 values that are not finite"):
        load_dataset(DataSpec(source="npz", path=str(tmp_path / "nan.npz"), kind="signal"))


# --------------------------------------------------------------------------- models
def test_tcn_is_causal_with_the_papers_receptive_field():
    torch.manual_seed(0)
    model = build_model({"family": "tcn", "depth": 3, "width": 8, "kernel": 3, "dilation": 2},
                        (2, 40), 5).eval()
    assert model.receptive_field == 1 + 2 * 2 * (1 + 2 + 4)  # 29 time steps
    x = torch.randn(3, 2, 40)
    y = x.clone()
    y[:, :, 30] += 5.0
    with torch.no_grad():
        hx, hy = model.blocks(x), model.blocks(y)  # (3, 8, 40)
        assert torch.allclose(hx[:, :, :30], hy[:, :, :30], atol=1e-6)  # no step sees ahead
        changed = (hx - hy).abs().amax(dim=(0, 1)) > 1e-6
        assert changed[30] and changed[39] and not changed[:30].any()
        far = x.clone()
        far[:, :, 0] += 5.0  # step 0 is outside step 29's receptive field (steps 1..29)
        assert torch.allclose(model.blocks(far)[:, :, 29:], hx[:, :, 29:], atol=1e-6)
        assert not torch.allclose(model(x), model(y))
    convs = [m for m in model.modules() if isinstance(m, nn.Conv1d) and m.kernel_size == (3,)]
    assert [c.dilation[0] for c in convs] == [1, 1, 2, 2, 4, 4]


def test_resnet1d_is_the_papers_net_and_transformer1d_pads_patches():
    paper = build_model({"family": "resnet1d", "depth": 3, "width": 64}, SIGNAL, 10)
    convs = [m for m in paper.modules() if isinstance(m, nn.Conv1d) and m.kernel_size != (1,)]
    assert [c.kernel_size[0] for c in convs] == [8, 5, 3] * 3
    assert [c.out_channels for c in convs[::3]] == [64, 128, 128]
    assert paper(torch.randn(2, *SIGNAL)).shape == (2, 10)
    tr = build_model({"family": "transformer1d", "patch_size": 3, "dim": 16, "heads": 2}, SIGNAL, 4)
    assert tr.pos_embed.shape == (1, 14 + 1, 16)  # ceil(40 / 3) patches + the class token
    assert tr(torch.randn(2, *SIGNAL)).shape == (2, 4)
    with pytest.raises(ValueError, match="patch_size 41 is longer than the signal"):
        build_model({"family": "transformer1d", "patch_size": 41}, SIGNAL, 4)
    with pytest.raises(ValueError, match=r"'tcn' needs 1D signal input of shape \(C, L\)"):
        build_model({"family": "tcn"}, (1, 8, 8), 4)


def test_kaiming_init_reaches_conv1d_layers():
    model = build_model({"family": "tcn", "depth": 2, "width": 64, "kernel": 5}, SIGNAL, 10,
                        init="kaiming")
    conv = model.blocks[1].conv1.conv  # Conv1d(64, 64, 5): fan_out = 64 * 5
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2.0 / (64 * 5)), rel=0.05)


# --------------------------------------------------------------------------- augmentation
def test_signal_augmentation_shifts_scales_and_adds_noise():
    x = torch.arange(10, dtype=torch.float32).view(1, 1, 10).repeat(64, 2, 1)  # (64, 2, 10)
    torch.manual_seed(0)
    shifted = make_augment({"shift": 3}, (2, 10))(x)
    starts = shifted[:, 0, 0]  # a roll by k starts at (10 - k) % 10
    assert set((10 - starts).remainder(10).long().tolist()) <= {0, 1, 2, 3, 7, 8, 9}
    assert len(set(starts.tolist())) > 3
    assert torch.equal(shifted[:, 0], shifted[:, 1])  # channels move together
    assert torch.equal(torch.sort(shifted, dim=2).values, x)  # a circular roll loses nothing
    ratio = make_augment({"scale": 0.2}, (2, 10))(x + 1) / (x + 1)
    assert ratio.min() >= 0.8 and ratio.max() <= 1.2 and ratio.std() > 0.01
    noisy = make_augment({"noise": 0.5}, (2, 10))(torch.zeros(64, 2, 10))
    assert noisy.std().item() == pytest.approx(0.5, rel=0.1)
    assert make_augment({"shift": 0, "scale": 0.0, "noise": 0.0}, (2, 10)) is None
    with pytest.raises(ValueError, match="mixes image and signal keys"):
        make_augment({"shift": 2, "hflip": 0.5}, (2, 10))
    with pytest.raises(ValueError, match=r"signal augmentation needs 1D signals \(C, L\)"):
        make_augment({"noise": 0.1}, (1, 8, 8))


def test_signal_augmentation_reaches_training_batches_only(monkeypatch):
    from automl.data._signal_augment import SignalAugment
    from automl.space import TrialConfig
    from automl.train import TrainState, evaluate, fit

    seen = []
    original = SignalAugment.forward

    def spy(self, x):
        seen.append(tuple(x.shape))
        return original(self, x)

    monkeypatch.setattr(SignalAugment, "forward", spy)
    cfg = TrialConfig(arch={"family": "tcn", "depth": 1, "width": 4}, optimizer="adam", lr=1e-2,
                      batch_size=8, epochs=2, weight_decay=0.0, init="default",
                      augment={"shift": 2.0, "scale": 0.1, "noise": 0.05})
    train = (torch.randn(24, *SIGNAL), torch.arange(24) % 3)
    val = (torch.randn(10, *SIGNAL), torch.arange(10) % 3)
    fit(TrainState.create(cfg, SIGNAL, 3, 24), train, val)
    assert seen == [(8, *SIGNAL)] * 6  # 3 batches per epoch, 2 epochs; never validation
    evaluate(build_model(cfg.arch, SIGNAL, 3), *val)
    assert len(seen) == 6


# --------------------------------------------------------------------------- spec
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("data: {source: mnist1d}\nmodel: {family: resnet}\n",
         r"model\.family: 'resnet' needs image data but data\.source 'mnist1d' is 1D signal "
         r"data; use family: resnet1d, tcn, transformer1d or mlp"),
        ("data: {source: digits}\nmodel: {family: {type: categorical, choices: [vgg, tcn]}}\n",
         r"model\.family: 'tcn' needs 1D signal data but data\.source 'digits' is image data"),
        ("data: {source: iris}\nmodel: {family: transformer1d}\n",
         r"model\.family: 'transformer1d' needs 1D signal data .* is tabular data; use "
         r"family: mlp"),
        ("data: {source: mnist1d, augment: {rotation: 10}}\nmodel: {family: tcn}\n",
         r"data\.augment\.rotation: image augmentation needs image data .*; use shift, scale "
         r"or noise instead"),
        ("data: {source: digits, augment: {noise: {type: float, low: 0, high: 0.1}}}\n",
         r"data\.augment\.noise: 1D signal augmentation needs 1D signal data but data\.source "
         r"'digits' is image data; use rotation, hflip or crop_scale instead"),
        ("data: {source: mnist1d, augment: {shift: 2, hflip: 0.5}}\nmodel: {family: tcn}\n",
         r"data\.augment: mixes image \(hflip\) and 1D signal \(shift\) augmentation"),
        ("data: {source: mnist1d, augment: {shift: 1.5}}\nmodel: {family: tcn}\n",
         r"data\.augment\.shift: shift must be an integer"),
        ("data: {source: mnist1d, augment: {scale: 1.0}}\nmodel: {family: tcn}\n",
         r"data\.augment\.scale: must satisfy 0 <= scale < 1"),
        ("data: {source: mnist1d, test_size: 0.3}\nmodel: {family: tcn}\n",
         r"data\.test_size: source 'mnist1d' keeps the paper's own test split"),
        ("data: {source: mnist1d, path: x.npz}\nmodel: {family: tcn}\n",
         r"data\.path: source 'mnist1d' is generated by the mnist1d package"),
        ("data: {source: digits, kind: signal}\n",
         r"data\.kind: source 'digits' is image data, not signal"),
        ("data: {source: npz, path: x.npz, kind: signal}\nmodel: {family: vit}\n",
         r"model\.family: 'vit' needs image data but data\.source 'npz' \(data\.kind: "
         r"signal\) is 1D signal data"),
        ("data: {source: mnist1d}\nmodel: {family: tcn, tcn: {kernel: 2.5}}\n",
         r"model\.tcn\.kernel: tcn\.kernel must be an integer"),
        ("data: {source: mnist1d}\nmodel: {family: tcn}\ncompression: {stages: [{stage: "
         "distill, student: {family: vgg}}]}\n",
         r"compression\.stages\.0\.student\.family: 'vgg' needs image data"),
        ("data: {source: mnist1d}\nmodel: {family: tcn}\ncompression: {stages: [{stage: "
         "distill, student: {family: tcn, patch_size: 2}}]}\n",
         r"'patch_size' is not a tcn parameter \(valid: family, depth, width, kernel, dilation"),
    ],
)
def test_spec_refuses_choices_that_do_not_fit_signals(tmp_path, text, message):
    with pytest.raises(SpecError, match=message):
        load_spec(write_spec(tmp_path, text))


def test_npz_kind_is_checked_once_the_file_is_read(tmp_path):
    from automl.prepare import check_kind

    np.savez(tmp_path / "s.npz", X=np.zeros((12, 2, 8)) + np.arange(8), y=np.arange(12) % 2)
    exp = load_spec(write_spec(tmp_path, f"data: {{source: npz, path: {tmp_path / 's.npz'}}}\n"
                                         "model: {family: tcn}\n"))
    assert exp.data.data_kind is None  # the file decides
    data = load_dataset(DataSpec(source="npz", path=str(tmp_path / "s.npz"), kind="signal"))
    check_kind(exp, data)  # tcn on signals: fine
    images = load_dataset(DataSpec(source="digits"))
    with pytest.raises(DataError, match=r"digits: holds image data but model\.family 'tcn' "
                                        r"needs 1D signal data \(use family: resnet"):
        check_kind(exp, images)


def test_signal_augmentation_is_searched_and_reaches_the_trial_config(tmp_path):
    import optuna

    from automl.space import TrialConfig, define_by_run, describe

    exp = load_spec(write_spec(tmp_path, """
data:
  source: mnist1d
  augment: {shift: {type: int, low: 0, high: 4}, noise: {type: float, low: 0, high: 0.2}}
model:
  family: tcn
  tcn: {dilation: {type: categorical, choices: [1, 2]}}
"""))
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    fixed = define_by_run(exp)(trial)
    flat = {**trial.params, **fixed}
    assert {"data.augment.shift", "data.augment.noise", "model.tcn.dilation"} <= set(trial.params)
    assert not any(k in flat for k in ("data.augment.rotation", "data.augment.hflip"))
    cfg = TrialConfig.from_flat(flat, exp)
    assert set(cfg.augment) == {"shift", "scale", "noise"} and cfg.augment["scale"] == 0.0
    assert cfg.arch["family"] == "tcn" and cfg.arch["dilation"] in (1, 2)
    names = [p["name"] for p in describe(exp)["parameters"]]
    assert "data.augment.shift" in names and "data.augment.crop_scale" not in names
