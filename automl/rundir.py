"""Reading a finished run directory: the summary, the trials, and the optional stages
(cross-validation, compression) in the shapes later stages (registry, W&B, report) use.

Everything here reads files written by the pipeline; nothing imports torch or ray.
Optional sections are None when the run did not produce them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from automl.errors import DataError

SUMMARY = "summary.json"


def require_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a path, when it is a folder: every command that reads a run directory
    (``report``, ``reproduce``, ``compress``, ``resume``) says the same when it is not.

    Raises:
        DataError: no such folder (exit code 2 at the CLI: the caller passed a wrong path).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError("run directory does not exist", where=str(run_dir),
                        fix="pass a folder written by `automl search`")
    return run_dir


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """``<run_dir>/summary.json`` as a dict.

    Raises:
        DataError: the folder or its summary is missing or unreadable (exit code 2 at the
            CLI: the caller passed a wrong folder).
    """
    path = require_run_dir(run_dir) / SUMMARY
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {SUMMARY}: {e}", where=str(path),
                        fix="pass a folder written by a finished `automl search`") from None
    if not isinstance(summary, dict):
        raise DataError(f"{SUMMARY} holds a {type(summary).__name__}, not a mapping",
                        where=str(path), fix="pass a folder written by `automl search`")
    return summary


def read_trials(run_dir: str | Path) -> list[dict[str, Any]]:
    """``trials.json`` (one dict per trial, with ``history``); [] when absent."""
    path = Path(run_dir) / "trials.json"
    return json.loads(path.read_text()) if path.is_file() else []


def winner(summary: dict) -> dict[str, Any]:
    """The model the run chose: ``{"trial_id", "checkpoint", "params", "config", "test"}``.

    The ``winner`` section (written when cross-validation picks the model) is preferred,
    else the search's ``best`` trial; ``test`` is the summary's test scores.
    """
    best = summary.get("best") or {}
    chosen = summary.get("winner") if isinstance(summary.get("winner"), dict) else {}
    cv = summary.get("cv") if isinstance(summary.get("cv"), dict) else {}
    source = chosen or best
    return {
        "trial_id": chosen.get("trial_id") or cv.get("winner") or best.get("trial_id"),
        "checkpoint": chosen.get("checkpoint") or best.get("checkpoint"),
        "params": source.get("params"),
        "config": source.get("config"),
        "test": chosen.get("test") or summary.get("test") or {},
    }


def cv_table(summary: dict) -> dict[str, Any] | None:
    """The cross-validation section as ``{"metric", "winner", "candidates": [{"trial_id",
    "scores" (one per fold, in fold order), "mean", "std", "ci95" ([low, high] or None),
    "interval" (``wilson`` or ``t``: which interval ``ci95`` is), "status", "n_params"}]}``, or
    None when the run has no (usable) ``cv`` section.

    Reads ``automl.selection.CVResult.to_dict()``: fold scores are
    ``folds[i]["scores"][metric]``.
    """
    cv = summary.get("cv")
    if not isinstance(cv, dict) or not isinstance(cv.get("candidates"), list):
        return None
    metric = cv.get("metric") or "accuracy"
    rows = []
    for c in cv["candidates"]:
        scores = [f["scores"][metric] for f in c.get("folds", [])
                  if isinstance(f.get("scores"), dict) and metric in f["scores"]]
        stats = (c.get("summary") or {}).get(metric) or {}
        mean = stats.get("mean", sum(scores) / len(scores) if scores else math.nan)
        rows.append({"trial_id": c.get("trial_id"), "scores": scores, "mean": mean,
                     "std": stats.get("std"), "ci95": stats.get("ci95"),
                     "interval": stats.get("interval", "t") if stats.get("ci95") else None,
                     "status": c.get("status", ""),
                     "n_params": c.get("n_params")})
    return {"metric": metric, "winner": cv.get("winner"), "reason": cv.get("reason"),
            "candidates": rows}


def compression(run_dir: str | Path, summary: dict) -> dict[str, Any] | None:
    """The compression chain (``automl.compress.ChainResult.to_dict()``: ``teacher``,
    ``teacher_export``, ``stages``, ``final_name``) from the summary's ``compression``
    section, or from the first ``chain.json`` in the run directory; None when absent."""
    section = summary.get("compression")
    if isinstance(section, dict) and isinstance(section.get("stages"), list):
        return section
    if isinstance(section, dict) and isinstance(section.get("chain"), dict):
        return section["chain"]
    run_dir = Path(run_dir)
    for path in sorted(run_dir.glob("*/chain.json")) + sorted(run_dir.glob("*/*/chain.json")):
        if path.parts[len(run_dir.parts)] in ("tune", "wandb", "report"):
            continue
        try:
            chain = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(chain, dict) and isinstance(chain.get("stages"), list):
            return chain
    return None


def measured_models(chain: dict) -> list[dict[str, Any]]:
    """The measured models of a chain as rows ``{"name", "stage", "status", "params",
    "nonzero_params", "macs", "size_bytes", "latency_ms_b1", "latency_ms_b64",
    "accuracy" (test), "val_accuracy", "export", "onnx"}``: the deployed winner when the chain
    measured it (``status: winner``), the teacher (``status: teacher``), then each
    accepted stage (``status: accepted``, export: its file paths)."""
    rows = []
    if isinstance(chain.get("winner"), dict) and "params" in chain["winner"]:
        rows.append({**chain["winner"], "stage": "winner", "status": "winner",
                     "export": chain.get("winner_export"), "onnx": chain.get("winner_onnx")})
    teacher = chain.get("teacher")
    if isinstance(teacher, dict):
        rows.append({**teacher, "stage": "teacher", "status": "teacher",
                     "export": chain.get("teacher_export"), "onnx": chain.get("teacher_onnx")})
    for s in chain.get("stages", []):
        m = s.get("measurement")
        if s.get("status") == "accepted" and isinstance(m, dict):
            rows.append({**m, "stage": s.get("stage"), "status": "accepted",
                         "export": s.get("export"), "onnx": s.get("onnx")})
    return rows


def onnx_int8_models(chain: dict) -> list[dict[str, Any]]:
    """The accepted ONNX Runtime int8 models of a chain (``onnx_export.OnnxInt8.to_dict()``:
    ``name``, ``source``, ``path``, ``bytes``, ``accuracy``, ``agreement``, ...)."""
    return [s["onnx_int8"] for s in chain.get("stages", [])
            if isinstance(s.get("onnx_int8"), dict) and s["onnx_int8"].get("status") == "accepted"]
