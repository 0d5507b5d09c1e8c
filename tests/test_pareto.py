"""Pareto tools (automl/search/_pareto.py) on hand-checked small cases; the hypervolume
against a brute-force grid / Monte-Carlo count."""

from __future__ import annotations

import numpy as np
import pytest

from automl.search._pareto import (
    epsilon_net_order,
    hypervolume,
    knee,
    mo_order,
    non_dominated_sort,
    pareto_front,
    spread,
)

# minimisation; rows 0-2 non-dominated, 3 dominated by 2, 4 by every other row
P = np.array([[0.0, 1.0], [1.0, 0.0], [0.2, 0.2], [0.5, 0.5], [1.0, 1.0]])


def test_non_dominated_sort_by_hand():
    fronts = non_dominated_sort(P)
    assert [f.tolist() for f in fronts] == [[0, 1, 2], [3], [4]]
    # equal rows share a front; a row equal in one objective and worse in the other is dominated
    assert [f.tolist() for f in non_dominated_sort([[1, 1], [1, 1], [1, 2]])] == [[0, 1], [2]]
    assert non_dominated_sort(np.zeros((0, 2))) == []
    three = [[1, 2, 3], [3, 2, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4]]
    assert [f.tolist() for f in non_dominated_sort(three)] == [[0, 1, 2], [3], [4]]


def test_every_row_is_in_one_front_and_no_row_is_dominated_by_its_own_or_a_later_front():
    rng = np.random.default_rng(0)
    p = rng.random((60, 3))
    fronts = non_dominated_sort(p)
    assert sorted(np.concatenate(fronts).tolist()) == list(range(60))
    for i, f in enumerate(fronts):
        later = np.concatenate(fronts[i:])
        for a in f:
            assert not any((p[b] <= p[a]).all() and (p[b] < p[a]).any() for b in later)
        if i:  # each row of front i is dominated by some row of front i-1
            for a in f:
                assert any((p[b] <= p[a]).all() and (p[b] < p[a]).any() for b in fronts[i - 1])
    assert pareto_front(p).tolist() == fronts[0].tolist()


def test_epsilon_net_order_starts_at_the_lowest_first_objective_and_goes_farthest_next():
    # normalised: (0,1), (1,0), (.2,.2), (.5,.5), (1,1)
    assert epsilon_net_order(P) == [0, 1, 4, 2, 3]
    # on a line: the low end, the far end, then the middle
    line = [[0.5, 0.5], [0.0, 1.0], [1.0, 0.0], [0.25, 0.75]]
    assert epsilon_net_order(line) == [1, 2, 0, 3]
    # a duplicate of a chosen row comes last
    assert epsilon_net_order([[0, 1], [0, 1], [1, 0], [0.5, 0.5]]) == [0, 2, 3, 1]


def test_mo_order_is_fronts_then_epsilon_net_inside_each():
    assert mo_order(P) == [0, 1, 2, 3, 4]
    p = [[1.0, 1.0], [0.0, 3.0], [3.0, 0.0], [2.0, 2.0], [0.5, 2.5]]
    # front 0: rows 1, 4, 0, 2 (row 3 is dominated by 0); net: 1 (lowest obj 0), 2 (farthest), 0, 4
    assert mo_order(p) == [1, 2, 0, 4, 3]


def test_hypervolume_by_hand_2d_and_3d():
    assert hypervolume(P, [2, 2]) == pytest.approx(2 + 1.8 * 0.8 + 1 * 0.2)
    assert hypervolume([[0, 0, 0]], [1, 2, 3]) == pytest.approx(6.0)
    # three boxes of volume 2, pairwise overlaps 1, triple overlap 1: 6 - 3 + 1
    assert hypervolume([[0, 1, 1], [1, 0, 1], [1, 1, 0]], [2, 2, 2]) == pytest.approx(4.0)
    # rows at or beyond the reference add nothing; no rows -> 0
    assert hypervolume([[2, 0], [0, 3]], [2, 2]) == 0.0
    assert hypervolume(np.zeros((0, 3)), [1, 1, 1]) == 0.0
    with pytest.raises(ValueError, match="reference"):
        hypervolume(P, [1, 1, 1])


