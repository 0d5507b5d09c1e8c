"""Saving, exporting and reloading compressed models.

Each model ``NAME`` is written to ``out_dir`` as three files:

- ``NAME.pt``: ``model.state_dict()`` via ``torch.save`` (its size is ``size_bytes``);
- ``NAME.json``: the rebuild recipe: ``arch``, ``input_shape``, ``num_classes``,
  ``shapes`` (every float parameter/buffer shape, which after structured pruning are the
  *pruned* channel counts), ``pruned`` and ``quantized`` (method, backend), the lineage
  and the export tolerance;
- ``NAME.ts``: TorchScript (``torch.jit.trace``), the self-contained format, when the
  model can be traced and the reloaded trace reproduces it (models with torchao int8
  layers cannot be traced, and a user's model whose Python branches on its data is
  traced along one path only: no ``.ts`` then, ``script_skipped`` says why);
- ``NAME.onnx``: ONNX, written by ``onnx_export`` (see there).

Rebuild paths: ``load_model`` rebuilds from the state_dict when the recipe has an
``arch`` (``build(arch)`` -> resize layers to ``shapes`` -> re-apply quantization ->
``load_state_dict``); otherwise (a hand-made ``nn.Module``) the TorchScript file is the
rebuild path. Every state_dict read uses ``torch.load(..., weights_only=True)``; a file
that needs arbitrary unpickling (pickled code) is refused with ``DataError``.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from automl.compress._base import predict, quiet, to_dict
from automl.errors import DataError

#: Default tolerance of the TorchScript check (``torch.allclose`` semantics).
ATOL = 1e-4
RTOL = 1e-4


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """Paths and sizes (bytes) of the saved files and the reload check on ``n_checked``
    rows: ``max_abs_diff`` of the logits, ``outputs_match`` (within atol + rtol*|ref|) and
    ``argmax_agreement`` (share of identical predicted classes). ``checked_with`` names
    the reloaded file the check ran on: ``torchscript``, or ``state_dict`` (rebuilt from
    the recipe) when TorchScript cannot trace the model or its reloaded trace does not
    reproduce it (``script_skipped`` says why; e.g. torchao's int8 tensors, a model whose
    Python branches on its data), or None when neither can be reloaded here."""

    state_dict_path: Path
    config_path: Path
    script_path: Path | None
    size_bytes: int
    script_bytes: int | None
    n_checked: int
    max_abs_diff: float | None
    atol: float
    rtol: float
    outputs_match: bool | None
    argmax_agreement: float | None
    checked_with: str | None = None
    script_skipped: str | None = None

    def to_dict(self) -> dict:
        return to_dict(self)


def shapes_of(model: nn.Module) -> dict[str, list[int]]:
    """``{state_dict key: shape}`` of a float model's tensors."""
    return {k: list(v.shape) for k, v in model.state_dict().items() if isinstance(v, Tensor)}


