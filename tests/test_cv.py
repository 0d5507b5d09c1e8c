"""Cross-validated selection: folds, tiny classes, scores and CI, the winner rule, a tiny
real CV on Ray (2 candidates x 3 folds), fold halving and the winner's refit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import write_spec
from scipy import stats

from automl.data import Dataset, load_dataset, split_indices
from automl.errors import DataError
from automl.search import TrialRecord
from automl.selection import (
    CVResult,
    choose_winner,
    classification_scores,
    cross_validate,
    fit_and_score,
    make_folds,
    print_cv_table,
    refit_and_test,
    summarize,
)
from automl.selection._scores import summarize_folds
from automl.spec import CV_METRICS, DataSpec, load_spec


def test_folds_are_stratified_disjoint_seeded_and_never_touch_test():
    y = np.arange(200) % 4
    s = split_indices(y, 0.2, 0.2, seed=0)
    plan = make_folds(y, s.pool, 5, n_repeats=2, seed=3)
    assert len(plan.folds) == 10 and plan.n_folds == 5
    for r in range(2):
        vals = [va for _, va in plan.folds[r * 5 : r * 5 + 5]]
        assert sorted(np.concatenate(vals).tolist()) == s.pool.tolist()
    for tr, va in plan.folds:
        assert not set(tr) & set(va) and not (set(tr) | set(va)) & set(s.test)
        assert np.bincount(y[va], minlength=4).tolist() == [8, 8, 8, 8]
    again = make_folds(y, s.pool, 5, n_repeats=2, seed=3)
    assert all((a[1] == b[1]).all() for a, b in zip(plan.folds, again.folds, strict=True))
    assert not (plan.folds[0][1] == plan.folds[5][1]).all()  # a repeat reshuffles


def test_a_class_smaller_than_the_folds_is_named():
    y = np.array([0] * 20 + [1] * 20 + [2] * 3)
    classes = ("cat", "dog", "axolotl")
    with pytest.raises(DataError, match=r"selection\.cv_folds: class 'axolotl' has 3 training "
                                        r"rows, fewer than the 5 cross-validation folds.*"
                                        r"lower selection\.cv_folds to 3"):
        make_folds(y, np.arange(len(y)), 5, classes=classes)
    plan = make_folds(y, np.arange(len(y)), 5, allow_fewer=True, classes=classes)
    assert plan.n_folds == 3 and len(plan.folds) == 3
    assert plan.warnings == ("class 'axolotl' has 3 training rows: cross-validating with 3 "
                             "folds instead of 5",)
    with pytest.raises(DataError, match=r"class 'axolotl' has 1 training row, .*add rows"):
        make_folds(y[:41], np.arange(41), 5, allow_fewer=True, classes=classes)


def test_a_class_too_small_to_split_is_named():
    y = np.array([0] * 30 + [1] * 30 + [2])
    with pytest.raises(DataError, match=r"class 'rare' has 1 rows"):
        split_indices(y, 0.2, 0.2, 0, classes=("a", "b", "rare"))


def test_scores_summary_and_confidence_interval():
    y_true = np.array([0, 0, 0, 0, 1, 1, 2, 2])
    y_pred = np.array([0, 0, 0, 1, 1, 1, 2, 0])
    s = classification_scores(y_true, y_pred, 4)  # label 3 never occurs: macro over 4
    assert s["accuracy"] == pytest.approx(6 / 8)
    assert s["balanced_accuracy"] == pytest.approx((3 / 4 + 1 + 1 / 2) / 3)
    assert s["recall_macro"] == pytest.approx((3 / 4 + 1 + 1 / 2 + 0) / 4)
    summ = summarize([0.90, 0.92, 0.94])
    half = stats.t.ppf(0.975, 2) * 0.02 / math.sqrt(3)
    assert summ["mean"] == pytest.approx(0.92) and summ["std"] == pytest.approx(0.02)
    assert summ["ci95"] == pytest.approx([0.92 - half, 0.92 + half]) and summ["interval"] == "t"
    assert summarize([0.5]) == {"mean": 0.5, "std": None, "ci95": None, "n": 1,
                                "interval": "t"}


def _folds(accuracies, rows):
    return [{"fold": i + 1, "repeat": 1, "rows": rows,
             "scores": dict.fromkeys(CV_METRICS, a)} for i, a in enumerate(accuracies)]


def test_wilson_interval_matches_the_textbook_values():
    from automl.selection._scores import wilson_interval

    z = stats.norm.ppf(0.975)
    assert wilson_interval(0.81, 100, z) == pytest.approx([0.7222, 0.8749], abs=1e-4)
    assert wilson_interval(0.0, 10, z) == pytest.approx([0.0, 0.2775], abs=1e-4)
    assert wilson_interval(1.0, 10, z) == pytest.approx([0.7225, 1.0], abs=1e-4)
    with pytest.raises(ValueError, match="0 <= p <= 1"):
        wilson_interval(1.2, 10, z)


def test_cv_intervals_of_fractions_stay_in_the_unit_range_and_say_which_they_are():
    from automl.selection._scores import wilson_interval

    # issue 45 item 5: two folds of 140 rows (Student t gave 0.047-1.681)
    summ = summarize_folds(_folds([0.9283, 0.7997], 140))["accuracy"]
    lo, hi = summ["ci95"]
    assert summ["interval"] == "wilson" and 0.0 <= lo < summ["mean"] < hi <= 1.0
    assert hi - lo > 0.5  # two folds that disagree by 13 points: still wide, not falsely sure
    # folds that agree within the rows' sampling noise: Wilson on all 420 held-out rows
    summ = summarize_folds(_folds([0.90, 0.905, 0.895], 140))["accuracy"]
    assert summ["n_eff"] == 420 and summ["ci95"] == pytest.approx(
        wilson_interval(0.9, 420, stats.norm.ppf(0.975)))
    # every fold perfect: the interval ends at exactly 1, below it by the rows' noise
    summ = summarize_folds(_folds([1.0, 1.0, 1.0], 50))["f1_macro"]
    assert summ["ci95"][1] == 1.0 and 0.97 < summ["ci95"][0] < 1.0
    # a collapsed fold widens the interval, which never leaves [0, 1]
    summ = summarize_folds(_folds([0.8, 0.1, 0.85], 100))["accuracy"]
    assert 0.0 <= summ["ci95"][0] < 0.3 and 0.9 < summ["ci95"][1] <= 1.0
    # an older cv.json's folds without rows: the folds' spread alone
    summ = summarize_folds([{k: v for k, v in f.items() if k != "rows"}
                            for f in _folds([0.9, 0.92, 0.94], 100)])["accuracy"]
    assert 0.0 <= summ["ci95"][0] < 0.92 < summ["ci95"][1] <= 1.0


def test_the_cv_table_prints_intervals_in_brackets_and_names_them():
    from rich.console import Console

    old = {"metric": "accuracy", "plan": {"n_folds": 2, "n_repeats": 1}, "winner": "a",
           "reason": "best", "compute": {"fold_trainings": 2, "fold_epochs": 2,
                                         "train_time_s": 1.0, "wall_time_s": 1.0},
           "candidates": [{"trial_id": "a", "rank": 1, "config": {}, "params": {},
                           "search_score": 0.3, "n_params": 10, "status": "winner",
                           "folds": [{"fold": 1, "repeat": 1, "scores": {"accuracy": 0.1}}],
                           "summary": {"accuracy": {"mean": 0.197, "std": 0.137,
                                                    "ci95": [-1.034, 1.428], "n": 2}}}]}
    console = Console(record=True, width=200)
    print_cv_table(console, CVResult.from_dict(old))  # a cv.json written before Wilson
    text = console.export_text()
    assert "[-1.034, 1.428]" in text and "-1.034-1.428" not in text
    assert "95% CI: Student's t" in text
    new = CVResult.from_dict({**old, "candidates": [{**old["candidates"][0], "summary":
                                                     summarize_folds(_folds([0.3, 0.1], 40))}]})
    narrow = Console(record=True, width=80)  # a log or a pipe: every interval stays whole
    print_cv_table(narrow, new)
    ci = new.candidates[0].summary["accuracy"]["ci95"]
    text = narrow.export_text()
    assert f"[{ci[0]:.3f}, {ci[1]:.3f}]" in text and "95% CI: Wilson score interval" in text
    assert "…" not in text.split("95% CI:")[0]


def test_a_fold_that_predicted_one_class_is_flagged_in_the_cv_output():
    from rich.console import Console

    from automl.selection._scores import collapsed_folds
    from automl.selection._tasks import with_scores

    # issue 45 item 9: a fold at exactly 0.1000 with 10 balanced classes is one class
    y = np.repeat(np.arange(10), 4)
    result = with_scores({"y_pred": [3] * 40, "n_eval": 40}, y, 10)
    assert result["predicted_classes"] == 1 and result["scores"]["accuracy"] == 0.1
    folds = [{"fold": 1, "repeat": 1, "rows": 40, "predicted_classes": 10,
              "scores": {"accuracy": 0.8}},
             {"fold": 2, "repeat": 1, "rows": 40, "predicted_classes": 1,
              "scores": {"accuracy": 0.1}},
             {"fold": 3, "repeat": 1, "scores": {"accuracy": 0.1}}]  # an older run: not judged
    (line,) = collapsed_folds([{"trial_id": "7", "folds": folds}], 10)
    assert line.startswith("trial 7 fold 2 predicted one class for all 40 held-out rows "
                           "(accuracy 0.1000, that class's share)")
    assert collapsed_folds([{"trial_id": "7", "folds": folds}], 1) == []
    cv = CVResult("accuracy", {"n_folds": 2, "n_repeats": 1}, [], "7", "best",
                  {"fold_trainings": 2, "fold_epochs": 2, "train_time_s": 1.0,
                   "wall_time_s": 1.0}, warnings=[line])
    console = Console(record=True, width=300)
    print_cv_table(console, cv)
    assert f"warning: {line}" in console.export_text()


def test_near_ties_go_to_the_smaller_model():
    cands = [
        {"trial_id": "big", "mean": 0.975, "n_params": 90_000, "rank": 1},
        {"trial_id": "small", "mean": 0.974, "n_params": 5_000, "rank": 2},
        {"trial_id": "tiny", "mean": 0.960, "n_params": 1_000, "rank": 3},
    ]
    winner, reason = choose_winner(cands, tolerance=0.002)
    assert winner == "small"
    assert "within 0.002 of the best (0.9750, trial big)" in reason and "5,000 vs 90,000" in reason
    winner, reason = choose_winner(cands, tolerance=0.0005)
    assert winner == "big" and "0.0010 ahead" in reason


def test_fit_and_score_fits_preprocessing_on_the_fold_training_rows_only(monkeypatch):
    import automl.data._preprocess as pre_mod

    data = load_dataset(DataSpec(source="wine"))
    s = split_indices(data.y, 0.2, 0.2, 0)
    train, val = make_folds(data.y, s.pool, 3, seed=0).folds[1]
    seen = []
    real = pre_mod.fit_preprocessor

    def spy(d, idx, impute=None):
        fitted = real(d, idx, impute)
        seen.append((np.asarray(idx).copy(), fitted))
        return fitted

    monkeypatch.setattr(pre_mod, "fit_preprocessor", spy)
    cfg = {"arch": {"family": "mlp", "depth": 1, "width": 16}, "optimizer": "adam", "lr": 1e-2,
           "batch_size": 32, "epochs": 2, "weight_decay": 0.0, "init": "default"}
    out = fit_and_score(data, cfg, train, val)
    (idx, fitted), = seen
    assert idx.tolist() == train.tolist()
    scaler = fitted.named_transformers_["num"].named_steps["scale"]
    assert np.allclose(scaler.mean_, data.frame.iloc[train].to_numpy().mean(axis=0))
    assert out["n_train"] == len(train) and out["n_eval"] == len(val)



def test_a_fold_task_trains_and_predicts_the_driver_scores_and_no_scikit_learn_is_imported(
        tmp_path):
    """``with_scores(fit_predict(...))`` is ``fit_and_score(...)`` (deterministic training:
    same scores, loss and checkpoint metrics); and a fresh interpreter that unpickles an
    image dataset and runs a fold task's code imports neither scikit-learn, SciPy nor
    pandas (about 1 s of each new fold worker's start)."""
    import pickle
    import subprocess
    import sys

    from automl.selection import fit_predict, with_scores

    data = load_dataset(DataSpec(source="digits"))
    s = split_indices(data.y, 0.2, 0.2, 0)
    train, val = make_folds(data.y, s.pool, 3, seed=0).folds[0]
    cfg = {"arch": {"family": "mlp", "depth": 1, "width": 16}, "optimizer": "adam",
           "lr": 1e-2, "batch_size": 64, "epochs": 1, "weight_decay": 0.0, "init": "default"}
    whole = fit_and_score(data, cfg, train, val, keep_model=True)
    parts = fit_predict(data, cfg, train, val, keep_model=True)
    assert "scores" not in parts and parts["checkpoint"]["metrics"] == {"loss": parts["loss"]}
    again = with_scores(parts, data.y[val], data.num_classes, keep_pred=True)
    assert again["scores"] == whole["scores"] and again["loss"] == whole["loss"]
    assert again["checkpoint"]["metrics"] == whole["checkpoint"]["metrics"] == {
        **whole["scores"], "loss": whole["loss"]}
    assert again["y_pred"] == whole["y_pred"]
    assert "y_pred" not in with_scores(parts, data.y[val], data.num_classes)
    path = tmp_path / "data.pkl"
    path.write_bytes(pickle.dumps((data, cfg, train, val)))
    code = ("import pickle, sys\n"
            f"data, cfg, train, val = pickle.loads(open({str(path)!r}, 'rb').read())\n"
            "from automl.selection._tasks import fit_predict, warm_up\n"
            "warm_up()\n"
            "out = fit_predict(data, cfg, train, val)\n"
            "assert len(out['y_pred']) == len(val)\n"
            "print(sorted(m for m in ('sklearn', 'scipy', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --------------------------------------------------------------------------- on Ray
SPEC = """
name: cv
model: {family: resnet, resnet: {depth: 1, width: 8, stages: 2}}
training: {optimizer: adam, batch_size: 64, epochs: 2}
selection: {top_k: 2, cv_folds: 3, metric: balanced_accuracy, halving_margin: 0.05}
resources: {cpus_per_worker: 1}
"""


def _candidate(trial_id: str, lr: float, epochs: int, width: int = 8) -> TrialRecord:
    cfg = {"arch": {"family": "resnet", "depth": 1, "width": width, "stages": 2},
           "optimizer": "adam", "lr": lr, "batch_size": 64, "epochs": epochs,
           "weight_decay": 0.0, "init": "default", "seed": 0}
    return TrialRecord(trial_id=trial_id, params={"training.lr": lr}, config=cfg,
                       end_state="completed", epochs_run=epochs, target_epochs=epochs,
                       metrics={"val_accuracy": 0.9})


@pytest.fixture(scope="module")
def digits():
    data = load_dataset(DataSpec())
    return data, split_indices(data.y, 0.2, 0.2, 0)


def test_cross_validation_on_ray_scores_every_fold_and_names_the_winner(
        ray_cluster, digits, tmp_path):
    data, splits = digits
    exp = load_spec(write_spec(tmp_path, SPEC))
    good, bad = _candidate("good", 1e-2, 2), _candidate("bad", 1e-6, 1, width=16)
    log = tmp_path / "cv_folds.jsonl"
    cv = cross_validate(exp, data, splits.pool, [bad, good], folds_log=log)
    assert cv.winner == "good" and cv.reason.startswith("balanced_accuracy: best CV mean")
    # a driver killed after two fold trainings (mid-write of the third): the resumed
    # cross-validation trains only the four others, and gets the same table
    lines = log.read_text().splitlines()
    assert len(lines) == 6
    log.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])
    again = cross_validate(exp, data, splits.pool, [bad, good], folds_log=log)
    assert len(log.read_text().splitlines()) == 2 + 1 + 4  # kept, torn, trained again
    def scores(result):
        return [[f["scores"] for f in c.folds] for c in result.candidates]

    assert scores(again) == scores(cv) and again.winner == cv.winner  # training is seeded
    assert cv.plan["sizes"] == [[958, 479]] * 3
    for c in cv.candidates:
        assert [f["fold"] for f in c.folds] == [1, 2, 3]
        folds = [f["scores"]["balanced_accuracy"] for f in c.folds]
        summ = c.summary["balanced_accuracy"]
        assert summ["mean"] == pytest.approx(np.mean(folds)) and summ["n"] == 3
        assert summ["ci95"][0] <= summ["mean"] <= summ["ci95"][1]
    by_id = {c.trial_id: c for c in cv.candidates}
    accuracy = {k: c.summary["accuracy"]["mean"] for k, c in by_id.items()}
    assert accuracy["good"] > 0.6 > accuracy["bad"]
    assert by_id["bad"].n_params > by_id["good"].n_params
    assert cv.compute["fold_trainings"] == 6 and cv.compute["fold_epochs"] == 3 * (2 + 1)
    assert cv.halving is None and cv.to_dict()["candidates"][1]["status"] == "winner"

    final = refit_and_test(exp, data, splits, by_id["good"].config)
    matrix = np.array(final["confusion_matrix"]["matrix"])
    assert matrix.shape == (10, 10) and matrix.sum() == len(splits.test) == 360
    assert final["test"]["accuracy"] == pytest.approx(np.trace(matrix) / 360)
    assert final["test"]["train_rows"] == len(splits.pool) == 1437
    assert final["checkpoint"]["epoch"] == 2 and final["checkpoint"]["num_classes"] == 10


