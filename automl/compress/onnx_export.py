"""ONNX export of a kept model, its check in ONNX Runtime, and ONNX Runtime's int8.

- ``export_onnx``: ``torch.onnx.export`` with a dynamic batch axis: input ``input``
  ``(batch, ...)``, output ``logits`` ``(batch, num_classes)``, opset ``OPSET``, weights
  inside the one file. It tries the TorchScript-based exporter (``dynamo=False``) first
  and falls back to the ``torch.export``-based one (which needs ``onnxscript``) when that
  raises or is gone. Measured here (torch 2.13, digits ResNet of 77k parameters, 2-core
  CPU): 0.02-0.06 s a model against 1.2-1.5 s (4 s for a process's first export), most of
  it rebuilding the torchlib registry on every call; a compression chain exports 4 models,
  so this is 5-7 s of the job. Every file is checked in ONNX Runtime against PyTorch
  (``export_checked``) whichever exporter wrote it. The per-node debug metadata the
  ``torch.export``-based exporter adds (FX node text, Python stack traces under
  ``pkg.torch.onnx.*``) is removed: it made small models' files about 5x larger.
- ``export_checked``: export, then run the file in ONNX Runtime (CPU execution provider,
  ``threads`` intra-op threads) on the check rows (the test split): maximum absolute
  difference of the logits and argmax agreement with PyTorch, and ONNX Runtime's p50
  latency at batch 1 and 64. A model that cannot be exported (int8 PyTorch layers, an
  operator without an ONNX translation) or whose file does not reproduce it in ONNX
  Runtime (logits beyond ``PARITY_ATOL``: a trace of a model that branches on its data)
  is skipped with the reason on one line.
- ``quantize_onnx`` / ``onnx_int8``: ONNX Runtime's static post-training quantization
  (``onnxruntime.quantization.quantize_static``: QDQ format, int8 weights per output
  channel, uint8 activations, MinMax calibration on training batches) of Conv, Gemm and
  MatMul, after ONNX Runtime's recommended pre-processing (``quant_pre_process``: shape
  inference and graph optimisation). ``onnx_int8`` applies the chain's accuracy-drop guard
  to it on the validation rows, then rejects it when its file is larger or it is slower at
  batch 1 than its source's float ONNX file, both in ONNX Runtime; the test split is
  measured only when it is accepted.

Data convention as in ``_base``: ``X`` float32 ``(N, ...)``; accuracies are fractions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from automl.compress._base import (
    Context,
    agreement_of,
    predict,
    quiet,
    score_name,
    score_of,
    to_dict,
)

OPSET = 18
INPUT, OUTPUT = "input", "logits"
#: the quantized operator types (convolutions and matrix products; norms stay float)
INT8_OPS = ("Conv", "Gemm", "MatMul")
#: the format tag the registry records for an ONNX-only model
ONNX_FORMAT = "automl.onnx/1"


@dataclasses.dataclass(frozen=True)
class OnnxExport:
    """One model's ONNX file and its check in ONNX Runtime on ``n_checked`` rows:
    ``max_abs_diff`` of the logits and ``argmax_agreement`` with the PyTorch model; ONNX
    Runtime's p50 latency in ms at batch 1 and 64 (CPU, ``threads`` threads). ``skipped``:
    why there is no file (then every other field is None)."""

    path: Path | None
    bytes: int | None
    skipped: str | None = None
    n_checked: int = 0
    max_abs_diff: float | None = None
    argmax_agreement: float | None = None
    latency_ms_b1: float | None = None
    latency_ms_b64: float | None = None
    opset: int = OPSET

    def to_dict(self) -> dict:
        return to_dict(self)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """Silence the exporter's and quantizer's log lines (``torchvision is not installed``,
    ``Please consider pre-processing``) for the duration."""
    names = ("torch.onnx", "torch.onnx._internal.exporter._registration", "")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with quiet():
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _strip_debug_metadata(path: Path) -> None:
    """Remove per-node debug metadata and doc strings and the intermediate shapes
    (``value_info``) from the ONNX file at ``path``, then check the model."""
    import onnx

    proto = onnx.load(str(path))
    for node in proto.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    del proto.graph.value_info[:]
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


def export_onnx(model: nn.Module, path: str | Path, example: Tensor) -> Path:
    """Export ``model`` (eval mode) to ``path`` with a dynamic batch axis (module
    docstring); ``example`` is one input batch ``(B, ...)``, B >= 2.

    Raises:
        Exception: whatever the ``torch.export``-based exporter raises, when the
            TorchScript-based one failed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model.eval()
    with _quiet_logs(), torch.no_grad():
        try:
            with _ir_dump_dropped():
                torch.onnx.export(model, (example[:2],), str(path), input_names=[INPUT],
                                  output_names=[OUTPUT], opset_version=OPSET, dynamo=False,
                                  dynamic_axes={INPUT: {0: "batch"}, OUTPUT: {0: "batch"}})
        except Exception as first:  # an operator it cannot translate, or a torch without it
            batch = torch.export.Dim("batch", min=1)
            try:
                torch.onnx.export(model, (example[:2],), str(path), input_names=[INPUT],
                                  output_names=[OUTPUT], dynamic_shapes=({0: batch},),
                                  opset_version=OPSET, external_data=False, optimize=True,
                                  verbose=False)
            except Exception:  # the first exporter names the operator; the second does not
                raise first from None
    _strip_debug_metadata(path)
    return path


