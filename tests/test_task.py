"""The learning task, without Ray: how a table's target decides it, the spec's task rules
and defaults, regression data (loading, splits and folds on target quantiles), the
regression head and loss, the task's scores and the winner rule when smaller is better."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from automl.errors import DataError, SpecError
from automl.spec import DataSpec, Experiment
from automl.task import Classification, Regression, infer_task, task_of

MLP = {"model": {"family": "mlp"}}


# --------------------------------------------------------------------------- the task
@pytest.mark.parametrize("values, task", [
    (["a", "b", "a"], "classification"),
    ([True, False, True], "classification"),
    ([0, 1, 2, 1, 0], "classification"),
    ([0.0, 1.0, 2.0, 1.0], "classification"),  # whole numbers, few values: classes
    ([0.5, 1.25, 2.0], "regression"),  # a fractional part
    (list(range(25, 240)), "regression"),  # diabetes-like: 215 whole-number values
])
def test_a_tables_target_type_decides_the_task(values, task):
    got, why = infer_task(pd.Series(values))
    assert got == task and why


def test_the_spec_decides_the_task_where_it_can_and_fills_its_defaults():
    reg = Experiment.model_validate({**MLP, "data": {"source": "diabetes"}})
    assert reg.task == "regression" and reg.search.metric == "val_rmse"
    assert reg.search.mode == "min" and reg.selection.metric == "r2" and reg.training.loss == "mse"
    cls = Experiment.model_validate({})
    assert cls.task == "classification" and cls.search.metric == "val_accuracy"
    assert cls.selection.metric == "accuracy" and cls.training.loss == "cross_entropy"
    # a table without hints waits for its target; a regression metric is a hint
    table = {**MLP, "data": {"source": "csv", "path": "t.csv", "target": "y"}}
    assert Experiment.model_validate(table).task is None
    hinted = Experiment.model_validate({**table, "search": {"metric": "val_r2"}})
    assert hinted.task == "regression" and hinted.search.mode == "max"
    later = Experiment.model_validate(table).with_task("regression")
    assert later.search.metric == "val_rmse" and later.selection.metric == "r2"
    # defaults are copies: the shared default sections keep None
    assert Experiment.model_validate(table).search.metric is None


@pytest.mark.parametrize("spec, message", [
    ({"data": {"source": "diabetes"}, "search": {"metric": "val_accuracy"}},
     "search.metric: 'val_accuracy' is a classification metric, but the task is regression"),
    ({"data": {"source": "diabetes"}, "selection": {"metric": "f1_macro"}},
     "selection.metric: 'f1_macro' is a classification metric"),
    ({"data": {"source": "wine"}, "training": {"loss": "huber"}},
     "training.loss: 'huber' is a regression loss, but the task is classification"),
    ({"task": "regression", "data": {"source": "iris"}},
     "task: data.source 'iris' is classification data, not regression"),
    ({"data": {"source": "diabetes"}, "training": {"label_smoothing": 0.1}},
     "training.label_smoothing: smooths class labels"),
])
def test_choices_of_the_other_task_are_one_line_errors(spec, message, tmp_path):
    import yaml

    from automl.spec import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**MLP, **spec}))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_table_whose_target_contradicts_the_spec_says_which_task_it_made(tmp_path):
    exp = Experiment.model_validate({**MLP, "data": {"source": "csv", "path": "t.csv",
                                                     "target": "y"},
                                     "selection": {"metric": "accuracy"}})
    assert exp.task == "classification"
    table = Experiment.model_validate({**MLP, "data": {"source": "csv", "path": "t.csv",
                                                       "target": "y"}})
    with pytest.raises(SpecError, match="the data's target makes this a classification"):
        table.model_copy(update={"training": table.training.model_copy(
            update={"loss": "mse"})}).with_task("classification")


# --------------------------------------------------------------------------- data
def _csv(tmp_path, target) -> str:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=len(target)), "b": rng.normal(size=len(target)),
                          "y": target})
    path = tmp_path / "t.csv"
    frame.to_csv(path, index=False)
    return str(path)


def test_a_float_target_loads_as_regression_and_splits_on_its_quantiles(tmp_path):
    from automl.data import load_dataset, split_dataset
    from automl.selection import make_folds

    y = np.random.default_rng(1).gamma(2.0, 30.0, size=300)  # skewed, like a price
    data = load_dataset(DataSpec(source="csv", path=_csv(tmp_path, y), target="y"))
    assert data.task == "regression" and data.classes == () and data.y.dtype == np.float32
    assert "fractional" in data.task_reason and data.output_size == 1
    info = data.describe()
    assert info["task"] == "regression" and info["target"]["min"] == pytest.approx(y.min(), 1e-5)
    splits = split_dataset(data, DataSpec(source="csv", path="x", target="y"))
    assert splits.sizes() == {"train": 180, "val": 60, "test": 60}
    # stratified on deciles: every split holds the tail (the top 10% of values)
    top = data.y >= np.quantile(data.y, 0.9)
    for part in (splits.train, splits.val, splits.test):
        assert 0.07 <= top[part].mean() <= 0.13
    plan = make_folds(data.y, splits.pool, 5, 1, 0, task="regression")
    assert plan.n_folds == 5 and sorted(np.concatenate([v for _, v in plan.folds])).__len__() \
        == len(splits.pool)
    tail = [top[v].mean() for _, v in plan.folds]
    assert max(tail) - min(tail) < 0.06  # every fold sees the tail alike


def test_regression_targets_that_cannot_be_learned_are_one_line(tmp_path):
    from automl.data import load_dataset

    def load(values, task="regression"):
        return load_dataset(DataSpec(source="csv", path=_csv(tmp_path, values), target="y"),
                            task)

    with pytest.raises(DataError, match=r"holds 2 values that are not numbers \('high', 'unknown'\)"):
        load([1.5, 2.0, "high", 3.0, "unknown", 4.0])
    with pytest.raises(DataError, match="holds 1 infinite values"):
        load([1.5, 2.0, np.inf, 3.0])
    with pytest.raises(DataError, match="has one value"):
        load([2.0] * 6)
    assert load([1.5, 2.0, np.nan, 3.0]).cleaning["missing_target_rows"] == 1  # as classes


def test_bundled_diabetes_is_a_regression_table():
    from automl.data import load_dataset

    data = load_dataset(DataSpec(source="diabetes"))
    assert data.task == "regression" and data.frame.shape == (442, 10)
    assert data.y.min() == 25 and data.y.max() == 346


# --------------------------------------------------------------------------- model and loss
def test_the_regression_head_predicts_in_the_targets_units_and_the_loss_is_scale_free():
    torch.manual_seed(0)
    task = Regression()
    model = task.build({"family": "mlp", "width": 8}, (3,), 1)
    y = torch.tensor([100.0, 200.0, 300.0, 400.0])
    task.fit_head(model, y)
    assert model.y_mean.item() == pytest.approx(250.0) and model.y_std.item() == pytest.approx(
        111.8034, rel=1e-4)
    x = torch.randn(4, 3)
    with torch.no_grad():
        out = model(x)
        assert out.shape == (4, 1)
        assert torch.allclose(out, model.net(x) * model.y_std + model.y_mean)
    loss = task.loss("mse").bind(model)
    scaled = task.build({"family": "mlp", "width": 8}, (3,), 1)
    scaled.load_state_dict(model.state_dict())
    task.fit_head(scaled, y * 1000)  # the same data in other units
    with torch.no_grad():
        a = loss(out, y)
        b = task.loss("mse").bind(scaled)(scaled(x), y * 1000)
    assert float(a) == pytest.approx(float(b), rel=1e-4)
    assert task.loss("huber").bind(model)(out, y) <= a  # huber grows linearly past delta


def test_a_regression_mlp_learns_diabetes_in_process():
    """The training loop with a regression task: R² well above 0 on held-out rows."""
    from automl.data import fit_transform, load_dataset, split_dataset
    from automl.space import TrialConfig
    from automl.train import TrainState, fit, to_tensors

    data = load_dataset(DataSpec(source="diabetes"))
    splits = split_dataset(data, DataSpec(source="diabetes"))
    (X_tr, y_tr), (X_val, y_val) = fit_transform(data, splits.train, splits.val)
    cfg = TrialConfig(arch={"family": "mlp", "depth": 1, "width": 32}, optimizer="adam",
                      lr=3e-3, batch_size=32, epochs=40, weight_decay=1e-4, init="default",
                      task="regression", loss="mse")
    state = TrainState.create(cfg, X_tr.shape[1:], 1, len(y_tr))
    metrics = fit(state, to_tensors(X_tr, y_tr), to_tensors(X_val, y_val))
    assert metrics["val_r2"] > 0.2 and metrics["val_rmse"] < 72  # the target's std is 77
    assert metrics["val_mae"] < metrics["val_rmse"]
    ckpt = state.checkpoint()
    assert ckpt["config"]["task"] == "regression" and "y_mean" in str(ckpt["model"].keys())


# --------------------------------------------------------------------------- scores
def test_the_tasks_scores_are_scikit_learns():
    from sklearn import metrics as skm

    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=50), rng.normal(size=50)
    s = Regression().scores(y, pred)
    assert s["r2"] == pytest.approx(skm.r2_score(y, pred))
    assert s["rmse"] == pytest.approx(np.sqrt(np.mean((y - pred) ** 2)))
    assert s["mae"] == pytest.approx(np.mean(np.abs(y - pred)))
    labels = np.array([0, 1, 1, 0, 1, 0])
    proba = np.array([0.2, 0.9, 0.6, 0.4, 0.3, 0.1])
    two = Classification().scores(labels, (proba > 0.5).astype(int), 2,
                                  proba=np.stack([1 - proba, proba], 1))
    assert two["roc_auc"] == pytest.approx(skm.roc_auc_score(labels, proba))
    assert two["pr_auc"] == pytest.approx(skm.average_precision_score(labels, proba))
    assert "roc_auc" not in Classification().scores(labels, labels, 3)  # binary only
    assert task_of(None).name == "classification"
    with pytest.raises(ValueError, match="unknown task 'ranking'"):
        task_of("ranking")


def test_regression_folds_summarise_with_t_and_the_smallest_rmse_wins():
    from automl.selection._scores import choose_winner, summarize_folds

    folds = [{"scores": {"r2": r, "rmse": e, "mae": e * 0.8}, "rows": 30}
             for r, e in ((0.5, 50.0), (-0.2, 70.0), (0.4, 55.0))]
    summary = summarize_folds(folds, "regression")
    assert set(summary) == {"r2", "rmse", "mae"}
    assert summary["r2"]["interval"] == "t" and summary["r2"]["ci95"][0] < -0.2  # unbounded
    cands = [{"trial_id": "a", "mean": 52.0, "n_params": 900, "rank": 1},
             {"trial_id": "b", "mean": 49.0, "n_params": 5000, "rank": 2}]
    assert choose_winner(cands, 0.5, sign=-1)[0] == "b"  # RMSE: smaller is better
    assert choose_winner(cands, 5.0, sign=-1)[0] == "a"  # near-tied: the smaller model
    assert choose_winner(cands, 0.5)[0] == "a"  # larger is better


# --------------------------------------------------------------------------- review fixes
def test_pruning_with_distillation_fine_tunes_a_regression_model():
    """The prune stage's distillation fine-tune used the classification loss on (B, 1)
    outputs against float targets and failed."""
    from automl.compress._base import make_context
    from automl.compress.prune import PruneStage

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6)).astype(np.float32)
    y = (X[:, 0] * 30 + 100).astype(np.float32)
    task = Regression()
    model = task.build({"family": "mlp", "depth": 1, "width": 32}, (6,), 1)
    task.fit_head(model, torch.from_numpy(y))
    ctx = make_context((X[:80], y[:80]), (X[80:100], y[80:100]), (X[100:], y[100:]),
                       "/tmp/unused", task="regression", seed=0)
    out = PruneStage(pruning_ratio=0.3, fine_tune_epochs=2, distill_alpha=0.5).run(model, ctx)
    assert out.model is not None, out.skipped
    assert "distillation" in out.info["fine_tune_loss"]
    with torch.no_grad():
        assert out.model(torch.from_numpy(X[:4])).shape == (4, 1)


def test_a_regression_front_and_pick_minimise_rmse():
    from automl.selection._front import choose_on_front, front_axes

    exp = Experiment.model_validate({
        **MLP, "data": {"source": "diabetes"}, "selection": {"metric": "rmse", "pick": "best"},
        "search": {"objectives": [{"metric": "val_rmse"}, {"metric": "params"}]}})
    assert front_axes(exp)[0] == ("cv_rmse", "min", "cv:rmse")
    rows = [{"trial_id": t, "summary": {"rmse": {"mean": m}}, "n_params": n, "rank": i}
            for i, (t, m, n) in enumerate((("a", 60.0, 100), ("b", 50.0, 200)))]
    searched = {"a": {"params": 100}, "b": {"params": 200}}
    win, _, out = choose_on_front(exp, rows, searched, {"a", "b"})
    assert win == "b" and all(r["on_front"] for r in out)  # both: cheaper or better


def test_a_child_named_module_is_not_taken_for_a_wrapper():
    from automl.models import unwrap

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.module = torch.nn.Linear(3, 3)
            self.head = torch.nn.Linear(3, 2)

    net = Net()
    assert unwrap(net) is net
    ddp_like = torch.nn.DataParallel(net)
    assert unwrap(ddp_like) is net


def test_a_run_recorded_before_tasks_reads_as_classification(tmp_path):
    import yaml

    from automl.spec import load_run_spec

    spec = Experiment.model_validate({**MLP, "data": {"source": "csv", "path": "t.csv",
                                                      "target": "y"}}).to_dict()
    spec.pop("task")
    for section in ("search", "selection", "training"):  # as an old run wrote them
        spec[section] = {k: v for k, v in spec[section].items() if v is not None}
    spec["search"]["metric"], spec["selection"]["metric"] = "val_accuracy", "accuracy"
    spec["training"].pop("loss", None)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert load_run_spec(tmp_path).task == "classification"


def test_integer_labels_of_images_are_classes_however_many(tmp_path):
    from automl.data import load_dataset

    X = np.random.default_rng(0).random((300, 1, 4, 4)).astype(np.float32)
    np.savez(tmp_path / "img.npz", X=X, y=np.arange(300) % 100)  # 100 classes of 3
    data = load_dataset(DataSpec(source="npz", path=str(tmp_path / "img.npz")))
    assert data.task == "classification" and data.num_classes == 100


def test_api_arrays_with_text_labels_are_written_without_pickles(tmp_path):
    from automl.api import _with_data

    X = np.zeros((4, 2), dtype=np.float32)
    y = np.array(["cat", "dog", "cat", "dog"], dtype=object)  # as df["label"].to_numpy()
    section = _with_data({}, (X, y), None, tmp_path)
    from automl.data import load_dataset

    data = load_dataset(DataSpec(source="npz", path=section["path"]))
    assert data.classes == ("cat", "dog") and section["path"].startswith("/")
    with pytest.raises(DataError, match="X must be numeric"):
        _with_data({}, (np.array([["a", "b"]] * 4, dtype=object), y), None, tmp_path)
