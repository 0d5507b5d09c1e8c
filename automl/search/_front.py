"""The search's trials in order, and its Pareto front: the one ranking rule of
``SearchResult.ranked`` for one objective and for several.

Sources: non-dominated sorting (Deb et al. 2002, NSGA-II) with the epsilon-net order of
Schmucker et al. 2021 inside each front (:mod:`automl.search._pareto`); constraints first,
as in Deb et al. 2002's constrained domination.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from automl.search._objectives import Objectives
from automl.search._pareto import mo_order, spread
from automl.search._result import COMPLETED, DIVERGED, FAILED, TrialRecord


def front_within(points, tolerance: Sequence[float]) -> np.ndarray:
    """Indices (ascending) of the rows of ``points`` (``(n, m)``, every objective
    minimised) that no other row dominates by more than ``tolerance``: row ``b``
    dominates row ``a`` when on every objective ``b_j <= a_j + t_j |a_j|`` and on at least
    one ``b_j < a_j - t_j |a_j|`` (relative epsilon-dominance, Laumanns et al. 2002, with
    ``t_j`` a measurement's noise; ``t = 0`` everywhere is plain Pareto dominance).

    Raises:
        ValueError: ``tolerance`` does not have one entry per objective.
    """
    p = np.asarray(points, dtype=float)
    if len(p) == 0:
        return np.zeros(0, dtype=int)
    t = np.asarray(tolerance, dtype=float)
    if t.shape != (p.shape[1],):
        raise ValueError(f"tolerance needs {p.shape[1]} entries, got {len(t)}")
    slack = t * np.abs(p)  # (n, m), per dominated row a
    no_worse = (p[:, None, :] <= p[None, :, :] + slack[None, :, :]).all(axis=2)  # [b, a]
    better = (p[:, None, :] < p[None, :, :] - slack[None, :, :]).any(axis=2)
    dominated = (no_worse & better).any(axis=0)
    return np.flatnonzero(~dominated)


def _eligible(trials: Sequence[TrialRecord], objectives: Objectives) -> list[TrialRecord]:
    return [t for t in trials if t.end_state not in (FAILED, DIVERGED)
            and objectives.value(t.metrics) is not None]


def _mo_sorted(trials: list[TrialRecord], objectives: Objectives) -> list[TrialRecord]:
    if len(trials) < 2:
        return list(trials)
    points = np.array([objectives.minimised(t.metrics) for t in trials], dtype=float)
    return [trials[i] for i in mo_order(points)]


def rank_trials(trials: Sequence[TrialRecord], objectives: Objectives) -> list[TrialRecord]:
    """The non-failed trials that reported every objective, best first.

    Feasible trials come before infeasible ones (those by total violation, ascending).
    One objective: by its last reported value, then more epochs, then trial number.
    Several: the trials that ran all their epochs first, then the others; each group by
    :func:`~automl.search._pareto.mo_order` of its last reported values.
    """
    ok = _eligible(trials, objectives)
    infeasible = sorted((t for t in ok if not objectives.feasible(t.metrics)),
                        key=lambda t: (objectives.violation(t.metrics), int(t.trial_id)))
    feasible = [t for t in ok if objectives.feasible(t.metrics)]
    if not objectives.multi:
        sign, metric = objectives.signs[0], objectives.metrics[0]
        feasible.sort(key=lambda t: (-sign * t.metrics[metric], -t.epochs_run,
                                     int(t.trial_id)))
        return feasible + infeasible
    done = [t for t in feasible if t.end_state == COMPLETED]
    rest = [t for t in feasible if t.end_state != COMPLETED]
    return _mo_sorted(done, objectives) + _mo_sorted(rest, objectives) + infeasible


def pareto_of(ranked: Sequence[TrialRecord], objectives: Objectives) -> list[str]:
    """Trial ids of the search's Pareto front, in :func:`rank_trials` order: the
    non-dominated trials (:func:`front_within`, with the noise tolerance of measured
    objectives) among the feasible ones that ran all their epochs (when none did, among
    every feasible trial; when none is feasible, among all). Empty for one objective."""
    if not objectives.multi or not ranked:
        return []
    feasible = [t for t in ranked if objectives.feasible(t.metrics)]
    done = [t for t in feasible if t.end_state == COMPLETED]
    pool = done or feasible or list(ranked)
    points = np.array([objectives.minimised(t.metrics) for t in pool], dtype=float)
    keep = {pool[i].trial_id for i in front_within(points, objectives.tolerances())}
    return [t.trial_id for t in ranked if t.trial_id in keep]


def candidates(ranked: Sequence[TrialRecord], pareto: Sequence[str], objectives: Objectives,
               k: int) -> list[TrialRecord]:
    """The trials cross-validation re-scores: the first ``k`` of ``ranked`` for one
    objective; for several, at most ``k`` members of the front spread along it
    (:func:`~automl.search._pareto.spread`: its extremes first), in that order."""
    if not objectives.multi or not pareto:
        return list(ranked[:k])
    by_id = {t.trial_id: t for t in ranked}
    front = [by_id[i] for i in pareto if i in by_id]
    points = np.array([objectives.minimised(t.metrics) for t in front], dtype=float)
    return [front[i] for i in spread(points, k)]


#: the name :mod:`automl.search` exports :func:`candidates` under
cv_candidates = candidates
