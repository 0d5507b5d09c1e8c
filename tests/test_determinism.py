"""``automl.determinism.deterministic``: the flags it sets and restores, and that a fresh
process (a new Ray worker's first fold training) does not pay torch's inductor import."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO

CHECK = """
import sys, torch
from automl.determinism import deterministic
assert not torch.are_deterministic_algorithms_enabled()
with deterministic():
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
assert not torch.are_deterministic_algorithms_enabled()
assert "torch._inductor.config" not in sys.modules, "inductor imported"
import torch._inductor.config as inductor  # once loaded, the public call keeps it in step
with deterministic():
    assert inductor.deterministic and torch.are_deterministic_algorithms_enabled()
assert not inductor.deterministic
print("ok")
"""


def test_deterministic_sets_and_restores_the_flags_without_importing_inductor():
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
