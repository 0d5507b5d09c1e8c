"""5. Compression of the digits winner.

The project compresses its CV winner itself (``automl.compress.job.compress_step``, the
``compression`` section of ``search_spaces/resnet.yaml``: distillation into a smaller
ResNet, structured pruning, static int8 quantization, each stage guarded on the
validation split). This benchmark reports that table from the digits run of this
invocation (``orchestration``'s, or one it starts itself), measured on the held-out test
split: parameters, MACs, file size, CPU p50 latency at batch 1 and 64 (1 thread), test
accuracy and agreement with the teacher; a second table holds each model's ONNX file,
its parity with PyTorch in ONNX Runtime and ONNX Runtime's latency (and the ONNX Runtime
int8 model when the guard kept it). Without ``automl.compress`` it says so.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from benchmarks._common import Result, Table

NAME = "compression"
TITLE = "Compression of the digits winner"
KEYS = ("name", "role", "params", "nonzero_params", "macs", "size_bytes", "latency_ms_b1",
        "latency_ms_b64", "val_accuracy", "test_accuracy", "cv_accuracy", "agreement")
COLUMNS = ["model", "role", "params", "nonzero params", "MACs", "file bytes",
           "p50 ms batch 1", "p50 ms batch 64", "val accuracy", "test accuracy",
           "CV accuracy", "agreement with teacher"]
ONNX_KEYS = ("name", "onnx_bytes", "onnx_max_abs_diff", "onnx_argmax_agreement",
             "ort_latency_ms_b1", "ort_latency_ms_b64", "latency_ms_b1", "test_accuracy",
             "onnx_skipped")
ONNX_COLUMNS = ["model", "ONNX bytes", "max abs diff vs PyTorch", "argmax agreement",
                "ORT p50 ms batch 1", "ORT p50 ms batch 64", "PyTorch p50 ms batch 1",
                "test accuracy", "no ONNX because"]


def _landed() -> bool:
    try:
        import automl.compress.job  # noqa: F401
    except ImportError:
        return False
    return True


def run(quick: bool, ctx: dict) -> Result:
    from benchmarks.orchestration import project_run

    res = Result(NAME, TITLE)
    if not _landed():
        res.status, res.reason = "not landed", "automl.compress is not in this tree"
        return res
    run_dir = Path(project_run(quick, ctx)["run_dir"])
    section = json.loads((run_dir / "summary.json").read_text()).get("compression")
    if not section and quick and "compression_run" not in ctx:
        # quick orchestration skipped compression to stay short: a quick run of our own
        from benchmarks.orchestration import TRIALS, run_tool

        work = Path(tempfile.mkdtemp(prefix="bench-compression-"))
        ctx["compression_run"] = run_tool("automl", TRIALS[True], True, work, 900)
        run_dir = Path(ctx["compression_run"]["run_dir"])
        section = json.loads((run_dir / "summary.json").read_text()).get("compression")
    if not section:
        res.status, res.reason = "not landed", ("the digits run compressed nothing (no "
                                                "compression stages in its spec)")
        return res
    if section.get("status") != "completed":
        res.status, res.reason = "failed", f"the project's compression: {section.get('error')}"
        return res
    table = section["table"]
    rows = [r for r in table if r.get("size_bytes") is not None]  # PyTorch models
    res.tables.append(Table(f"Digits winner of {run_dir}", COLUMNS,
                            [[r.get(k) for k in KEYS] for r in rows]))
    res.tables.append(Table("ONNX Runtime (CPU, 1 thread)", ONNX_COLUMNS,
                            [[r.get(k) for k in ONNX_KEYS] for r in table]))
    res.settings = {"stages": [s["spec"] for s in section["stages"]],
                    "teacher": section.get("teacher_source"), "guard": section.get("guard"),
                    "wall_time_s": section.get("wall_time_s")}
    for s in section["stages"]:
        res.notes.append(f"stage {s['index']} {s['stage']}: {s['status']}"
                         + (f" ({s['reason']})" if s.get("reason") else ""))
        q = s.get("onnx_int8")
        if q:
            res.notes.append(f"stage {s['index']} {q['name']} (ONNX Runtime int8 of "
                             f"{q['source']}): {q['status']}"
                             + (f" ({q['reason']})" if q.get("reason") else ""))
    winner, final = rows[0], rows[-1]
    if final is not winner:
        res.notes.append(
            f"{final['name']} against the deployed winner: "
            f"{winner['params'] / max(final['params'], 1):.1f}x fewer parameters, "
            f"{winner['macs'] / max(final['macs'], 1):.1f}x fewer MACs, "
            f"{(winner['size_bytes'] or 0) / max(final['size_bytes'] or 1, 1):.1f}x smaller "
            f"file, p50 latency at batch 1 {final['latency_ms_b1']:.3f} ms vs "
            f"{winner['latency_ms_b1']:.3f} ms, test accuracy {final['test_accuracy']:.4f} vs "
            f"{winner['test_accuracy']:.4f}.")
    res.data = {"run_dir": str(run_dir), "compression": section}
    return res
