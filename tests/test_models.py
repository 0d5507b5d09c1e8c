"""Tests for the model zoo (automl.models): shapes, validation, init schemes, training."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from automl.models import (
    FAMILIES,
    INITS,
    MODEL_CLASSES,
    build_model,
    count_parameters,
    family_params,
    init_weights,
    model_size_key,
)

DIGITS = (1, 8, 8)
SIGNAL = (1, 40)  # MNIST-1D: one channel, 40 time steps
IMAGE_FAMILIES = ("resnet", "vgg", "vit")
SIGNAL_FAMILIES = ("resnet1d", "tcn", "transformer1d")
#: each family's natural input: images for the image families and the MLP, signals else
INPUT = {f: SIGNAL if f in SIGNAL_FAMILIES else DIGITS for f in FAMILIES}


def _weights(model: nn.Module) -> list[torch.Tensor]:
    return [m.weight for m in model.modules()
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear))]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_builds_on_its_input(family: str) -> None:
    model = build_model({"family": family}, INPUT[family], 10)
    out = model(torch.randn(5, *INPUT[family]))
    assert out.shape == (5, 10)
    assert torch.isfinite(out).all()


def test_mlp_on_tabular() -> None:
    model = build_model({"family": "mlp", "depth": 1, "width": 16, "dropout": 0.1}, (30,), 3)
    assert model(torch.randn(4, 30)).shape == (4, 3)


@pytest.mark.parametrize("family", IMAGE_FAMILIES)
def test_image_family_rejects_tabular(family: str) -> None:
    with pytest.raises(ValueError, match=rf"family '{family}' needs image input .*\(30,\)"):
        build_model({"family": family}, (30,), 10)


@pytest.mark.parametrize(
    ("arch", "match"),
    [
        ({"family": "resnet", "dept": 2}, r"'dept'.*valid: family, depth, width, stages"),
        ({"family": "vit", "patch": 2}, r"'patch'.*patch_size"),
        ({"family": "nope"}, r"'nope'.*resnet, vgg, mlp, vit"),
        ({"depth": 2}, r"'family'"),
        ({"family": "resnet", "depth": 5}, r"depth must be in 1\.\.4"),
        ({"family": "vgg", "width": 2.5}, r"width must be an integer"),
        ({"family": "mlp", "dropout": 1.0}, r"dropout"),
        ({"family": "vit", "patch_size": 3}, r"patch_size 3 must divide"),
        ({"family": "vit", "heads": 5}, r"heads 5 must divide dim 64"),
    ],
)
def test_bad_arch_raises_value_error(arch: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_model(arch, DIGITS, 10)
    with pytest.raises(ValueError, match=match):
        model_size_key(arch, DIGITS, 10)


def test_unknown_init_scheme_lists_valid_ones() -> None:
    with pytest.raises(ValueError, match="kaiming, xavier, orthogonal, default"):
        build_model({"family": "mlp"}, (4,), 2, init="he")
    with pytest.raises(ValueError, match="unknown init scheme 'he'"):
        init_weights(nn.Linear(2, 2), "he")


def test_orthogonal_init_gives_orthonormal_rows() -> None:
    model = build_model({"family": "mlp", "depth": 2, "width": 32}, (32,), 2, init="orthogonal")
    square = model.net[4]  # hidden Linear(32, 32)
    assert square.weight.shape == (32, 32)
    w = square.weight.detach()
    assert torch.allclose(w @ w.T, torch.eye(32), atol=1e-5)
    assert all((m.bias == 0).all() for m in model.modules() if isinstance(m, nn.Linear))


@pytest.mark.parametrize("family", FAMILIES)
def test_xavier_init_within_glorot_bound(family: str) -> None:
    torch.manual_seed(0)
    default = build_model({"family": family}, INPUT[family], 10)
    torch.manual_seed(0)
    model = build_model({"family": family}, INPUT[family], 10, init="xavier")
    for w, w0 in zip(_weights(model), _weights(default), strict=True):
        fan_in, fan_out = w.shape[1] * w[0, 0].numel(), w.shape[0] * w[0, 0].numel()
        assert w.abs().max() <= math.sqrt(6.0 / (fan_in + fan_out)) + 1e-6
        assert not torch.equal(w, w0)
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm)):
            assert (m.weight == 1).all() and (m.bias == 0).all()
        elif isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)) and m.bias is not None:
            assert (m.bias == 0).all()


def test_kaiming_init_std_uses_fan_out() -> None:
    model = build_model({"family": "resnet", "width": 32, "stages": 1}, DIGITS, 10, init="kaiming")
    conv = model.layers[0].conv2  # Conv2d(32, 32, 3): fan_out = 32 * 9
    expected = math.sqrt(2.0 / (32 * 9))
    assert conv.weight.std().item() == pytest.approx(expected, rel=0.05)
    stem = model.stem[0]  # Conv2d(1, 32, 3): fan_out = 288 differs from fan_in = 9
    assert stem.weight.std().item() == pytest.approx(expected, rel=0.2)


@pytest.mark.parametrize("family", FAMILIES)
def test_default_init_matches_same_seed_plain_build(family: str) -> None:
    torch.manual_seed(1)
    model = build_model({"family": family}, INPUT[family], 10, init="default")
    torch.manual_seed(1)
    plain = MODEL_CLASSES[family](INPUT[family], 10)
    for (name, p), (name0, p0) in zip(
        model.state_dict().items(), plain.state_dict().items(), strict=True
    ):
        assert name == name0 and torch.equal(p, p0)


def test_vit_layers_do_not_start_identical() -> None:
    model = build_model({"family": "vit", "depth": 2}, DIGITS, 10)
    a, b = model.encoder.layers
    assert not torch.equal(a.linear1.weight, b.linear1.weight)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("key", ["width", "depth"])
def test_bigger_means_more_parameters(family: str, key: str) -> None:
    key = "dim" if family in ("vit", "transformer1d") and key == "width" else key
    base, shape = family_params(family)[key], INPUT[family]
    small = model_size_key({"family": family, key: base}, shape, 10)
    big = model_size_key({"family": family, key: base * 2}, shape, 10)
    assert big > small
    assert big == count_parameters(build_model({"family": family, key: base * 2}, shape, 10))


def test_resnet_overfits_a_fixed_batch() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(32, *DIGITS), torch.randint(0, 10, (32,))
    model = build_model({"family": "resnet", "width": 8}, DIGITS, 10, init="kaiming")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.25 * losses[0]


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("family", FAMILIES)
def test_deepcopy_trace_and_checkpoint_rebuild(family: str) -> None:
    ckpt = {"arch": {"family": family, "depth": 1}, "input_shape": INPUT[family],
            "num_classes": 10}
    model = build_model(**ckpt, init="xavier").eval()
    x = torch.randn(3, *INPUT[family])
    expected = model(x)
    assert torch.allclose(copy.deepcopy(model)(x), expected)
    traced = torch.jit.trace(model, x)
    assert torch.allclose(traced(torch.cat([x, x])), torch.cat([expected, expected]), atol=1e-5)
    with torch.no_grad():
        traced_no_grad = torch.jit.trace(model, x)
    assert torch.allclose(traced_no_grad(x), expected, atol=1e-5)
    assert "_native_multi_head_attention" not in str(traced_no_grad.graph)
    assert torch.backends.mha.get_fastpath_enabled()
    rebuilt = build_model(**ckpt).eval()
    rebuilt.load_state_dict(model.state_dict())
    assert torch.allclose(rebuilt(x), expected)


@pytest.mark.parametrize("shape", [(3, 1, 1), (2, 3, 5), (1, 2, 2)])
def test_conv_families_adapt_to_tiny_inputs(shape: tuple[int, int, int]) -> None:
    for arch in ({"family": "resnet", "stages": 4}, {"family": "vgg", "depth": 4}):
        model = build_model(arch, shape, 4)
        assert model(torch.randn(2, *shape)).shape == (2, 4)


def test_inits_constant_is_complete() -> None:
    assert INITS == ("kaiming", "xavier", "orthogonal", "default")
    assert FAMILIES == ("resnet", "vgg", "mlp", "vit", "resnet1d", "tcn", "transformer1d")
    assert set(MODEL_CLASSES) == set(FAMILIES)
