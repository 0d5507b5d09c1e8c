"""Int8 quantization for CPU inference (Jacob et al. 2018, "Quantization and Training of
Neural Networks for Efficient Integer-Arithmetic-Only Inference", CVPR;
arXiv:1712.05877), with PyTorch's ``torch.ao.quantization``:

- ``dynamic``: ``quantize_dynamic`` on the ``nn.Linear`` layers (``dynamic_targets``):
  int8 weights (per tensor), activations quantized on the fly per batch. Skipped when
  there is none.
- ``static``: post-training quantization in FX graph mode (``prepare_fx`` with the
  backend's default qconfig mapping, conv+bn+relu fused; observers calibrated on
  ``calibration_batches`` train batches; ``convert_fx``). Int8 weights *and*
  activations. Skipped when there is no Conv/Linear or the model is not FX-traceable.

Backends: ``x86`` (default) or ``fbgemm``; ``torch.backends.quantized.engine`` is set to
it. ``torch.ao.quantization`` is deprecated in favour of torchao; it still ships in torch
2.13 and is what runs here (see the package docstring for the plan).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from automl.compress._base import Context, StageOutput, check_number, predict, quiet

METHODS = ("dynamic", "static")
BACKENDS = ("x86", "fbgemm")


def is_quantized(model: nn.Module) -> bool:
    """True when any submodule comes from ``torch.ao.nn.quantized`` (already int8)."""
    return any(type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules())


def dynamic_targets(model: nn.Module) -> list[str]:
    """Names of the ``nn.Linear`` layers dynamic quantization converts: all, except those
    inside ``nn.TransformerEncoderLayer``/``DecoderLayer``, whose fast-path check reads
    ``linear.weight`` as a tensor and breaks on packed int8 weights."""
    skip = {id(sub) for m in model.modules()
            if isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer))
            for sub in m.modules()}
    return [n for n, m in model.named_modules() if type(m) is nn.Linear and id(m) not in skip]


def quantizable(model: nn.Module, method: str) -> str | None:
    """``None`` if ``method`` has something to quantize in ``model``, else the reason."""
    if is_quantized(model):
        return "model is already quantized"
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    if method == "dynamic" and not dynamic_targets(model):
        return "no nn.Linear layer to quantize dynamically (outside transformer layers)"
    convs = [m for m in model.modules() if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d))]
    if method == "static" and not (convs or linears):
        return "no Conv/Linear layer to quantize statically"
    return None


def quantize_model(model: nn.Module, method: str, calibration: Sequence[Tensor],
                   backend: str = "x86") -> nn.Module:
    """Int8 copy of a float ``model`` (eval mode); ``calibration`` batches feed the static
    observers (ignored for dynamic). Raises ``torch.fx`` errors if static tracing fails."""
    from torch.ao.quantization import (
        default_dynamic_qconfig,
        get_default_qconfig_mapping,
        quantize_dynamic,
    )
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    model = copy.deepcopy(model).eval()
    torch.backends.quantized.engine = backend
    with quiet():
        if method == "dynamic":
            spec = {name: default_dynamic_qconfig for name in dynamic_targets(model)}
            return quantize_dynamic(model, spec, dtype=torch.qint8)
        prepared = prepare_fx(model, get_default_qconfig_mapping(backend), (calibration[0],))
        with torch.no_grad():
            for batch in calibration:
                prepared(batch)
        return convert_fx(prepared).eval()


class QuantizeStage:
    """Quantize stage. Params: ``method`` in ``METHODS``; ``calibration_batches`` >= 1
    (static only; batches of ``ctx.batch_size`` train rows, in order); ``backend`` in
    ``BACKENDS``. Raises ``ValueError`` naming a bad key."""

    name = "quantize"

    def __init__(self, method: str = "dynamic", calibration_batches: int = 8,
                 backend: str = "x86"):
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}; got {method!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}; got {backend!r}")
        self.method, self.backend = method, backend
        self.calibration_batches = check_number("calibration_batches", calibration_batches,
                                                1, 10_000, integer=True)

    def run(self, model: nn.Module, ctx: Context) -> StageOutput:
        float_model = copy.deepcopy(model).eval()
        reason = quantizable(float_model, self.method)
        if reason:
            return StageOutput(skipped=reason)
        bs = ctx.batch_size
        calib = [ctx.X_train[i * bs:(i + 1) * bs] for i in range(self.calibration_batches)]
        calib = [b for b in calib if len(b)]
        try:
            qmodel = quantize_model(float_model, self.method, calib, self.backend)
        except Exception as err:  # FX symbolic tracing fails on data-dependent control flow
            if self.method == "static":
                return StageOutput(skipped=f"not FX-traceable for static PTQ: "
                                           f"{type(err).__name__}: {str(err)[:200]}")
            raise
        n_int8 = sum(type(m).__module__.startswith("torch.ao.nn.quantized")
                     for m in qmodel.modules())
        if n_int8 == 0:
            return StageOutput(skipped="no layer was converted to int8")
        try:  # some modules (e.g. fused fast paths) cannot run with int8 weights
            predict(qmodel, ctx.X_test[:2])
        except Exception as err:
            return StageOutput(skipped=f"int8 model does not run: {type(err).__name__}: "
                                       f"{str(err)[:200]}")
        info = {"method": self.method, "backend": self.backend, "int8_modules": n_int8,
                "calibration_rows": sum(len(b) for b in calib) if self.method == "static" else 0}
        return StageOutput(model=qmodel, info=info, count_model=float_model,
                           recipe={"quantized": self.method, "quant_backend": self.backend})
