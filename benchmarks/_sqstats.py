"""Statistics of the search-quality benchmark: incumbent traces, regret at a budget,
ranks across methods, paired Wilcoxon signed-rank tests and the budget to reach a target.

A *trace* is ``[(budget_units, best_full_score), ...]``: the charged budget at each
improvement of the best score seen at full fidelity (scores are maximised). Regret at a
budget ``B`` (in full trainings) is ``reference - best score at budget <= B``; before the
first full-fidelity result it is ``reference - floor`` (``floor``: the worst score of the
problem's reference sample, so "nothing yet" ranks last but stays finite).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def trace(events) -> list[tuple[float, float]]:
    """The incumbent trace of an event log (:class:`benchmarks._events.Event`)."""
    out: list[tuple[float, float]] = []
    for e in events:
        if e.full and (not out or e.score > out[-1][1]):
            out.append((float(e.budget), float(e.score)))
    return out


def best_at(tr: Sequence[Sequence[float]], units: float) -> float | None:
    """Best full-fidelity score with charged budget <= ``units`` (None: none yet)."""
    best = None
    for b, s in tr:
        if b > units + 1e-9:
            break
        best = s
    return best


def regret_at(tr, units: float, reference: float, floor: float) -> float:
    """``reference - best_at`` (``reference - floor`` before any full-fidelity result),
    never below 0."""
    best = best_at(tr, units)
    return max(0.0, reference - (floor if best is None else best))


def reach(tr, target_regret: float, reference: float, max_t: int) -> float | None:
    """Full trainings of budget at which the regret first is <= ``target_regret``
    (None: not within the run)."""
    for b, s in tr:
        if reference - s <= target_regret + 1e-12:
            return b / max_t
    return None


def median_or_none(values: Sequence[float | None]) -> float | None:
    """The median, counting None (not reached) as infinite; None when that median is."""
    xs = sorted(math.inf if v is None else v for v in values)
    if not xs:
        return None
    m = statistics.median(xs)
    return None if math.isinf(m) else m


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile), linear interpolation (numpy's)."""
    import numpy as np

    q = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def ranks(regrets: dict[str, float]) -> dict[str, float]:
    """Rank of each method by regret (1 = lowest; ties share their average rank)."""
    from scipy.stats import rankdata

    names = list(regrets)
    r = rankdata([regrets[n] for n in names], method="average")
    return {n: float(x) for n, x in zip(names, r, strict=True)}


def average_ranks(table: dict[str, dict[str, list[float]]]) -> dict[str, float]:
    """``table[problem][method]`` = regrets per seed (paired: seed ``i`` of every method
    of a problem is the same seed). Ranks per (problem, seed), averaged over the seeds of
    a problem, then over the problems (each problem weighs the same)."""
    per_problem = []
    for by_method in table.values():
        methods = list(by_method)
        n = min(len(v) for v in by_method.values())
        if n == 0:
            continue
        sums = dict.fromkeys(methods, 0.0)
        for i in range(n):
            for m, r in ranks({m: by_method[m][i] for m in methods}).items():
                sums[m] += r
        per_problem.append({m: s / n for m, s in sums.items()})
    if not per_problem:
        return {}
    methods = list(per_problem[0])
    return {m: sum(p[m] for p in per_problem) / len(per_problem) for m in methods}


def paired(ours: Sequence[float], theirs: Sequence[float]) -> dict[str, float | int | None]:
    """Paired comparison of regrets (lower is better): wins, losses, ties of ``ours`` and
    the two-sided Wilcoxon signed-rank p-value (scipy, zero differences dropped; 1.0 when
    every pair ties, None with fewer than 2 pairs)."""
    from scipy.stats import wilcoxon

    if len(ours) != len(theirs):
        raise ValueError(f"paired samples differ in length: {len(ours)} vs {len(theirs)}")
    d = [a - b for a, b in zip(ours, theirs, strict=True)]
    wins = sum(x < -1e-12 for x in d)
    losses = sum(x > 1e-12 for x in d)
    ties = len(d) - wins - losses
    if len(d) < 2:
        p = None
    elif wins + losses == 0:
        p = 1.0
    else:
        p = float(wilcoxon(ours, theirs, zero_method="wilcox").pvalue)
    return {"wins": wins, "losses": losses, "ties": ties, "p": p}
