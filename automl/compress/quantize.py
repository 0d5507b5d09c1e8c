"""Int8 quantization for CPU inference (Jacob et al. 2018, "Quantization and Training of
Neural Networks for Efficient Integer-Arithmetic-Only Inference", CVPR;
arXiv:1712.05877), with torchao, and with ``torch.ao.quantization`` only for the layers
torchao cannot quantize on the CPU.

Which engine quantizes which layer (``plan``):

- ``nn.Linear`` layers: torchao's ``quantize_`` (torchao 0.18). ``dynamic``:
  ``Int8DynamicActivationInt8WeightConfig`` (int8 weights per output row, activations
  quantized per token at run time). ``static``: ``Int8StaticActivationInt8WeightConfig``
  with int8 weights per output row and one symmetric activation scale per layer,
  ``max |input| / 127`` over the ``calibration`` batches.
- Conv layers (``static`` only): torchao 0.18's int8 ``quantize_`` configs cover
  ``nn.Linear`` alone, and its pt2e flow (``X86InductorQuantizer``) runs int8 kernels only
  after ``torch.compile`` lowering, whose module holds oneDNN tensors that cannot be
  saved (measured: the unlowered pt2e model ran 3x slower than float in eager mode).
  These layers, and only these, keep the deprecated ``torch.ao.quantization`` FX path
  (``prepare_fx``/``convert_fx`` with the backend's default qconfig, conv + BatchNorm +
  ReLU fused, observers calibrated on ``calibration``; ``nn.Linear`` excluded there).
  ``dynamic`` leaves convolutions in float, as dynamic quantization has no conv kernel.

Backends: ``x86`` (default) or ``fbgemm`` for the fallback; ``torch.backends.quantized.engine``
is set to it. A quantized model's state_dict loads back into ``quantize_model`` of the same
architecture (``export.rebuild``); torchao's int8 tensors load with ``weights_only=True``.
TorchScript cannot trace torchao's tensors, so a model with torchao layers is saved as
state_dict + recipe only.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from automl.compress._base import Context, StageOutput, check_number, predict, quiet

METHODS = ("dynamic", "static")
BACKENDS = ("x86", "fbgemm")
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
TORCHAO = "torchao"
FALLBACK = "torch.ao.quantization (fallback)"
FALLBACK_REASON = ("torchao 0.18 has no saveable int8 convolution for the CPU (its int8 "
                   "quantize_ configs cover nn.Linear only; pt2e needs torch.compile lowering)")


def import_torchao():
    """``import torchao``, without the log lines it writes on a CPU-only machine (its CUDA
    extensions fail to load; torch's pytree warns about an Enum it registers)."""
    import logging

    loggers = [logging.getLogger(n) for n in ("torchao", "torch.utils._pytree")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        import torchao
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    return torchao


def _torchao_tensor(t: object) -> bool:
    import_torchao()
    from torchao.utils import TorchAOBaseTensor

    return isinstance(t, TorchAOBaseTensor)


def _ao_quantized(m: nn.Module) -> bool:
    """A module of ``torch.ao.nn.quantized`` or ``torch.ao.nn.intrinsic.quantized`` (fused)."""
    return type(m).__module__.startswith(("torch.ao.nn.quantized",
                                          "torch.ao.nn.intrinsic.quantized"))


def is_quantized(model: nn.Module) -> bool:
    """True when a submodule is a ``torch.ao`` quantized module or a parameter is a torchao
    quantized tensor (already int8)."""
    return any(_ao_quantized(m) for m in model.modules()) \
        or any(_torchao_tensor(p) for p in model.parameters())


def int8_layers(model: nn.Module) -> int:
    """Number of layers holding int8 weights (torch.ao quantized modules + torchao layers)."""
    return sum(_ao_quantized(m) or _torchao_tensor(getattr(m, "weight", None))
               for m in model.modules())


def linear_targets(model: nn.Module) -> list[str]:
    """Names of the ``nn.Linear`` layers torchao quantizes (exact type: the attention
    output projection, ``NonDynamicallyQuantizableLinear``, is read directly by
    ``nn.MultiheadAttention`` and stays float). A layer with one input feature stays float
    too: torchao 0.18's per-row weight scale fails on a ``(out, 1)`` weight (``shape
    '[out, 1]' is invalid``), which structured pruning of a tiny model can leave."""
    return [n for n, m in model.named_modules() if type(m) is nn.Linear and m.in_features > 1]


def conv_targets(model: nn.Module) -> list[str]:
    """Names of the Conv1d/2d/3d layers (the ``torch.ao.quantization`` fallback's)."""
    return [n for n, m in model.named_modules() if isinstance(m, _CONVS)]


def plan(model: nn.Module, method: str) -> dict[str, list[str]]:
    """``{engine: [layer names]}``: which layers torchao and which the fallback quantize."""
    out = {TORCHAO: linear_targets(model)}
    if method == "static":
        out[FALLBACK] = conv_targets(model)
    return {k: v for k, v in out.items() if v}


def quantizable(model: nn.Module, method: str) -> str | None:
    """``None`` if ``method`` has something to quantize in ``model``, else the reason."""
    if is_quantized(model):
        return "model is already quantized"
    if method == "dynamic" and not linear_targets(model):
        return "no nn.Linear layer to quantize dynamically (convolutions have no dynamic kernel)"
    if method == "static" and not plan(model, method):
        return "no Conv/Linear layer to quantize statically"
    return None


def _fx_convs(model: nn.Module, calibration: Sequence[Tensor], backend: str) -> nn.Module:
    """The fallback: FX static PTQ of the conv layers (``nn.Linear`` left for torchao)."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    mapping = (get_default_qconfig_mapping(backend).set_object_type(nn.Linear, None)
               .set_object_type(nn.functional.linear, None))
    prepared = prepare_fx(model, mapping, (calibration[0],))
    with torch.no_grad():
        for batch in calibration:
            prepared(batch)
    return convert_fx(prepared).eval()


def _torchao_linears(model: nn.Module, names: list[str], method: str,
                     calibration: Sequence[Tensor]) -> None:
    """torchao ``quantize_`` of the named ``nn.Linear`` layers, in place."""
    import_torchao()
    from torchao.quantization import (
        FqnToConfig,
        Int8DynamicActivationInt8WeightConfig,
        Int8StaticActivationInt8WeightConfig,
        quantize_,
    )
    from torchao.quantization.granularity import PerRow, PerTensor

    if method == "dynamic":
        targets = set(names)
        quantize_(model, Int8DynamicActivationInt8WeightConfig(),
                  filter_fn=lambda m, fqn: fqn in targets)
        return
    amax: dict[str, tuple[float, int]] = {}

    def observe(name: str):
        def hook(_module, args):
            x = args[0].detach()
            amax[name] = (max(amax.get(name, (0.0, 0))[0], float(x.abs().max())), x.ndim)
        return hook

    hooks = [model.get_submodule(n).register_forward_pre_hook(observe(n)) for n in names]
    try:
        with torch.no_grad():
            for batch in calibration:
                model(batch)
    finally:
        for h in hooks:
            h.remove()
    configs = {n: Int8StaticActivationInt8WeightConfig(
        act_quant_scale=torch.full([1] * ndim, max(a, 1e-8) / 127.0),
        granularity=[PerTensor(), PerRow()]) for n, (a, ndim) in amax.items()}
    quantize_(model, FqnToConfig(configs), filter_fn=None)


def quantize_model(model: nn.Module, method: str, calibration: Sequence[Tensor],
                   backend: str = "x86") -> nn.Module:
    """Int8 copy of a float ``model`` (eval mode), layers split between torchao and the
    fallback as ``plan`` says; ``calibration`` batches (``(B, ...)`` inputs) feed the
    static scales and observers (ignored for dynamic). Raises ``torch.fx`` errors if the
    fallback's symbolic tracing fails."""
    model = copy.deepcopy(model).eval()
    torch.backends.quantized.engine = backend
    layers = plan(model, method)
    with quiet():
        if layers.get(FALLBACK):
            model = _fx_convs(model, calibration, backend)
        linears = linear_targets(model)  # the same names after FX conversion
        if linears:
            _torchao_linears(model, linears, method, calibration)
    return model.eval()


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

    def calibration(self, ctx: Context) -> list[Tensor]:
        """The first ``calibration_batches`` batches of ``ctx.batch_size`` train rows."""
        bs = ctx.batch_size
        calib = [ctx.X_train[i * bs:(i + 1) * bs] for i in range(self.calibration_batches)]
        return [b for b in calib if len(b)]

    def run(self, model: nn.Module, ctx: Context) -> StageOutput:
        float_model = copy.deepcopy(model).eval()
        reason = quantizable(float_model, self.method)
        if reason:
            return StageOutput(skipped=reason)
        calib = self.calibration(ctx)
        layers = plan(float_model, self.method)
        try:
            qmodel = quantize_model(float_model, self.method, calib, self.backend)
        except Exception as err:  # FX symbolic tracing fails on data-dependent control flow
            if self.method == "static":
                return StageOutput(skipped=f"int8 conversion failed (conv fallback: "
                                           f"{', '.join(layers.get(FALLBACK, [])) or 'none'}; "
                                           f"torchao: {', '.join(layers.get(TORCHAO, [])) or 'none'}"
                                           f"): {type(err).__name__}: {str(err)[:200]}")
            raise
        n_int8 = int8_layers(qmodel)
        if n_int8 == 0:
            return StageOutput(skipped="no layer was converted to int8")
        try:  # some modules (e.g. fused fast paths) cannot run with int8 weights
            predict(qmodel, ctx.X_test[:2])
        except Exception as err:
            return StageOutput(skipped=f"int8 model does not run: {type(err).__name__}: "
                                       f"{str(err)[:200]}")
        info = {"method": self.method, "backend": self.backend, "int8_modules": n_int8,
                "calibration_rows": sum(len(b) for b in calib) if self.method == "static" else 0,
                "engines": layers,
                "fallback": ({"layers": layers[FALLBACK], "engine": FALLBACK,
                              "reason": FALLBACK_REASON} if FALLBACK in layers else None)}
        return StageOutput(model=qmodel, info=info, count_model=float_model,
                           recipe={"quantized": self.method, "quant_backend": self.backend})
