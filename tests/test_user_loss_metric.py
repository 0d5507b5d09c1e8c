"""The user's own training loss and search metric, as import paths in the spec
(``training.loss: mylosses:smooth_l1``, ``search.metric: mylosses:within_10``): a real
regression sweep trains with the loss and searches on the metric (its direction from the
function's ``greater_is_better``); a wrong path, a wrong signature or a metric that does
not say its direction is one line and exit 2, before Ray starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

MODULE = '''
import numpy as np
import torch

CALLS = []


def smooth_l1(outputs, targets):
    """(B, 1) predictions in the target's units against (B,) targets."""
    return torch.nn.functional.smooth_l1_loss(outputs.reshape(-1) / 50.0, targets / 50.0)


def within_10(y_true, y_pred):
    """Share of validation rows predicted within 10 of the target."""
    return float(np.mean(np.abs(np.asarray(y_true) - np.asarray(y_pred)) <= 10.0))


within_10.greater_is_better = True


def no_direction(y_true, y_pred):
    return 0.0


def one_arg(outputs):
    return outputs.sum()


class HuberLike(torch.nn.Module):
    def forward(self, outputs, targets):
        return (outputs.reshape(-1) - targets).abs().mean()


def tiny(input_shape, output_size, width=8):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(np.prod(input_shape)),
                                                                   width),
                               torch.nn.ReLU(), torch.nn.Linear(width, output_size))
'''

SPEC = """
name: own-loss
data: {source: diabetes, seed: 0}
model: {family: mlp, mlp: {depth: 1, width: {type: categorical, choices: [16, 32]}}}
training: {optimizer: adam, lr: {type: float, low: 1e-3, high: 1e-2, log: true}, batch_size: 32,
           epochs: 20, loss: LOSS}
search: {num_samples: 3, seed: 0, sampler: random, metric: METRIC}
scheduler: {type: none}
selection: {top_k: 1, cv_folds: 2}
tracking: {backend: none, tensorboard: false}
registry: {enabled: false}
resources: {num_cpus: 2}
"""


def _spec(tmp_path, loss="mylosses:smooth_l1", metric="mylosses:within_10"):
    (tmp_path / "mylosses.py").write_text(textwrap.dedent(MODULE))
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("LOSS", loss).replace("METRIC", metric))
    return path


def _automl(args, cwd, timeout=600):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, "-m", "automl", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("loss, metric, message", [
    ("mylosses:nothing", "val_rmse", "has no 'nothing' for mylosses:nothing (its callables: "),
    ("mylosses:one_arg", "val_rmse",
     "training.loss: mylosses:one_arg takes (outputs); it is called as one_arg(outputs, "
     "targets)"),
    ("mse", "mylosses:no_direction",
     "search.metric: mylosses:no_direction does not say whether a larger value is better"),
    ("mse", "nomodule:metric", "search.metric: cannot import 'nomodule'"),
    ("my-losses:x", "val_rmse", "is not an import path of the form package.module:function"),
    ("mylosses:HuberLike", "val_rmse", "training.loss: mylosses:HuberLike is a class"),
])
def test_a_bad_loss_or_metric_is_one_line_before_ray_starts(tmp_path, loss, metric, message):
    spec = _spec(tmp_path, loss, metric)
    out = _automl(["search", str(spec), "--output", str(tmp_path / "runs")], tmp_path,
                  timeout=120)
    err = out.stderr.strip()
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


@pytest.mark.timeout(600)
def test_a_sweep_trains_with_the_users_loss_and_searches_on_the_users_metric(tmp_path):
    spec = _spec(tmp_path)
    out = _automl(["search", str(spec), "--output", str(tmp_path / "runs"),
                   "--dashboard-port", "0"], tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = tmp_path / "runs" / "own-loss"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["metric"] == "mylosses:within_10" and summary["mode"] == "max"
    trials = json.loads((run / "trials.json").read_text())
    assert len(trials) == 3
    for t in trials:  # every epoch reported the user's metric, a share of rows
        assert all(0.0 <= row["mylosses:within_10"] <= 1.0 for row in t["history"])
        assert t["config"]["loss"] == "mylosses:smooth_l1"
    best = max(t["metrics"]["mylosses:within_10"] for t in trials)
    assert summary["best"]["val"]["mylosses:within_10"] == pytest.approx(best)
    record = json.loads((run / "user_models.json").read_text())
    assert set(record) == {"mylosses:smooth_l1", "mylosses:within_10"}
    assert summary["test"]["r2"] > 0.0  # the loss trained a model that learned


def test_a_user_family_with_a_user_metric_and_loss_validates(tmp_path):
    """The factory is probed; the loss and the metric are checked, not called as factories."""
    spec = _spec(tmp_path)
    text = spec.read_text().replace(
        "model: {family: mlp, mlp: {depth: 1, width: {type: categorical, choices: [16, 32]}}}",
        'model: {family: "mylosses:tiny", "mylosses:tiny": {width: {type: categorical, '
        'choices: [8, 16]}}}')
    spec.write_text(text)
    out = _automl(["validate", str(spec)], tmp_path, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "mode: max" in out.stdout  # the metric's greater_is_better, in the resolved spec
