"""Deterministic training and the record of what it depends on (the training layer's
part of ``automl reproduce``; see ``automl.reproduce``)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import platform
from collections.abc import Iterator
from typing import Any

PACKAGES = ("torch", "numpy", "scikit-learn", "scipy", "kornia", "ray", "optuna", "automl",
            "torchao", "onnxruntime", "onnx")
ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG",
            "CUDA_VISIBLE_DEVICES")


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """Deterministic algorithms for the duration (``warn_only``: an operation without a
    deterministic version warns instead of failing the run), cuDNN deterministic and not
    autotuned; the previous flags are restored afterwards."""
    import torch

    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2:]


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(device: str = "cpu") -> dict[str, Any]:
    """What this process trains with: package versions, torch's deterministic flags,
    thread counts, device (see module docstring). Call it where the training runs."""
    import torch

    dev: dict[str, Any] = {"type": device, "cpu": platform.processor() or platform.machine(),
                           "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if device.startswith("cuda") and torch.cuda.is_available():
        dev.update(name=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version())
    return {
        "python": platform.python_version(), "platform": platform.platform(),
        "packages": {p: _version(p) for p in PACKAGES},
        "torch_flags": {
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        },
        "threads": {"intra_op": torch.get_num_threads(),
                    "inter_op": torch.get_num_interop_threads()},
        "device": dev,
        "env": {k: os.environ.get(k) for k in ENV_VARS},
    }


def weights_sha256(state_dict: dict) -> str:
    """sha256 over a state_dict's keys, dtypes, shapes and raw bytes, in key order."""
    import torch

    h = hashlib.sha256()
    for key in sorted(state_dict):
        t = state_dict[key]
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu().contiguous()
            h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
