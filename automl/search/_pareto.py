"""Pareto tools for 2 or 3 objectives: non-dominated sorting, the epsilon-net order, the
MO-ASHA ranking, the front, its hypervolume, its knee and a spread subset.

Pure numpy, no torch, Ray or Optuna. Every function takes ``points``: an array-like of
shape ``(n, m)``, ``m`` = 2 or 3 objectives, finite floats, in MINIMISATION orientation
(negate a maximised objective first). Row indices refer to the rows of ``points``.
Errors: ``ValueError`` when ``points`` is not ``(n, 2)`` or ``(n, 3)`` or holds a
non-finite value.

Sources: fast non-dominated sorting, Deb et al. 2002, "A fast and elitist multiobjective
genetic algorithm: NSGA-II" (IEEE TEC 6(2)); the epsilon-net order (greedy farthest-point
insertion, Clarkson 2006) as the tie-break inside a front, Salinas et al. 2021 "A
multi-objective perspective on jointly tuning hardware and hyperparameters" and
Schmucker et al. 2021, "Multi-objective Asynchronous Successive Halving" (arXiv
2106.12639), as Syne Tune's ``NonDominatedPriority`` does; knees, Das 1999 "On
characterizing the 'knee' of the Pareto curve based on normal-boundary intersection"
(Struct. Optim. 18) and Branke et al. 2004 "Finding knees in multi-objective
optimization" (PPSN VIII).
"""

from __future__ import annotations

import numpy as np

__all__ = ["epsilon_net_order", "hypervolume", "knee", "mo_order", "non_dominated_sort",
           "pareto_front", "spread"]