def test_fold_halving_skips_the_folds_of_candidates_out_of_reach(ray_cluster, digits, tmp_path):
    data, splits = digits
    exp = load_spec(write_spec(tmp_path, SPEC), {"selection.fold_halving": True})
    good, bad = _candidate("good", 1e-2, 2), _candidate("bad", 1e-6, 1)
    cv = cross_validate(exp, data, splits.pool, [bad, good])
    by_id = {c.trial_id: c for c in cv.candidates}
    assert len(by_id["good"].folds) == 3 and len(by_id["bad"].folds) == 1
    assert by_id["bad"].status == "dropped after fold 1" and cv.winner == "good"
    h = cv.halving
    assert h["dropped"] == ["bad"] and h["fold1_leader"] == "good"
    assert h["fold_trainings_skipped"] == 2 and h["fold_epochs_skipped"] == 2
    assert cv.compute["fold_trainings"] == 4 and cv.compute["fold_epochs"] == 7
    assert h["epochs_saved_fraction"] == pytest.approx(2 / 9, abs=1e-4)
    assert h["winner_is_fold1_leader"] is True and h["train_time_s_saved_est"] > 0
    assert h["speculative_discarded"] <= 2  # run in the slot that waited for fold 1


def test_cross_validation_refuses_a_class_smaller_than_the_folds(tmp_path):
    y = np.array([0] * 30 + [1] * 30 + [2] * 4)
    X = np.random.default_rng(0).random((len(y), 1, 4, 4)).astype(np.float32)
    data = Dataset("small", X, y, ("a", "b", "c"), "image")
    exp = load_spec(write_spec(tmp_path, SPEC), {"selection.cv_folds": 5})
    with pytest.raises(DataError, match=r"class 'c' has 4 training rows, fewer than the 5"):
        cross_validate(exp, data, np.arange(len(y)), [_candidate("a", 1e-2, 1)])


def test_the_sweeps_tail_readies_fold_workers_only_in_slots_no_trial_waits_for(ray_cluster,
                                                                               tmp_path):
    import os

    import ray

    from automl.search._ledger import SweepView
    from automl.selection import WarmFoldWorkers

    exp = load_spec(write_spec(tmp_path, SPEC))
    warm = WarmFoldWorkers(exp.resources, slots=2)

    def view(done, running, total=10):
        return SweepView("val_accuracy", "max", total, running, {"completed": done}, None,
                         None, 0, 0.0)

    warm.finish(None, view(done=8, running=1))  # one trial still to start: it takes the slot
    assert warm.sent == 0
    warm.finish(None, view(done=9, running=1))  # every trial started, one slot free
    assert warm.sent == 1
    warm.finish(None, view(done=10, running=0))
    warm.finish(None, view(done=10, running=0))
    assert warm.sent == 2  # never more than the slots
    pids = ray.get(warm._refs, timeout=120)
    assert len(pids) == 2 and os.getpid() not in pids  # ran in Ray workers
    warm.close(view(done=10, running=0))
    assert warm._refs == []
