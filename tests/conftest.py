"""Shared fixtures: one Ray instance per test module that asks for it, sized and bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("WANDB_MODE", "offline")
# torch's OpenMP threads wait for each other by spinning (libgomp's default): with another
# process on one of 2 cores, a 2-thread training of a small digits ResNet took 25-160 s
# against 0.6-1.2 s with passive waits (and 0.6 s either way on an idle machine). Set
# before torch loads libgomp; the job subprocesses and Ray's workers inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance with 2 logical CPUs for the whole module."""
    import ray

    from automl import cluster as runtime

    if ray.is_initialized():
        ray.shutdown()
    handle = runtime.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    yield handle
    runtime.shutdown(handle)


def write_spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """End the process once pytest is done (reports printed, exit status final) without
    Python's interpreter finalization: 1 of about 8 full runs here segfaulted *there*, after
    "387 passed" was printed (native libraries in this process, Ray's driver threads among
    them, torn down in an order they do not expect), turning a green run into exit 139.
    The exit status is pytest's own, so a failing test still fails the run."""
    if _EXIT_STATUS:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])


def assert_self_contained(html: str) -> None:
    """A report page loads nothing: plotly.js is inline (one ``<script>`` with it, the
    figures' own scripts), no ``<script src>``, stylesheet link or remote image."""
    import re

    assert "Plotly" in html and not re.search(r"<script[^>]*\bsrc=", html)
    assert "<link" not in html and not re.search(r"<img[^>]*src=\"https?:", html)


def spy_sampler(answer=None):
    """An Optuna ``RandomSampler`` (seed 1) that records the trial numbers it was asked to
    sample for (``.asked``) and told of (``.told``); it answers ``answer`` when given."""
    import optuna

    class Spy(optuna.samplers.RandomSampler):
        def __init__(self):
            super().__init__(seed=1)
            self.asked: set[int] = set()
            self.told: list[int] = []

        def sample_independent(self, study, trial, param_name, param_distribution):
            self.asked.add(trial.number)
            if answer is not None:
                return answer
            return super().sample_independent(study, trial, param_name, param_distribution)

        def after_trial(self, study, trial, state, values):
            self.told.append(trial.number)

    return Spy()