@pytest.mark.parametrize("m", [2, 3])
def test_hypervolume_matches_a_brute_force_count(m):
    rng = np.random.default_rng(m)
    p = rng.random((25, m))
    ref = np.full(m, 1.1)
    exact = hypervolume(p, ref)
    if m == 2:  # grid count at cell centres: error <= perimeter * cell size
        g = (np.arange(1100) + 0.5) / 1000
        x, y = np.meshgrid(g, g, indexing="ij")
        cells = np.stack([x.ravel(), y.ravel()], 1)
        dominated = np.zeros(len(cells), dtype=bool)
        for row in p:
            dominated |= (cells >= row).all(1)
        estimate = dominated.mean() * 1.1 ** 2
        assert exact == pytest.approx(estimate, abs=5e-3)
    else:  # Monte-Carlo, 400k samples: standard error about 1e-3
        s = rng.random((400_000, 3)) * 1.1
        dominated = np.zeros(len(s), dtype=bool)
        for row in p:
            dominated |= (s >= row).all(1)
        estimate = dominated.mean() * 1.1 ** 3
        assert exact == pytest.approx(estimate, abs=6e-3)
    # dominated rows do not change it
    assert hypervolume(np.vstack([p, p + 0.05]), ref) == pytest.approx(exact)


def test_knee_on_a_known_front():
    # a convex front with a sharp bend at (0.1, 0.1): it is the knee
    front = [[0.0, 1.0], [0.05, 0.4], [0.1, 0.1], [0.4, 0.05], [1.0, 0.0]]
    assert knee(front) == 2
    # y = 9/x for x = 1..9 scaled to [0,1]^2 is symmetric about x = y: the knee is (3, 3)
    x = np.linspace(1, 9, 9)
    assert knee(np.stack([x, 9 / x], 1)) == 2
    assert knee(np.stack([9 / x, x], 1)) == 2
    # dominated rows are never the knee, even when closer to the ideal point than others
    assert knee([[0.0, 1.0], [1.0, 0.0], [0.6, 0.6], [0.3, 0.3]]) == 3
    # 3-D: the extremes span the plane x + y + z = 1; (0.2, 0.2, 0.2) is farthest below it
    assert knee([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.2, 0.2, 0.2], [0.3, 0.3, 0.35]]) == 3


def test_knee_degenerate_cases():
    assert knee([[3.0, 4.0]]) == 0
    assert knee([[1.0, 1.0], [0.0, 0.0]]) == 1  # one non-dominated row
    assert knee([[0.0, 1.0], [1.0, 0.0]]) == 0  # two rows: a tie, the lowest index
    assert knee([[0.0, 1.0], [0.5, 0.5], [1.0, 0.0]]) == 0  # a straight front: a tie
    with pytest.raises(ValueError, match="at least one"):
        knee(np.zeros((0, 2)))


def test_spread_takes_the_extremes_first_then_the_farthest():
    front = [[0.0, 1.0], [0.1, 0.6], [0.3, 0.3], [0.6, 0.1], [1.0, 0.0], [2.0, 2.0]]
    assert spread(front, 2) == [0, 4]
    assert spread(front, 3) == [0, 4, 2]
    assert sorted(spread(front, 10)) == [0, 1, 2, 3, 4]  # never a dominated row
    assert spread(front, 1) == [0]
    with pytest.raises(ValueError, match="k must be"):
        spread(front, 0)


@pytest.mark.parametrize("bad", [np.zeros((3, 4)), np.zeros(3), [[0.0, float("nan")]]])
def test_bad_points_are_refused(bad):
    with pytest.raises(ValueError, match="points must"):
        non_dominated_sort(bad)