def _check(points) -> np.ndarray:
    p = np.asarray(points, dtype=float)
    if p.ndim == 1 and p.size == 0:
        p = p.reshape(0, 2)
    if p.ndim != 2 or p.shape[1] not in (2, 3):
        raise ValueError(f"points must have shape (n, 2) or (n, 3); got {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("points must be finite; got a NaN or an infinity")
    return p


def _normalise(p: np.ndarray) -> np.ndarray:
    """Per objective to [0, 1] by the rows' min and max; a constant objective becomes 0."""
    lo, hi = p.min(axis=0), p.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return (p - lo) / span


def _dominates(p: np.ndarray) -> np.ndarray:
    """``d[i, j]``: row i dominates row j (<= in every objective, < in one)."""
    le = (p[:, None, :] <= p[None, :, :]).all(-1)
    lt = (p[:, None, :] < p[None, :, :]).any(-1)
    return le & lt


def non_dominated_sort(points) -> list[np.ndarray]:
    """Fronts of row indices, best first (Deb et al. 2002): front 0 is the rows no other
    row dominates, front 1 those only front 0 dominates, and so on. Each front is an
    ascending ``int`` array; equal rows share a front; ``n = 0`` gives ``[]``.
    O(n^2 m) memory and time."""
    p = _check(points)
    n = len(p)
    if n == 0:
        return []
    d = _dominates(p)
    count = d.sum(axis=0)  # how many rows dominate each row
    fronts = []
    current = np.flatnonzero(count == 0)
    while current.size:
        fronts.append(current)
        count = count - d[current].sum(axis=0)
        count[current] = -1  # placed
        current = np.flatnonzero(count == 0)
    return fronts


def _net(normed: np.ndarray, seeds: list[int]) -> list[int]:
    """Greedy farthest-point order of the rows of ``normed`` starting with ``seeds``: each
    next row maximises its Euclidean distance to the rows already chosen (ties: lowest
    index)."""
    n = len(normed)
    order = list(dict.fromkeys(seeds))
    if n == 0:
        return order
    if not order:
        order = [int(np.lexsort(normed.T[::-1])[0])]
    dist = np.full(n, np.inf)
    for i in order:
        dist = np.minimum(dist, np.linalg.norm(normed - normed[i], axis=1))
    chosen = np.zeros(n, dtype=bool)
    chosen[order] = True
    while len(order) < n:
        masked = np.where(chosen, -1.0, dist)
        i = int(np.argmax(masked))
        order.append(i)
        chosen[i] = True
        dist = np.minimum(dist, np.linalg.norm(normed - normed[i], axis=1))
    return order


def epsilon_net_order(points) -> list[int]:
    """Every row index, in greedy epsilon-net order (Schmucker et al. 2021; Clarkson 2006):
    objectives are normalised to [0, 1] over the rows (a constant objective becomes 0); the
    first row is the one with the lowest first objective (ties: lowest second objective,
    then lowest index, as Syne Tune's ``dim=0`` seed), and each next row is the one
    farthest (Euclidean) from the rows already chosen, ties to the lowest index. A
    prefix of the order is a well spread subset; duplicates of a chosen row come last."""
    p = _check(points)
    return _net(_normalise(p), []) if len(p) else []


def mo_order(points) -> list[int]:
    """Every row index, ranked as MO-ASHA ranks a rung (Schmucker et al. 2021; Syne Tune's
    ``NonDominatedPriority``): the fronts of :func:`non_dominated_sort` in order, each front
    in epsilon-net order (:func:`epsilon_net_order` on that front's rows, normalised over
    ALL rows so that one scale serves every front). Position 0 is the best row."""
    p = _check(points)
    if len(p) == 0:
        return []
    normed = _normalise(p)
    out: list[int] = []
    for front in non_dominated_sort(p):
        out.extend(int(front[i]) for i in _net(normed[front], []))
    return out


def pareto_front(points) -> np.ndarray:
    """Ascending ``int`` array of the rows no other row dominates (equal rows all kept);
    empty for ``n = 0``."""
    p = _check(points)
    if len(p) == 0:
        return np.zeros(0, dtype=int)
    return np.flatnonzero(~_dominates(p).any(axis=0))


def _hv2(p: np.ndarray, ref: np.ndarray) -> float:
    """Exact 2-D hypervolume of rows strictly inside ``ref`` (sweep along objective 0)."""
    p = p[np.lexsort((p[:, 1], p[:, 0]))]
    total, best_y = 0.0, ref[1]
    for x, y in p:
        if y < best_y:
            total += (ref[0] - x) * (best_y - y)
            best_y = y
    return float(total)


def hypervolume(points, reference) -> float:
    """The hypervolume (Lebesgue measure) of the region the rows dominate and that
    dominates ``reference`` (a point, shape ``(m,)``), minimisation; in the product of the
    objectives' units. Rows not strictly better than ``reference`` in every objective add
    nothing; ``n = 0`` gives 0.0.

    Exact: m = 2 by a sweep over objective 0 (O(n log n)); m = 3 by slicing along
    objective 2 and summing the 2-D hypervolume of each slab (O(n^2 log n)), the
    dimension-sweep of Fonseca, Paquete and Lopez-Ibanez 2006 without its balanced tree.
    Own code: Optuna 5.0 has no public hypervolume function (``optuna._hypervolume`` is
    private) and no other library for it is installed here.

    Raises:
        ValueError: bad ``points`` (see the module doc) or ``reference`` not a finite
            point with the same number of objectives.
    """
    p = _check(points)
    ref = np.asarray(reference, dtype=float)
    if ref.shape != (p.shape[1],) or not np.isfinite(ref).all():
        raise ValueError(f"reference must be a finite point of {p.shape[1]} objectives; got {reference!r}")
    p = p[(p < ref).all(axis=1)]
    if len(p) == 0:
        return 0.0
    if p.shape[1] == 2:
        return _hv2(p, ref)
    p = p[np.argsort(p[:, 2], kind="stable")]
    total = 0.0
    for i in range(len(p)):
        top = p[i + 1, 2] if i + 1 < len(p) else ref[2]
        if top > p[i, 2]:
            total += _hv2(p[:i + 1, :2], ref[:2]) * (top - p[i, 2])
    return float(total)


def knee(points) -> int:
    """The row index of the knee of the front of ``points`` (Das 1999; Branke et al. 2004):
    the non-dominated row farthest from the line (m = 2) or plane (m = 3) through the
    front's extremes, on the side of the ideal point, after normalising the front to
    [0, 1] per objective.

    The extreme of objective j is the front row with the lowest objective j (ties: lowest
    sum of the normalised objectives, then lowest index). Degenerate cases: one row -> 0;
    when the extremes do not span a line/plane facing the ideal point (they coincide, are
    collinear, or the plane's normal has a non-positive component), the plane
    ``sum(f) = const`` is used instead, i.e. the row with the smallest sum of normalised
    objectives. Ties in distance (e.g. a front of two rows, or a straight front) go to the
    lowest row index. Dominated rows are never chosen.

    Raises:
        ValueError: bad ``points`` (see the module doc) or no rows.
    """
    p = _check(points)
    if len(p) == 0:
        raise ValueError("knee needs at least one point; got none")
    front = pareto_front(p)
    if len(front) == 1:
        return int(front[0])
    f = _normalise(p[front])
    m = f.shape[1]
    sums = f.sum(axis=1)
    extremes = [int(np.lexsort((np.arange(len(f)), sums, f[:, j]))[0]) for j in range(m)]
    normal = np.ones(m)
    e = f[extremes]
    if len(set(extremes)) == m:
        try:
            w = np.linalg.solve(e, np.ones(m))  # plane w . x = 1 through the extremes
            if (w > 0).all():
                normal = w
        except np.linalg.LinAlgError:
            pass
    # signed distance toward the ideal point; a plane's offset does not change the argmax
    dist = -(f @ normal) / np.linalg.norm(normal)
    best = np.flatnonzero(np.isclose(dist, dist.max(), rtol=0.0, atol=1e-12))
    return int(front[best].min())


def spread(points, k: int) -> list[int]:
    """At most ``k`` non-dominated row indices spread along the front: the extremes first
    (the front row with the lowest objective 0, then objective 1, [then 2]; ties to the
    lowest index, duplicates once), then the epsilon-net order seeded with them (each next
    row farthest from those chosen, in objectives normalised over the front). Fewer than
    ``k`` when the front has fewer rows.

    Raises:
        ValueError: bad ``points`` (see the module doc) or ``k < 1``.
    """
    p = _check(points)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1; got {k!r}")
    if len(p) == 0:
        return []
    front = pareto_front(p)
    f = _normalise(p[front])
    idx = np.arange(len(f))
    extremes = [int(np.lexsort((idx, f[:, j]))[0]) for j in range(f.shape[1])]
    order = _net(f, extremes)
    return [int(front[i]) for i in order[:k]]