#: the first line of the graph torch's TorchScript-based exporter dumps when it fails
_IR_DUMP = "Torch IR graph at exception:"


@contextlib.contextmanager
def _ir_dump_dropped() -> Iterator[None]:
    """Keep the TorchScript-based exporter's graph dump off the terminal. In torch 2.13 it
    writes the whole graph to the C-level stdout whenever an export fails (its
    ``setup_onnx_logging`` tests a function object for truth, so ONNX logging is always
    on), which buried the one-line reason under a page of IR. File descriptor 1 goes to
    a temporary file meanwhile; everything written there except the dump is written back
    after (another thread's output included)."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):  # no usable stdout: nothing to protect
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 1)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            kept, dump = [], False
            for line in tmp.read().decode(errors="replace").splitlines(keepends=True):
                dump = line.startswith(_IR_DUMP) or (dump and line[:1].isspace())
                if not dump:
                    kept.append(line)
            if kept:
                os.write(1, "".join(kept).encode())


def session(path: str | Path, threads: int = 1):
    """An ONNX Runtime CPU ``InferenceSession`` on ``threads`` intra-op threads (one
    inter-op thread, sequential execution)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, int(threads))
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 4  # fatal only: a failed run raises with its own message
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def run_session(sess: Any, X: Tensor, batch_size: int = 1024) -> Tensor:
    """Logits ``(N, num_classes)`` of an ONNX Runtime session on ``X`` ``(N, ...)``."""
    name = sess.get_inputs()[0].name
    parts = [sess.run(None, {name: X[i:i + batch_size].numpy()})[0]
             for i in range(0, len(X), batch_size)]
    return torch.from_numpy(np.concatenate(parts)) if parts else torch.empty(0)


class OnnxModel:
    """An ONNX file behind a PyTorch-like call: ``OnnxModel(path)(x)`` -> logits
    ``(N, num_classes)`` as a float tensor, ``x`` ``(N, ...)`` float32 (ONNX Runtime, CPU)."""

    def __init__(self, path: str | Path, threads: int = 1):
        self.path = Path(path)
        self.session = session(self.path, threads)

    def __call__(self, x: Tensor) -> Tensor:
        return run_session(self.session, x.detach().float().cpu().contiguous())

    def eval(self) -> OnnxModel:  # the same calls as an nn.Module in the code that loads it
        return self


def ort_latency_ms(sess: Any, x: Tensor, repeats: int, warmup: int = 3) -> float:
    """Median wall time in ms of one ``sess.run`` on ``x``."""
    feed = {sess.get_inputs()[0].name: x.numpy()}
    for _ in range(warmup):
        sess.run(None, feed)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(None, feed)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


#: ONNX Runtime against PyTorch: the largest logit difference an export may show
#: (``torch.allclose``: ``atol + rtol * |PyTorch's|``); fp32 files differ by 1e-7 to 1e-5
PARITY_ATOL = PARITY_RTOL = 1e-3


def parity_problem(ref: Tensor, got: Tensor) -> str | None:
    """Why ONNX Runtime's logits ``got`` do not stand for PyTorch's ``ref`` (a shape that
    differs, or values beyond :data:`PARITY_ATOL`), on one line; None when they do. An
    export traces one path through the model's Python, so a model that branches on its
    data exports a graph that is wrong for other inputs."""
    if got.shape != ref.shape:
        return (f"ONNX Runtime's output has shape {tuple(got.shape)}, PyTorch's "
                f"{tuple(ref.shape)}: the export does not follow this model")
    if len(ref) and not torch.allclose(got, ref, atol=PARITY_ATOL, rtol=PARITY_RTOL):
        diff = float((ref - got).abs().max())
        return (f"ONNX Runtime's logits differ from PyTorch's by {diff:.2e} (> "
                f"{PARITY_ATOL:g}): the export does not follow this model (data-dependent "
                "control flow?)")
    return None


