"""The Python API: ``automl.search(spec, *, model=..., data=..., name=...)``. Bad inputs
are one line each, before Ray starts; a real (tiny) run from a DataFrame returns a
:class:`automl.api.Result` whose summary, leaderboard, best config and model agree with
the run directory."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

import automl
from automl.errors import DataError, SpecError

TINY = {
    "name": "api-tiny",
    "model": {"family": "mlp", "mlp": {"depth": 1, "width": {"type": "categorical",
                                                             "choices": [16, 32]}}},
    "training": {"optimizer": "adam", "lr": 3e-3, "batch_size": 32,
                 "epochs": {"type": "int", "low": 4, "high": 8, "step": 4}},
    "search": {"num_samples": 3, "seed": 0, "sampler": "random"},
    "scheduler": {"grace_period": 4, "reduction_factor": 2, "max_epochs": 8},
    "selection": {"top_k": 2, "cv_folds": 2},
    "tracking": {"backend": "none", "tensorboard": False},
    "resources": {"num_cpus": 2},
}


def build_here(input_shape, output_size):  # importable from this test module
    from torch import nn

    return nn.Linear(int(np.prod(input_shape)), output_size)


def _ray_started() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


@pytest.mark.parametrize("kwargs, error, message", [
    ({"data": [[1, 2], [3, 4]]}, SpecError,
     "data: expected (X, y) arrays or a pandas DataFrame, got list"),
    ({"data": (np.zeros((5, 2)), np.zeros(4))}, DataError, "X has 5 rows but y has shape (4,)"),
    ({"data": pd.DataFrame({"a": [1.0, 2.0]})}, SpecError,
     "a DataFrame needs the name of its target column"),
    ({"model": "mlp"}, SpecError, "model: expected a model factory (a callable), got str"),
    ({"model": lambda shape, n: None}, SpecError,
     "is defined in a nested function or lambda, which Ray's workers cannot import"),
])
def test_bad_arguments_are_one_line_before_ray_starts(kwargs, error, message, tmp_path):
    with pytest.raises(error) as info:
        automl.search(TINY, output=str(tmp_path), **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not _ray_started() and not list(tmp_path.glob("api-tiny*"))


def test_a_factory_from_main_or_a_nested_function_is_refused_with_the_fix(tmp_path):
    def nested(shape, n):
        return None

    main = type(build_here)(build_here.__code__, {}, "build")
    main.__module__, main.__qualname__ = "__main__", "build"
    for fn, where in ((main, "a notebook's or script's __main__"),
                      (nested, "a nested function or lambda")):
        with pytest.raises(SpecError) as info:
            automl.search(TINY, model=fn, output=str(tmp_path))
        assert where in str(info.value) and "move it to a module" in str(info.value)
    with pytest.raises(SpecError, match=r"spec: search.num_samples: .*got 'many'"):
        automl.search({**TINY, "search": {"num_samples": "many"}}, output=str(tmp_path))
    assert not _ray_started()


def test_an_importable_factory_becomes_the_family(tmp_path):
    from automl.api import _with_model

    section = _with_model({"family": "mlp"}, build_here)
    assert section["family"] == "test_api:build_here"
    named = {"family": {"type": "categorical", "choices": ["mlp", "test_api:build_here"]}}
    assert _with_model(named, build_here) == named  # already a choice: kept


@pytest.mark.timeout(600)
def test_a_dataframe_search_returns_the_runs_result(tmp_path):
    from sklearn.datasets import load_diabetes

    frame = load_diabetes(as_frame=True, scaled=False).frame
    spec = {**TINY, "name": "api-frame", "compression": {"enabled": False},
            "registry": {"enabled": False}}
    result = automl.search(spec, data=frame, target="target", output=str(tmp_path),
                           name="r", num_samples=3)
    assert result.run_dir == tmp_path / "r"
    s = result.summary
    assert s["data"]["task"] == "regression" and s["trials"]["total"] == 3
    assert "task   regression" not in s  # the line is printed, the summary holds the task
    inputs = list((tmp_path / ".inputs").glob("*.parquet"))
    assert len(inputs) == 1 and s["data"]["name"] == str(inputs[0].resolve())
    board = result.leaderboard
    assert isinstance(board, pd.DataFrame) and "val_rmse" in board.columns
    assert "model.mlp.width" in board.columns and len(board) == 2
    assert result.best_config == s["winner"]["config"]
    model = result.load_model()
    x = np.zeros((2, s["data"]["model_input_shape"][0]), dtype=np.float32)
    import torch

    with torch.no_grad():
        out = model(torch.from_numpy(x))
    assert out.shape == (2, 1) and 25 < float(out.mean()) < 346  # the target's units
    # the same frame again names the same input file (by content), written once
    from automl.api import _with_data

    again = _with_data({"seed": 1}, frame, "target", tmp_path)
    assert again == {"seed": 1, "source": "parquet", "path": str(inputs[0].resolve()),
                     "target": "target"}
    assert len(list((tmp_path / ".inputs").glob("*.parquet"))) == 1
