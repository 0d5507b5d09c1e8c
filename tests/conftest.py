"""Shared fixtures: one Ray instance per test module that asks for it, sized and bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("WANDB_MODE", "offline")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance with 2 logical CPUs for the whole module."""
    import ray

    from automl import runtime

    if ray.is_initialized():
        ray.shutdown()
    handle = runtime.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    yield handle
    runtime.shutdown(handle)


def write_spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
