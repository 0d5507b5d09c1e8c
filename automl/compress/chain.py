"""Run a declared compression chain with the accuracy-drop guard.

``stages_spec`` is a list of dicts such as::

    {"stage": "distill", "max_accuracy_drop": 0.01, "student": {"family": "resnet",
     "width": 8}, "temperature": 4.0, "alpha": 0.7, "epochs": 30}
    {"stage": "prune", "method": "structured", "pruning_ratio": 0.5, "fine_tune_epochs": 10}
    {"stage": "quantize", "method": "static", "calibration_batches": 8}

Every spec is validated before anything runs (``ValueError`` naming the stage index and
the key). Each stage gets the last *accepted* model; its result is accepted when
``teacher_val_accuracy - val_accuracy <= max_accuracy_drop`` (a fraction, default 0.01;
always against the original teacher), otherwise rejected with the reason and the chain
continues from the last accepted model. The guard reads only the validation rows
(``ctx.X_val``), which must be held out from the teacher's and the stages' training; the
test split is read once per *accepted* model, as its final measurement (``accuracy``,
``accuracy_drop``), and never decides anything. A stage that finds nothing to do is
``skipped``; one that raises is ``failed`` (reason = the error). A model that passes the
accuracy guard but is larger (file bytes) or slower at batch 1 (PyTorch p50, by more than
``ctx.max_slowdown``, confirmed by a second measurement beside it) than the model it came
from is ``rejected`` with the figures in its reason (``_base.growth_reason``), and its files
are removed: int8 of a tiny model can be many times slower than its float parent.
Accepted models and the
teacher are exported (``export.export_model``, parity checked on the test inputs) and
measured (``_base.measure``); with ``ctx.onnx`` each is also exported to ONNX and checked
in ONNX Runtime (``onnx_export.export_checked``), and the first quantize stage also gets
ONNX Runtime's static int8 of its input model (``NN_quantize_ort``), under the same guard
and ``max_accuracy_drop`` as the stage (``onnx_export.onnx_int8``).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from automl.compress._base import (
    Context,
    Measurement,
    Stage,
    check_number,
    confirm_latency,
    growth_reason,
    measure,
    predict,
    score_name,
    to_dict,
    torch_latency_b1,
    val_accuracy,
)
from automl.compress.distill import DistillStage
from automl.compress.export import ExportResult, export_model, shapes_of
from automl.compress.onnx_export import OnnxExport, OnnxInt8, export_checked, onnx_int8
from automl.compress.prune import PruneStage
from automl.compress.quantize import QuantizeStage, is_quantized

STAGES: dict[str, type] = {"distill": DistillStage, "prune": PruneStage,
                           "quantize": QuantizeStage}
DEFAULT_MAX_DROP = 0.01


@dataclasses.dataclass(frozen=True)
class StageRecord:
    """One stage's outcome. ``status``: accepted / rejected / skipped / failed.
    ``val_accuracy`` and ``val_accuracy_drop`` (vs the teacher, fractions) are what the
    guard decided on; ``accuracy`` and ``accuracy_drop`` are the test figures, set only
    for accepted models (the test split is a final measurement, not a criterion).
    ``onnx``: the accepted model's ONNX file and its ONNX Runtime check; ``onnx_int8``:
    ONNX Runtime's int8 of the stage's input model (first quantize stage only)."""

    index: int
    stage: str
    spec: dict
    status: str
    reason: str | None
    max_accuracy_drop: float
    val_accuracy: float | None = None
    val_accuracy_drop: float | None = None
    accuracy: float | None = None
    accuracy_drop: float | None = None
    info: dict = dataclasses.field(default_factory=dict)
    measurement: Measurement | None = None
    export: ExportResult | None = None
    onnx: OnnxExport | None = None
    onnx_int8: OnnxInt8 | None = None


@dataclasses.dataclass(frozen=True)
class ChainResult:
    """The teacher's figures, each stage's record and the final (last accepted) model."""

    teacher: Measurement
    teacher_export: ExportResult
    stages: tuple[StageRecord, ...]
    final_name: str
    final_model: nn.Module = dataclasses.field(metadata={"json": False}, repr=False,
                                               compare=False)
    teacher_onnx: OnnxExport | None = None

    def to_dict(self) -> dict:
        return to_dict(self)

    def table(self) -> str:
        """Plain-text table: one row per measured model (teacher and accepted stages)."""
        head = (f"{'model':<17}{'params':>9}{'nonzero':>9}{'MACs':>11}{'file B':>10}"
                f"{'p50 b1 ms':>10}{'p50 b64 ms':>11}{'val acc':>8}{'test acc':>9}"
                f"{'agree':>8}{'onnx B':>9}{'ort b1 ms':>10}")
        rows = [head, "-" * len(head)]

        def num(v, spec: str, width: int) -> str:
            return format(v, spec).rjust(width) if v is not None else "-".rjust(width)

        models = [(self.teacher, self.teacher_onnx)] + [(s.measurement, s.onnx)
                                                        for s in self.stages if s.measurement]
        for m, o in models:
            rows.append(f"{m.name:<17}{m.params:>9}{m.nonzero_params:>9}{m.macs:>11}"
                        f"{m.size_bytes or 0:>10}{m.latency_ms_b1:>10.3f}"
                        f"{m.latency_ms_b64:>11.3f}{num(m.val_accuracy, '.4f', 8)}"
                        f"{m.accuracy:>9.4f}{m.agreement:>8.4f}"
                        f"{num(o.bytes if o else None, 'd', 9)}"
                        f"{num(o.latency_ms_b1 if o else None, '.3f', 10)}")
        for s in self.stages:
            q = s.onnx_int8
            if q is not None and q.status == "accepted":
                rows.append(f"{q.name:<17}{'':>9}{'':>9}{'':>11}{'':>10}{'':>10}{'':>11}"
                            f"{q.val_accuracy:>8.4f}{q.accuracy:>9.4f}{q.agreement:>8.4f}"
                            f"{q.bytes:>9}{q.latency_ms_b1:>10.3f}")
        for s in self.stages:
            if s.status != "accepted":
                rows.append(f"#{s.index} {s.stage}: {s.status} ({s.reason})")
            if s.onnx_int8 is not None and s.onnx_int8.status != "accepted":
                q = s.onnx_int8
                rows.append(f"#{s.index} {q.name}: {q.status} ({q.reason})")
        return "\n".join(rows)


def _grew(model: nn.Module, meas: Measurement, parent: nn.Module, parent_meas: Measurement,
          ctx: Context) -> tuple[str | None, dict]:
    """``(reason, figures)``: why ``model`` is rejected for being larger or slower at batch 1
    than ``parent``, the last accepted model it came from (``_base.growth_reason``, both in
    PyTorch on the CPU), or None. A model that measured slower is measured again beside its
    parent (``_base.confirm_latency``) and judged on those figures, which ``figures``
    (``{"growth_check": {...}}``, for the stage's ``info``) records."""
    def why(ms: float, parent_ms: float) -> str | None:
        return growth_reason(ms, parent_ms, meas.size_bytes, parent_meas.size_bytes,
                             parent=parent_meas.name, engine="PyTorch",
                             max_slowdown=ctx.max_slowdown)

    figures = {"parent": parent_meas.name, "size_bytes": meas.size_bytes,
               "parent_size_bytes": parent_meas.size_bytes,
               "latency_ms_b1": meas.latency_ms_b1,
               "parent_latency_ms_b1": parent_meas.latency_ms_b1,
               "max_slowdown": ctx.max_slowdown}
    reason = why(meas.latency_ms_b1, parent_meas.latency_ms_b1)
    larger = why(0.0, 0.0)  # latencies of 0 are not compared: the file sizes alone
    if reason is not None and larger is None:  # slower: measure again, beside the parent
        ms, parent_ms = confirm_latency(torch_latency_b1(model, ctx),
                                        torch_latency_b1(parent, ctx))
        figures.update(confirmed_latency_ms_b1=ms, confirmed_parent_latency_ms_b1=parent_ms)
        reason = why(ms, parent_ms)
    return reason, {"growth_check": figures}


def make_stage(spec: dict, index: int = 0) -> tuple[Stage, float]:
    """(stage object, max_accuracy_drop) from one spec dict; ``ValueError`` naming the key."""
    where = f"stages[{index}]"
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a dict; got {spec!r}")
    params = dict(spec)
    kind = params.pop("stage", None)
    if kind not in STAGES:
        raise ValueError(f"{where}.stage: expected one of {sorted(STAGES)}; got {kind!r}")
    try:
        drop = check_number("max_accuracy_drop", params.pop("max_accuracy_drop",
                                                            DEFAULT_MAX_DROP), 0, 1)
        cls = STAGES[kind]
        valid = list(inspect.signature(cls).parameters)
        for key in params:
            if key not in valid:
                raise ValueError(f"{key}: unknown key for stage {kind!r}; valid: "
                                 f"stage, max_accuracy_drop, {', '.join(valid)}")
        missing = [k for k, p in inspect.signature(cls).parameters.items()
                   if p.default is inspect.Parameter.empty and k not in params]
        if missing:
            raise ValueError(f"{missing[0]}: required for stage {kind!r}")
        return cls(**params), drop
    except ValueError as err:
        raise ValueError(f"{where}.{err}") from None


def run_chain(teacher: nn.Module, stages_spec: list[dict], ctx: Context,
              on_stage: Callable[[str, str], None] | None = None) -> ChainResult:
    """Run ``stages_spec`` (module docstring) on a copy of ``teacher``; files go to
    ``ctx.out_dir`` (``00_teacher.*``, ``NN_<stage>.*``, ``chain.json``). The input
    ``teacher`` is not modified. ``on_stage(name, status)`` is called as the teacher is
    measured and as each stage ends (progress). Raises ``ValueError`` (naming
    ``stages[i].key``) for a bad spec, or when ``ctx`` has no validation rows for the
    guard, before any stage runs; errors inside a stage are recorded as ``failed``."""
    def done(name: str, status: str) -> None:
        if on_stage is not None:
            on_stage(name, status)

    if not isinstance(stages_spec, list):
        raise ValueError(f"stages: expected a list of stage dicts; got {stages_spec!r}")
    if len(ctx.y_val) == 0:
        raise ValueError("ctx has no validation rows: the accuracy-drop guard needs held-out "
                         "rows that are not the test split")
    stages = [make_stage(spec, i) for i, spec in enumerate(stages_spec)]
    for i, (stage, _) in enumerate(stages):  # a bad student arch fails before any work
        if isinstance(stage, DistillStage) and isinstance(stage.student, dict):
            try:
                with torch.random.fork_rng(devices=[]):  # leaves the global RNG as it was
                    ctx.build(dict(stage.student))
            except ValueError as err:
                raise ValueError(f"stages[{i}].student: {err}") from None
    teacher = copy.deepcopy(teacher).eval()
    recipe: dict[str, Any] = {"arch": ctx.teacher_arch, "input_shape": list(ctx.input_shape),
                              "num_classes": ctx.num_classes, "task": ctx.task,
                              "shapes": shapes_of(teacher),
                              "pruned": None, "quantized": None, "lineage": ["teacher"]}
    t_export = export_model(teacher, ctx.out_dir, "00_teacher", recipe, ctx.X_test,
                            build=ctx.build)
    teacher_pred = predict(teacher, ctx.X_test)  # outputs: argmax or values, per task
    t_meas = measure(teacher, ctx, "00_teacher", teacher_pred, size_bytes=t_export.size_bytes,
                     script_bytes=t_export.script_bytes)
    t_onnx = export_checked(teacher, ctx, "00_teacher") if ctx.onnx else None
    done("00_teacher", "measured")
    current, current_name, current_onnx, records = teacher, "00_teacher", t_onnx, []
    current_meas = t_meas
    int8_done = False
    for i, ((stage, max_drop), spec) in enumerate(zip(stages, stages_spec, strict=True), start=1):
        base = {"index": i, "stage": stage.name, "spec": dict(spec),
                "max_accuracy_drop": max_drop}
        if ctx.onnx and isinstance(stage, QuantizeStage) and not int8_done \
                and not is_quantized(current):  # ONNX Runtime's int8 of the same input
            int8_done = True
            base["onnx_int8"] = onnx_int8(
                f"{i:02d}_quantize_ort", current_name, current, current_onnx,
                stage.calibration(ctx), ctx, max_drop=max_drop,
                teacher_val_accuracy=t_meas.val_accuracy, teacher_accuracy=t_meas.accuracy,
                teacher_pred=teacher_pred)
        try:
            out = stage.run(current, ctx)
        except Exception as err:  # a stage's failure is recorded; the chain goes on
            records.append(StageRecord(**base, status="failed",
                                       reason=f"{type(err).__name__}: {str(err)[:300]}"))
            done(f"{i:02d}_{stage.name}", records[-1].status)
            continue
        if out.skipped:
            records.append(StageRecord(**base, status="skipped", reason=out.skipped,
                                       info=out.info))
            done(f"{i:02d}_{stage.name}", records[-1].status)
            continue
        val_acc = val_accuracy(out.model, ctx)  # the guard sees validation rows only
        drop = t_meas.val_accuracy - val_acc
        guard = {"val_accuracy": val_acc, "val_accuracy_drop": drop, "info": out.info}
        if drop > max_drop + 1e-9:
            records.append(StageRecord(**base, status="rejected", **guard,
                                       reason=f"validation {score_name(ctx.task)} drop "
                                              f"{drop:.4f} > max {max_drop:.4f}"))
            done(f"{i:02d}_{stage.name}", records[-1].status)
            continue
        name = f"{i:02d}_{stage.name}"
        new_recipe = {**recipe, **out.recipe, "lineage": recipe["lineage"] + [name]}
        exp = export_model(out.model, ctx.out_dir, name, new_recipe, ctx.X_test,
                           build=ctx.build)
        if not exp.outputs_match:
            why = (f"the reloaded {exp.checked_with} export differs by {exp.max_abs_diff:.2e} "
                   f"> atol {exp.atol}" if exp.checked_with else
                   f"the saved files cannot be reloaded ({exp.script_skipped}; and the "
                   f"recipe has no arch to rebuild from)")
            records.append(StageRecord(**base, status="rejected", **guard, export=exp,
                                       reason=why))
            done(f"{i:02d}_{stage.name}", records[-1].status)
            continue
        meas = measure(out.model, ctx, name, teacher_pred, size_bytes=exp.size_bytes,
                       script_bytes=exp.script_bytes, count_model=out.count_model)
        grew, checked = _grew(out.model, meas, current, current_meas, ctx)
        if grew:
            for path in (exp.state_dict_path, exp.config_path, exp.script_path):
                if path is not None:  # a rejected model leaves no file
                    path.unlink(missing_ok=True)
            records.append(StageRecord(**{**base, **guard, "info": {**out.info, **checked}},
                                       status="rejected", reason=grew))
            done(f"{i:02d}_{stage.name}", records[-1].status)
            continue
        if "confirmed_latency_ms_b1" in checked["growth_check"]:  # slower at first: why kept
            guard["info"] = {**out.info, **checked}
        onnx = export_checked(out.model, ctx, name) if ctx.onnx else None
        records.append(StageRecord(**base, status="accepted", reason=None, **guard,
                                   accuracy=meas.accuracy,
                                   accuracy_drop=t_meas.accuracy - meas.accuracy,
                                   measurement=meas, export=exp, onnx=onnx))
        current, current_name, current_onnx, recipe = out.model, name, onnx, new_recipe
        current_meas = meas
        done(name, "accepted")
    result = ChainResult(t_meas, t_export, tuple(records), current_name, current, t_onnx)
    (ctx.out_dir / "chain.json").write_text(json.dumps(result.to_dict(), indent=1))
    return result
