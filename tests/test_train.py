"""The training loop on real digits, checkpoints and safe loading."""

from __future__ import annotations

import pickle

import pytest
import torch

from automl.data import fit_transform, load_dataset, split_indices
from automl.space import TrialConfig
from automl.spec import DataSpec
from automl.train import TrainState, evaluate, fit, load_checkpoint, to_tensors


@pytest.fixture(scope="module")
def digits():
    data = load_dataset(DataSpec())
    s = split_indices(data.y, 0.2, 0.2, 0)
    (Xtr, ytr), (Xv, yv), (Xte, yte) = fit_transform(data, s.train, s.val, s.test)
    return data, s, to_tensors(Xtr, ytr), to_tensors(Xv, yv), to_tensors(Xte, yte)


def test_split_is_stratified_disjoint_and_fixed(digits):
    data, s, *_ = digits
    assert len(set(s.train) | set(s.val) | set(s.test)) == len(data.y) == 1797
    assert not set(s.train) & set(s.test) and not set(s.val) & set(s.test)
    again = split_indices(data.y, 0.2, 0.2, 0)
    assert (again.test == s.test).all()
    assert data.input_shape == (1, 8, 8) and data.num_classes == 10


def _cfg(**kw):
    base = dict(arch={"family": "resnet", "depth": 1, "width": 16, "stages": 2},
                optimizer="adam", lr=3e-3, batch_size=64, epochs=6, weight_decay=1e-4,
                init="kaiming", seed=0)
    return TrialConfig(**{**base, **kw})


def test_resnet_learns_digits_and_checkpoint_round_trips(digits, tmp_path):
    torch.set_num_threads(1)
    _, _, train, val, test = digits
    state = TrainState.create(_cfg(), (1, 8, 8), 10, len(train[1]))
    seen = []
    last = fit(state, train, val, on_epoch=lambda st, m: seen.append(m))
    assert [m["epoch"] for m in seen] == [1, 2, 3, 4, 5, 6]
    assert last["val_accuracy"] > 0.93
    assert seen[-1]["train_loss"] < seen[0]["train_loss"]
    path = tmp_path / "model.pt"
    torch.save(state.checkpoint(last), path)
    model, ckpt = load_checkpoint(path)
    assert ckpt["epoch"] == 6
    assert evaluate(model, *test)["accuracy"] == pytest.approx(evaluate(state.model, *test)["accuracy"])


def test_resume_from_checkpoint_continues_where_it_stopped(digits):
    torch.set_num_threads(1)
    _, _, train, val, _ = digits
    full = TrainState.create(_cfg(epochs=4), (1, 8, 8), 10, len(train[1]))
    fit(full, train, val)
    half = TrainState.create(_cfg(epochs=4), (1, 8, 8), 10, len(train[1]))
    fit(half, train, val, epochs=2)
    ckpt = half.checkpoint()
    resumed = TrainState.create(_cfg(epochs=4), (1, 8, 8), 10, len(train[1]))
    resumed.restore(ckpt)
    fit(resumed, train, val)
    for a, b in zip(full.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=1e-5)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_pickled_code_is_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": "automl.checkpoint/1", "payload": _Evil()}, path)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(path)


def test_macro_f1_is_scikit_learns_and_the_trial_path_does_not_import_it():
    """``macro_f1`` against ``f1_score(average="macro", zero_division=0)`` on random
    labels with absent and extra classes; and a fresh interpreter that imports the trial's
    code (``automl.search._trainable``) does not import scikit-learn (1.2 s per worker)."""
    import subprocess
    import sys

    import numpy as np
    from sklearn.metrics import f1_score

    from automl.train import macro_f1

    rng = np.random.default_rng(0)
    for _ in range(300):
        n, k = int(rng.integers(1, 80)), int(rng.integers(1, 12))
        y, pred = rng.integers(0, k, n), rng.integers(0, k + 3, n)
        want = f1_score(y, pred, average="macro", zero_division=0)
        assert macro_f1(torch.tensor(y), torch.tensor(pred)) == pytest.approx(want, abs=1e-12)
    assert macro_f1(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)) == 0.0
    code = ("import sys, automl.search._trainable; "
            "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
