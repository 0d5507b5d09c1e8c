"""Per-model cost metrics (automl/models/cost.py): counts checked by hand, the latency
measurement's conditions (eval mode, threads) restored, and compression using the same
helpers."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch import nn

from automl.models import build_model
from automl.models.cost import count_macs_params, latency_ms, model_bytes, model_costs


def test_counts_of_a_linear_layer_by_hand():
    costs = model_costs(nn.Linear(64, 10), torch.rand(3, 64), repeats=3, warmup=1)
    assert costs["params"] == 64 * 10 + 10
    assert costs["macs"] == 64 * 10 + 10  # torch-pruning counts the bias adds too
    assert costs["model_bytes"] == 4 * 650  # fp32
    assert costs["latency_ms"] > 0 and math.isfinite(costs["latency_ms"])


def test_model_bytes_counts_buffers_and_tied_weights_once():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Flatten(),
                        nn.Linear(256, 10))
    params = 4 * 9 + 4 + 4 + 4 + 256 * 10 + 10
    # BatchNorm: running mean and var (fp32) and num_batches_tracked (int64)
    assert model_bytes(net) == 4 * params + 4 * 8 + 8
    tied = nn.Sequential(nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False))
    tied[1].weight = tied[0].weight
    assert model_bytes(tied) == 4 * 64
    assert model_bytes(net.half()) == 2 * params + 2 * 8 + 8


def test_eval_mode_and_threads_are_used_and_restored():
    seen = {}

    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            seen.setdefault("shape", tuple(x.shape))
            seen["training"] = self.training
            seen["threads"] = torch.get_num_threads()
            seen["grad"] = torch.is_grad_enabled()
            return self.fc(x)

    model = Probe().train()
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    model_costs(model, torch.rand(5, 4), threads=want, repeats=2, warmup=1)
    assert seen == {"shape": (1, 4), "training": False, "threads": want, "grad": False}
    assert model.training and torch.get_num_threads() == before
    model_costs(model.eval(), torch.rand(5, 4), repeats=1, warmup=0)
    assert not model.training and seen["threads"] == before


def test_a_digits_resnet_is_measured_well_under_a_second():
    model = build_model({"family": "resnet", "depth": 2, "width": 16}, (1, 8, 8), 10)
    x = torch.rand(4, 1, 8, 8)
    t0 = time.perf_counter()
    costs = model_costs(model, x, threads=1)
    assert time.perf_counter() - t0 < 1.0
    assert costs["params"] == sum(p.numel() for p in model.parameters())
    assert (costs["macs"], costs["params"]) == count_macs_params(model, x)
    assert costs["macs"] > costs["params"]  # convolutions reuse their weights


@pytest.mark.parametrize("kwargs, message", [
    ({"threads": 0}, "threads must be"), ({"repeats": 0}, "repeats must be"),
    ({"warmup": -1}, "warmup must be"),
])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        model_costs(nn.Linear(2, 2), torch.rand(1, 2), **kwargs)
    with pytest.raises(ValueError, match="B >= 1"):
        model_costs(nn.Linear(2, 2), torch.rand(0, 2))


def test_compression_measures_with_the_same_helpers():
    from automl.compress import _base

    assert _base.latency_ms is latency_ms and _base.count_macs_params is count_macs_params