def batch64(X: Tensor) -> Tensor:
    """64 rows of ``X`` (repeated when it has fewer), as ``_base.measure`` uses."""
    return X[torch.arange(64) % len(X)]


def export_checked(model: nn.Module, ctx: Context, name: str, X_check: Tensor | None = None
                   ) -> OnnxExport:
    """Write ``ctx.out_dir/name.onnx`` and check it (module docstring) on ``X_check``
    (default ``ctx.X_test``); never raises: a failure is a ``skipped`` reason."""
    from automl.compress.export import one_line
    from automl.compress.quantize import is_quantized

    X = ctx.X_test if X_check is None else X_check
    if is_quantized(model):
        return OnnxExport(None, None, skipped="int8 PyTorch layers (torchao, torch.ao) have "
                          "no ONNX export; ONNX int8 is ONNX Runtime's quantization of the "
                          "float model")
    path = ctx.out_dir / f"{name}.onnx"
    try:
        export_onnx(model, path, X[:2] if len(X) >= 2 else ctx.X_train[:2])
    except Exception as err:  # an operator without ONNX translation, dynamic control flow
        path.unlink(missing_ok=True)
        return OnnxExport(None, None, skipped=f"ONNX export failed: {one_line(err)}")
    try:
        sess = session(path, ctx.threads)
        ref, got = predict(model, X), run_session(sess, X)
    except Exception as err:  # a graph traced for the example's batch only
        path.unlink(missing_ok=True)
        return OnnxExport(None, None, skipped="ONNX Runtime cannot run the exported file "
                          f"(the export does not follow this model): {one_line(err)}")
    off = parity_problem(ref, got)
    if off is not None:
        path.unlink(missing_ok=True)
        return OnnxExport(None, None, skipped=off)
    reps = ctx.latency_repeats
    classes = ref.dim() == 2 and ref.shape[1] > 1  # a regression model's one value has none
    return OnnxExport(path, path.stat().st_size, None, len(X),
                      float((ref - got).abs().max()) if len(X) else 0.0,
                      (float((ref.argmax(1) == got.argmax(1)).float().mean()) if len(X) else
                       1.0) if classes else None,
                      ort_latency_ms(sess, X[:1], reps),
                      ort_latency_ms(sess, batch64(X), max(3, reps // 3)))


class _Batches:
    """``onnxruntime.quantization.CalibrationDataReader`` over a list of input batches."""

    def __init__(self, batches: Sequence[Tensor], name: str = INPUT):
        self._it = iter([{name: b.numpy()} for b in batches])

    def get_next(self) -> dict | None:
        return next(self._it, None)

    def rewind(self) -> None:  # part of the reader interface; one pass is all we need
        pass


def quantize_onnx(src: str | Path, dst: str | Path, calibration: Sequence[Tensor]) -> Path:
    """ONNX Runtime static int8 of the float ONNX model ``src`` into ``dst`` (module
    docstring), calibrated on ``calibration`` batches ``(B, ...)``. Raises what
    ``onnxruntime.quantization`` raises."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, dst = Path(src), Path(dst)
    pre = dst.with_name(f".{dst.stem}.pre.onnx")
    try:
        with _quiet_logs():
            quant_pre_process(str(src), str(pre))
            quantize_static(str(pre), str(dst), _Batches(calibration),
                            quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                            op_types_to_quantize=list(INT8_OPS))
    finally:
        pre.unlink(missing_ok=True)
    return dst


@dataclasses.dataclass(frozen=True)
class OnnxInt8:
    """ONNX Runtime's static int8 of ``source`` (the float model that entered a quantize
    stage), judged by that stage's guard. ``status``: accepted / rejected / skipped /
    failed (with ``reason``). ``val_accuracy``/``val_accuracy_drop`` (vs the teacher)
    decided it; ``accuracy``, ``accuracy_drop``, ``agreement`` (test argmax vs the
    teacher), ``source_agreement`` (vs ``source`` in PyTorch) and ONNX Runtime's p50
    latency (ms, batch 1 and 64) are measured on the test split for accepted models only
    (batch 1 also for one rejected as larger or slower than its source, ``source_bytes``
    the source's float ONNX file)."""

    name: str
    source: str
    status: str
    reason: str | None
    max_accuracy_drop: float
    calibration_rows: int = 0
    path: Path | None = None
    bytes: int | None = None
    source_bytes: int | None = None
    val_accuracy: float | None = None
    val_accuracy_drop: float | None = None
    accuracy: float | None = None
    accuracy_drop: float | None = None
    agreement: float | None = None
    source_agreement: float | None = None
    latency_ms_b1: float | None = None
    latency_ms_b64: float | None = None

    def to_dict(self) -> dict:
        return to_dict(self)


def onnx_int8(name: str, source: str, source_model: nn.Module, source_onnx: OnnxExport | None,
              calibration: Sequence[Tensor], ctx: Context, *, max_drop: float,
              teacher_val_accuracy: float, teacher_accuracy: float, teacher_pred: Tensor
              ) -> OnnxInt8:
    """Quantize ``source_onnx`` with ONNX Runtime into ``ctx.out_dir/name.onnx`` and judge
    it (see ``OnnxInt8``); never raises."""
    from automl.compress.export import one_line

    base = {"name": name, "source": source, "max_accuracy_drop": max_drop,
            "calibration_rows": sum(len(b) for b in calibration)}
    if source_onnx is None or source_onnx.path is None:
        why = source_onnx.skipped if source_onnx is not None else "ONNX export is off"
        return OnnxInt8(**base, status="skipped", reason=f"{source} has no float ONNX file "
                                                         f"({why})")
    path = ctx.out_dir / f"{name}.onnx"
    try:
        quantize_onnx(source_onnx.path, path, calibration)
        sess = session(path, ctx.threads)
        val_out = run_session(sess, ctx.X_val)
    except Exception as err:
        path.unlink(missing_ok=True)
        return OnnxInt8(**base, status="failed", reason=one_line(err))
    val_acc = score_of(val_out, ctx.y_val, ctx.task)  # accuracy, or R² for regression
    drop = teacher_val_accuracy - val_acc
    guard = {"val_accuracy": val_acc, "val_accuracy_drop": drop, "path": path,
             "bytes": path.stat().st_size, "source_bytes": source_onnx.bytes}
    if drop > max_drop + 1e-9:
        path.unlink(missing_ok=True)
        return OnnxInt8(**{**base, **guard, "path": None}, status="rejected",
                        reason=f"validation {score_name(ctx.task)} drop {drop:.4f} > max "
                               f"{max_drop:.4f}")
    reps = ctx.latency_repeats
    b1 = ort_latency_ms(sess, ctx.X_test[:1], reps)
    grew = _grew_ort(sess, b1, guard["bytes"], source, source_onnx, ctx)
    if grew is not None:
        path.unlink(missing_ok=True)
        return OnnxInt8(**{**base, **guard, "path": None}, status="rejected", reason=grew,
                        latency_ms_b1=b1)
    outputs = run_session(sess, ctx.X_test)
    acc = score_of(outputs, ctx.y_test, ctx.task)
    return OnnxInt8(**base, **guard, status="accepted", reason=None, accuracy=acc,
                    accuracy_drop=teacher_accuracy - acc,
                    agreement=agreement_of(outputs, teacher_pred, ctx.task),
                    source_agreement=agreement_of(outputs, predict(source_model, ctx.X_test),
                                                  ctx.task),
                    latency_ms_b1=b1,
                    latency_ms_b64=ort_latency_ms(sess, batch64(ctx.X_test), max(3, reps // 3)))


def _grew_ort(sess: Any, b1: float, size: int, source: str, source_onnx: OnnxExport,
              ctx: Context) -> str | None:
    """Why ONNX Runtime's int8 (``sess``, ``b1`` ms at batch 1, ``size`` bytes) is larger or
    slower than its source's float ONNX file in ONNX Runtime (``_base.growth_reason``:
    like against like), or None; a model that measured slower is measured again beside
    its source (``_base.confirm_latency``) and judged on those figures."""
    from automl.compress._base import confirm_latency, growth_reason

    def why(ms: float, source_ms: float | None) -> str | None:
        return growth_reason(ms, source_ms, size, source_onnx.bytes, parent=source,
                             engine="ONNX Runtime", max_slowdown=ctx.max_slowdown)

    reason = why(b1, source_onnx.latency_ms_b1)
    if reason is None or why(0.0, 0.0) is not None:
        return reason
    x1, reps = ctx.X_test[:1], ctx.latency_repeats
    theirs = session(source_onnx.path, ctx.threads)
    return why(*confirm_latency(lambda: ort_latency_ms(sess, x1, reps),
                                lambda: ort_latency_ms(theirs, x1, reps)))