def one_line(err: BaseException) -> str:
    """``Type: first line of the message`` (at most 200 characters, terminal colour codes
    removed)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:200] if text else ''}".rstrip(": ")


def export_model(model: nn.Module, out_dir: str | Path, name: str, recipe: dict[str, Any],
                 X_check: Tensor, *, atol: float = ATOL, rtol: float = RTOL,
                 build: Any = None) -> ExportResult:
    """Write ``name.pt``, ``name.json`` and, when the model can be traced, ``name.ts``
    (see module docstring), then check that the reloaded model reproduces ``model``'s
    logits on ``X_check``: the TorchScript file, else the state_dict rebuilt from the
    recipe (``load_model(out_dir, name, build)``; needs ``recipe['arch']``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    sd_path, cfg_path, ts_path = (out / f"{name}{ext}" for ext in (".pt", ".json", ".ts"))
    torch.save(model.state_dict(), sd_path)
    config = {"name": name, **recipe,
              "rebuild": "load_model(dir, name): build(arch) + shapes + quantization + "
                         "state_dict when arch is set, else the TorchScript file",
              "export": {"format": "torchscript-trace", "atol": atol, "rtol": rtol}}
    skipped, reloaded, checked_with = None, None, None
    ts_path.unlink(missing_ok=True)
    try:
        with quiet(), torch.no_grad():
            scripted = torch.jit.trace(model, X_check[:2], check_trace=False)
            torch.jit.save(scripted, str(ts_path))
            reloaded, checked_with = torch.jit.load(str(ts_path)), "torchscript"
    except Exception as err:  # torchao's tensor subclasses cannot be traced
        ts_path.unlink(missing_ok=True)
        skipped = f"TorchScript cannot trace this model: {one_line(err)}"
        config["export"]["format"] = None
    ref = predict(model, X_check)

    def check(other: nn.Module) -> tuple[float, bool, float]:
        got = predict(other, X_check)
        return (float((ref - got).abs().max()) if len(ref) else 0.0,
                bool(torch.allclose(got, ref, atol=atol, rtol=rtol)),
                float((got.argmax(1) == ref.argmax(1)).float().mean()) if len(ref) else 1.0)

    checked = None
    if reloaded is not None:  # a trace records the one path the example took through the
        try:                  # model's Python: a model that branches on its data breaks it
            checked = check(reloaded)
            off = None if checked[1] else f"its logits differ by {checked[0]:.2e}"
        except Exception as err:
            off = f"it raised {one_line(err)}"
        if off is not None:
            ts_path.unlink(missing_ok=True)
            skipped = (f"the TorchScript trace does not follow this model ({off}; "
                       "data-dependent control flow?)")
            config["export"]["format"] = None
            reloaded = checked_with = checked = None
    cfg_path.write_text(json.dumps(to_dict(config), indent=1))
    if reloaded is None and recipe.get("arch"):
        reloaded, checked_with = load_model(out, name, build), "state_dict"
        checked = check(reloaded)
    diff, match, agree = checked or (None, None, None)
    config["export"].update(max_abs_diff=diff, checked_with=checked_with, script_skipped=skipped)
    cfg_path.write_text(json.dumps(to_dict(config), indent=1))
    return ExportResult(sd_path, cfg_path, ts_path if ts_path.exists() else None,
                        sd_path.stat().st_size,
                        ts_path.stat().st_size if ts_path.exists() else None, len(X_check),
                        diff, atol, rtol, match, agree, checked_with, skipped)


def load_state_dict_file(path: str | Path) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)``; ``DataError`` if the file is missing or
    holds anything but tensors/containers/primitives (e.g. a pickled module or code).
    torchao's int8 tensors are allowed: importing torchao registers them with
    ``torch.serialization.add_safe_globals`` (done here when the file needs them)."""
    def load() -> dict[str, Any]:
        with quiet():
            return torch.load(path, map_location="cpu", weights_only=True)

    try:
        try:
            return load()
        except pickle.UnpicklingError as err:
            if "torchao." not in str(err):
                raise
            from automl.compress.quantize import import_torchao

            import_torchao()  # registers torchao's tensor classes as safe, then once more
            return load()
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError) as err:
        raise _refused(path, err) from None


def _refused(path: str | Path, err: BaseException) -> DataError:
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return DataError(f"refused to load: {first}", where=str(path),
                     fix="save with torch.save(model.state_dict()) and load weights only")


def fit_shapes(model: nn.Module, shapes: dict[str, list[int]]) -> nn.Module:
    """Resize ``model``'s parameters/buffers to ``shapes`` (zero-filled) and fix the
    layer attributes (Conv/Linear/BatchNorm/LayerNorm sizes), so that a structurally
    pruned state_dict loads into a freshly built, unpruned model. Returns ``model``."""
    for key, shape in shapes.items():
        mod_name, _, attr = key.rpartition(".")
        module = model.get_submodule(mod_name)
        old = getattr(module, attr, None)
        if not isinstance(old, Tensor) or list(old.shape) == list(shape):
            continue
        new = torch.zeros(shape, dtype=old.dtype)
        if isinstance(old, nn.Parameter):
            setattr(module, attr, nn.Parameter(new, requires_grad=old.requires_grad))
        else:
            module.register_buffer(attr, new)
        w = getattr(module, "weight", None)
        if isinstance(module, nn.modules.conv._ConvNd) and attr == "weight":
            module.out_channels, module.in_channels = shape[0], shape[1] * module.groups
        elif isinstance(module, nn.Linear) and attr == "weight":
            module.out_features, module.in_features = shape[0], shape[1]
        elif isinstance(module, nn.modules.batchnorm._NormBase):
            module.num_features = shape[0]
        elif isinstance(module, nn.LayerNorm) and w is not None:
            module.normalized_shape = tuple(w.shape)
    return model


def rebuild(recipe: dict[str, Any], state_dict: dict[str, Any], build: Any) -> nn.Module:
    """Model from a recipe (``NAME.json``) and its state_dict: ``build(recipe['arch'])``,
    ``fit_shapes``, re-apply the recorded quantization, ``load_state_dict`` (strict)."""
    from automl.compress.quantize import quantize_model

    if not recipe.get("arch"):
        raise DataError("recipe has no 'arch'; rebuild from the TorchScript file instead",
                        where=str(recipe.get("name")))
    model = fit_shapes(build(recipe["arch"]), recipe.get("shapes") or {}).eval()
    if recipe.get("quantized"):
        example = torch.rand(2, *recipe["input_shape"], generator=torch.Generator().manual_seed(0))
        model = quantize_model(model, recipe["quantized"], [example],
                               recipe.get("quant_backend", "x86"))
    model.load_state_dict(state_dict)
    return model.eval()


def load_model(out_dir: str | Path, name: str, build: Any = None) -> nn.Module:
    """Reload model ``name`` from ``out_dir``: via ``rebuild`` when the recipe has an arch
    and ``build`` is given (or the recipe's task builds it: ``automl.task.Task.build``, the
    regression head included), else TorchScript."""
    out = Path(out_dir)
    recipe = json.loads((out / f"{name}.json").read_text())
    if recipe.get("arch"):
        if build is None:
            from automl.task import task_of

            task = task_of(recipe.get("task"))  # recipes before tasks: classification

            def build(arch: dict) -> nn.Module:
                return task.build(arch, tuple(recipe["input_shape"]), recipe["num_classes"])

        return rebuild(recipe, load_state_dict_file(out / f"{name}.pt"), build)
    if not (out / f"{name}.ts").is_file():
        raise DataError("neither a rebuild recipe ('arch') nor a TorchScript file",
                        where=str(out / f"{name}.json"),
                        fix="export the model with an arch recipe or a traceable model")
    with quiet():
        return torch.jit.load(str(out / f"{name}.ts"))
