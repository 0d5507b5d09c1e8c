"""GPU check (``python -m benchmarks --only gpu``): the GPU paths, measured against the
fp32 CPU run of the same sweep. Not a test: it needs a CUDA device, which the test suite
never does. Without one it says so in one line and exits 0.

What it runs (the same small digits ResNet sweep each time, in a fresh ``automl search``
process, tracking and registry off):

1. ``cpu-fp32``: the reference, on CPUs, fp32, compression chain on the CPU;
2. ``cuda-bf16`` and ``cuda-fp16``: 6 trials with ``precision: bf16`` / ``fp16``
   (autocast; fp16 with a gradient scaler) and ``gpus_per_worker: 0.25``, so that 4 trials
   share the one device; cross-validation and the refit on the GPU too; the compression
   chain with ``compression.device: cuda`` (teacher retrain, distillation, fine-tuning on
   the GPU; quantization, ONNX and latency on the CPU);
3. ``cuda-ddp``: a data-parallel trial, ``workers_per_trial: 2`` with one whole GPU per
   worker (NCCL refuses two ranks on one device, and the spec requires whole GPUs for
   DDP workers): skipped, with that reason, on a machine with fewer than 2 GPUs.

Recorded per run: trials that ran at once, per-epoch training time (median over all
trial epochs, s), the device's memory peak (``nvidia-smi`` polled every 0.5 s, MiB; None
without ``nvidia-smi``), the winner's CV and test accuracy (and the difference to the
fp32 CPU run, in points), the compression chain's wall time and stages, and wall time.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from benchmarks._common import REPO, Result, Table

NAME = "gpu"
TITLE = "GPU check: mixed precision, shared GPU, data-parallel trial, compression on CUDA"
BASE = {
    "data": {"source": "digits", "test_size": 0.2, "val_size": 0.2, "seed": 0},
    "model": {"family": "resnet", "resnet": {"depth": 1, "stages": 2,
                                             "width": {"type": "categorical",
                                                       "choices": [16, 32]}}},
    "training": {"optimizer": "adam", "lr": {"type": "float", "low": 1e-3, "high": 1e-2,
                                             "log": True},
                 "batch_size": 128, "epochs": 6},
    "search": {"num_samples": 6, "sampler": "random", "seed": 0},
    "scheduler": {"type": "none"},
    "selection": {"top_k": 2, "cv_folds": 3},
    "compression": {"latency_repeats": 10, "stages": [
        {"stage": "distill", "student": {"family": "resnet", "width": 8, "stages": 2},
         "epochs": 10, "lr": 0.003, "max_accuracy_drop": 0.03},
        {"stage": "prune", "method": "structured", "pruning_ratio": 0.3,
         "fine_tune_epochs": 5, "max_accuracy_drop": 0.03},
        {"stage": "quantize", "method": "static", "calibration_batches": 4,
         "max_accuracy_drop": 0.03}]},
    "tracking": {"backend": "none", "tensorboard": False},
    "registry": {"enabled": False},
}
RUNS = {
    "cpu-fp32": {"resources": {"cpus_per_worker": 1}, "compression": {"device": "cpu"}},
    "cuda-bf16": {"resources": {"cpus_per_worker": 1, "gpus_per_worker": 0.25,
                                "precision": "bf16"}, "compression": {"device": "cuda"}},
    "cuda-fp16": {"resources": {"cpus_per_worker": 1, "gpus_per_worker": 0.25,
                                "precision": "fp16"}, "compression": {"device": "cuda"}},
    "cuda-ddp": {"resources": {"workers_per_trial": 2, "cpus_per_worker": 1,
                               "gpus_per_worker": 1}, "search": {"num_samples": 2},
                 "compression": {"enabled": False}},
}


def gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def no_gpu_line() -> str:
    """The one line printed without a CUDA device."""
    return ("gpu: no CUDA device visible (torch.cuda.is_available() is False); nothing "
            "measured; run this on a machine with a GPU")


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class MemoryPeak:
    """Peak of ``nvidia-smi``'s ``memory.used`` (MiB, all GPUs summed) while running."""

    def __init__(self, every_s: float = 0.5):
        self.every_s, self.peak, self.error = every_s, None, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            self.error = "nvidia-smi not found"
            return
        while not self._stop.is_set():
            try:
                out = subprocess.run([exe, "--query-gpu=memory.used", "--format=csv,noheader,"
                                      "nounits"], capture_output=True, text=True, timeout=10)
                used = sum(float(x) for x in out.stdout.split())
                self.peak = used if self.peak is None else max(self.peak, used)
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                self.error = f"{type(e).__name__}: {e}"
                return
            self._stop.wait(self.every_s)

    def __enter__(self) -> MemoryPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def _epoch_times(run_dir: Path) -> list[float]:
    path = run_dir / "trials.jsonl"
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] \
        if path.is_file() else []
    return [r["train_time_s"] for r in rows if "train_time_s" in r]


