"""3. Model quality against classical baselines on the same folds (digits).

The project's CV winner comes from its own cross-validation (``automl.selection``, run
by ``automl.pipeline.run_main_job``: stratified k-fold on train + validation rows, the
test split held out). The baselines, scikit-learn's ``SVC`` (RBF) and ``MLPClassifier``,
are tuned by ``HalvingRandomSearchCV`` (successive halving over training rows, Jamieson
& Talwalkar 2016) on exactly those folds, then their best configuration is scored on the
same folds with ``cross_validate``. Features: the 64 pixel values scaled to [0, 1], the
same as the project's input.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np

from benchmarks._common import SPEC, Goal, Result, Table

NAME = "baselines"
TITLE = "Model quality against classical baselines on the same folds (digits)"


def _baselines(seed: int, quick: bool) -> dict:
    """name -> (estimator, param_distributions, n_candidates)."""
    from scipy.stats import loguniform
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import SVC

    mlp = MLPClassifier(max_iter=30 if quick else 300, random_state=seed)
    return {
        "SVC (RBF)": (SVC(), {"C": loguniform(1e-1, 1e3), "gamma": loguniform(1e-4, 1e0)},
                      9 if quick else 243),
        "MLPClassifier": (mlp, {
            "hidden_layer_sizes": [(64,), (128,), (256,), (128, 64), (256, 128)],
            "alpha": loguniform(1e-6, 1e-1), "learning_rate_init": loguniform(1e-4, 3e-2),
            "batch_size": [32, 64, 128]}, 6 if quick else 60),
    }


def tune_baseline(estimator, space: dict, n_candidates: int, X, y, folds, seed: int) -> dict:
    """``HalvingRandomSearchCV`` on ``folds``, then the winner scored on the same folds."""
    from sklearn.base import clone
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.model_selection import HalvingRandomSearchCV, cross_validate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.perf_counter()
        search = HalvingRandomSearchCV(estimator, space, n_candidates=n_candidates, factor=3,
                                       cv=folds, scoring="accuracy", random_state=seed,
                                       n_jobs=2, refit=False)
        search.fit(X, y)
        t_search = time.perf_counter() - t0
        best = clone(estimator).set_params(**search.best_params_)
        scores = cross_validate(best, X, y, cv=folds, scoring="accuracy", n_jobs=2)
    acc = scores["test_score"]
    return {"mean": float(acc.mean()), "std": float(acc.std(ddof=1)), "folds": acc.tolist(),
            "n_candidates": n_candidates, "iterations": int(search.n_iterations_),
            "search_wall_s": round(t_search, 2),
            "wall_s": round(time.perf_counter() - t0, 2),
            "best_params": {k: (list(v) if isinstance(v, tuple) else v)
                            for k, v in search.best_params_.items()}}


def run(quick: bool, ctx: dict) -> Result:
    import json

    from automl.data import load_dataset, split_indices
    from automl.selection import make_folds
    from automl.spec import load_spec
    from benchmarks.orchestration import project_run

    res = Result(NAME, TITLE)
    run = project_run(quick, ctx)
    summary = json.loads((Path(run["run_dir"]) / "summary.json").read_text())
    cv = summary.get("cv")
    if not cv:
        res.status, res.reason = "not landed", "the project's run has no cross-validation"
        return res
    exp = load_spec(Path(run["run_dir"]) / "spec.yaml") if (
        Path(run["run_dir"]) / "spec.yaml").exists() else load_spec(SPEC)
    ds = load_dataset(exp.data)
    splits = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    plan = make_folds(ds.y, splits.pool, cv["plan"]["n_folds"], cv["plan"]["n_repeats"],
                      cv["plan"]["seed"])
    pool = splits.pool
    if [[len(a), len(b)] for a, b in plan.folds] != cv["plan"]["sizes"]:
        raise RuntimeError("rebuilt folds differ in size from the project's CV plan")
    folds = [(np.searchsorted(pool, tr), np.searchsorted(pool, va)) for tr, va in plan.folds]
    X = np.asarray(ds.X)[pool].reshape(len(pool), -1)  # (n_pool, 64), values in [0, 1]
    y = np.asarray(ds.y)[pool]
    seed = exp.search.seed
    winner = next(c for c in cv["candidates"] if c["trial_id"] == cv["winner"])
    w = winner["summary"][cv["metric"]]
    project_wall = summary["search"]["wall_time_s"] + cv["compute"]["wall_time_s"]
    arch = winner["config"].get("arch", {})
    rows = [[f"automl CV winner ({', '.join(f'{k} {v}' for k, v in arch.items())})",
             w["mean"], w["std"], w["n"], round(project_wall, 1), run.get("process_wall_s"),
             f"search {summary['search']['wall_time_s']:.0f} s + CV "
             f"{cv['compute']['wall_time_s']:.0f} s of {len(cv['candidates'])} candidates"]]
    scores = {}
    for name, (est, space, n) in _baselines(seed, quick).items():
        scores[name] = s = tune_baseline(est, space, n, X, y, folds, seed)
        rows.append([f"{name}, HalvingRandomSearchCV", s["mean"], s["std"], len(s["folds"]),
                     s["wall_s"], None, f"{n} candidates, {s['iterations']} rounds; best "
                     + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                                 for k, v in s["best_params"].items())])
    res.settings = {"folds": cv["plan"], "rows": int(len(pool)),
                    "features": "64 pixels in [0, 1]", "sklearn_n_jobs": 2,
                    "project_cv_source": "automl.selection via run_main_job (summary.json cv)"}
    res.seeds = {"folds": cv["plan"]["seed"], "baseline search": seed}
    res.tables.append(Table("CV accuracy on the project's stratified folds",
                            ["model", "CV mean", "CV std", "folds", "wall s (search + CV)",
                             "process wall s", "details"], rows))
    best_name = max(scores, key=lambda k: scores[k]["mean"])
    b = scores[best_name]
    res.goals.append(Goal("automl CV winner's accuracy >= best baseline's",
                          f"{w['mean']:.4f} vs {best_name} {b['mean']:.4f}",
                          w["mean"] >= b["mean"]))
    res.notes.append("Wall times: the project's is its sweep plus its cross-validation (its "
                     "process also refits the winner and scores the test split); each "
                     "baseline's is HalvingRandomSearchCV plus the final CV, on 2 cores.")
    res.data = {"automl": {"trial_id": cv["winner"], "cv": winner["summary"],
                           "config": winner["config"], "wall_s": project_wall},
                "baselines": scores}
    return res
