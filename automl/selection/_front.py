"""The cross-validated Pareto front of a multi-objective search, and its winner.

The front's axes are the search's objectives with each quality metric replaced by its
cross-validation mean (``val_accuracy`` -> CV ``accuracy``, ``val_f1`` -> CV ``f1_macro``,
any other -> ``selection.metric``) and each cost (``params``, ``macs``, ``model_bytes``,
``latency_ms``) as the trial measured it; measured axes count only differences beyond
their noise (:data:`automl.search._objectives.TOLERANCE`). ``selection.pick`` names the winner: ``knee``,
the knee of the feasible front (:func:`automl.search.knee`, Branke et al. 2004), or
``best``, the best CV ``selection.metric`` among the feasible candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from automl.search import Objectives, front_within, knee
from automl.search._objectives import TOLERANCE
from automl.spec import CV_MIN_METRICS, REPORTED_METRICS, Experiment

#: the CV score that stands for a search-time quality metric on the final front
CV_OF = {"val_accuracy": "accuracy", "val_f1": "f1_macro", "val_rmse": "rmse",
         "val_mae": "mae", "val_r2": "r2"}


def front_axes(exp: Experiment) -> list[tuple[str, str, str]]:
    """``[(axis name, mode, source)]`` of the final front: ``source`` is ``cv:<score>``
    for a cross-validated quality axis, else the trial's metric name."""
    axes: list[tuple[str, str, str]] = []
    for metric, mode in exp.search.objective_list():
        if metric in REPORTED_METRICS:
            score = CV_OF.get(metric, exp.selection.metric)
            name = f"cv_{score}"
            if all(a[0] != name for a in axes):  # rmse, mae: smaller is better
                axes.append((name, "min" if score in CV_MIN_METRICS else "max",
                             f"cv:{score}"))
        else:
            axes.append((metric, mode, metric))
    return axes


def choose_on_front(exp: Experiment, rows: Sequence[dict], searched: dict[str, dict],
                    complete: set[str]) -> tuple[str, str, list[dict]]:
    """The winner of the cross-validated front.

    Args:
        rows: one dict per candidate with ``trial_id``, ``summary`` (CV means per score),
            ``n_params`` and ``rank``.
        searched: ``trial_id -> the trial's last reported metrics`` (its costs, and what
            the constraints are checked on).
        complete: the candidates scored on every fold (the others are not on the front).

    Returns:
        ``(winner trial id, reason, pareto rows)``: one row per candidate with
        ``trial_id``, ``objectives`` (axis -> value), ``feasible``, ``on_front`` and
        ``winner``.

    Raises:
        ValueError: no candidate was scored on every fold.
    """
    objectives = Objectives.of(exp.search)
    axes = front_axes(exp)

    def value(row: dict, source: str) -> float:
        if source.startswith("cv:"):
            return float(row["summary"][source[3:]]["mean"])
        return float(searched[row["trial_id"]].get(source, np.nan))

    scored = [r for r in rows if r["trial_id"] in complete]
    if not scored:
        raise ValueError("no candidate finished cross-validation")
    feasible = [r for r in scored if objectives.feasible(searched[r["trial_id"]])]
    pool = feasible or scored
    signs = np.array([1.0 if mode == "max" else -1.0 for _, mode, _ in axes])
    points = np.array([[value(r, src) for _, _, src in axes] for r in pool]) * -signs
    tol = [TOLERANCE.get(src, 0.0) for _, _, src in axes]
    on_front = [pool[i] for i in front_within(points, tol)]
    front_points = np.array([[value(r, src) for _, _, src in axes] for r in on_front]) * -signs
    score = exp.selection.metric
    sign = -1.0 if score in CV_MIN_METRICS else 1.0
    if exp.selection.pick == "best":
        win = max(on_front, key=lambda r: (sign * r["summary"][score]["mean"], -r["n_params"],
                                           -r["rank"]))
        how = f"best CV {score} ({win['summary'][score]['mean']:.4f}) on the front"
    else:
        win = on_front[knee(front_points)]
        how = (f"the knee of the {len(on_front)}-member front ("
               + ", ".join(f"{n} {value(win, s):.4g}" for n, _, s in axes) + ")")
    where = ("within the constraints" if feasible else
             "no candidate keeps the constraints: chosen among all") if objectives.constraints \
        else ""
    reason = how + (f", {where}" if where else "")
    ids = {r["trial_id"] for r in on_front}
    out = [{"trial_id": r["trial_id"],
            "objectives": {n: value(r, s) for n, _, s in axes},
            "feasible": objectives.feasible(searched[r["trial_id"]]),
            "on_front": r["trial_id"] in ids, "winner": r["trial_id"] == win["trial_id"]}
           for r in rows if r["trial_id"] in complete]
    return win["trial_id"], reason, out