def run_sweep(label: str, spec: dict, work: Path, timeout_s: float) -> dict:
    """One ``automl search`` in a fresh process; its figures (module docstring)."""
    path = work / f"{label}.yaml"
    path.write_text(yaml.safe_dump({"name": label, **spec}, sort_keys=False))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    with MemoryPeak() as mem:
        proc = subprocess.run([sys.executable, "-m", "automl", "search", str(path), "--output",
                               str(work / "runs"), "--name", label, "--dashboard-port", "0"],
                              cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    wall = time.perf_counter() - t0
    run_dir = work / "runs" / label
    if proc.returncode != 0 or not (run_dir / "summary.json").is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise RuntimeError(f"{label}: automl search exited {proc.returncode}: "
                           + " | ".join(tail))
    summary = json.loads((run_dir / "summary.json").read_text())
    epochs = _epoch_times(run_dir)
    comp = summary.get("compression") or {}
    return {
        "label": label, "run_dir": str(run_dir), "wall_s": round(wall, 1),
        "trials": summary["trials"], "max_concurrent": summary["search"].get("max_concurrent"),
        "epoch_train_s_median": round(statistics.median(epochs), 4) if epochs else None,
        "epochs": len(epochs), "gpu_memory_peak_mib": mem.peak, "gpu_memory_error": mem.error,
        "cv_accuracy": (summary["winner"]["cv"].get("accuracy") or {}).get("mean"),
        "test_accuracy": summary["test"]["accuracy"],
        "compression": {"status": comp.get("status"), "wall_s": comp.get("wall_time_s"),
                        "timing_s": comp.get("timing_s"),
                        "stages": [(s["stage"], s["status"]) for s in comp.get("stages", [])],
                        "table": comp.get("table")} if comp else None,
    }


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE)
    n_gpus = gpu_count()
    if n_gpus == 0:
        res.status, res.reason = "unavailable", no_gpu_line()
        return res
    import torch

    work = Path(tempfile.mkdtemp(prefix="bench-gpu-"))
    base = _merge(BASE, {"training": {"epochs": 2}, "compression": {"stages": [
        {**BASE["compression"]["stages"][0], "epochs": 2},
        {**BASE["compression"]["stages"][1], "fine_tune_epochs": 1},
        BASE["compression"]["stages"][2]]}} if quick else {})
    res.settings = {"gpus": [torch.cuda.get_device_name(i) for i in range(n_gpus)],
                    "spec": base, "runs": RUNS, "work_dir": str(work)}
    res.seeds = {"sampler": "search.seed 0", "data split": "data.seed 0"}
    runs: dict[str, dict] = {}
    failures: list[str] = []
    for label, over in RUNS.items():
        if label == "cuda-ddp" and n_gpus < 2:
            res.notes.append(f"{label}: skipped: a data-parallel trial needs 2 GPUs here (one "
                             f"whole GPU per DDP worker; NCCL refuses two ranks on one device); "
                             f"this machine has {n_gpus}")
            continue
        try:
            runs[label] = run_sweep(label, _merge(base, over), work, 600 if quick else 1800)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            failures.append(f"{label}: {str(e)[:400]}")
    ref = runs.get("cpu-fp32")
    rows = []
    for label, r in runs.items():
        delta = (100 * (r["test_accuracy"] - ref["test_accuracy"])
                 if ref and label != "cpu-fp32" else None)
        comp = r["compression"] or {}
        rows.append([label, r["trials"]["total"], r["max_concurrent"],
                     r["epoch_train_s_median"], r["gpu_memory_peak_mib"], r["cv_accuracy"],
                     r["test_accuracy"], delta, comp.get("wall_s"), r["wall_s"]])
    res.tables.append(Table("Sweeps (digits ResNet, 6 trials)",
                            ["run", "trials", "at once", "median epoch train s",
                             "GPU memory peak MiB", "CV accuracy", "test accuracy",
                             "test points vs cpu-fp32", "compression s", "wall s"], rows))
    res.data = {"runs": runs, "failures": failures}
    if failures:
        res.status, res.reason = "failed", "; ".join(failures)
    return res
