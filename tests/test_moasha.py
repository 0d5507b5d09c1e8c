"""MO-ASHA and constraints in the rung policy (automl/search/_asha.py), driven with event
lists: dominated trials stop, the first at a rung continues, constraints come first,
replay equals live, one objective is unchanged, brackets work with several objectives."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from automl.search import CONTINUE, STOP, RungPolicy
from automl.search._asha import Event

MO = ("max", "min")  # e.g. (val_accuracy, latency_ms)


def test_the_first_at_a_rung_continues_and_a_dominated_trial_stops():
    p = RungPolicy(1, 3, 9, mode=MO)
    assert p.on_report("a", 1, (0.9, 1.0)) == CONTINUE  # first at the rung
    assert p.on_report("b", 1, (0.8, 2.0)) == STOP  # dominated by a: r = 1 of 2
    assert p.on_report("c", 1, (0.95, 0.5)) == CONTINUE  # dominates a and b: r = 0 of 3
    # d has the best accuracy: front 0 with c, first in the epsilon net (lowest -acc)
    assert p.on_report("d", 1, (0.99, 5.0)) == CONTINUE
    # fronts: {c, d} (net: d first, the lowest -accuracy), {a}, {e}, {b}: e is r = 3 of 5
    assert p.on_report("e", 1, (0.85, 1.5)) == STOP
    assert p.recorded()[1] == {"a": (0.9, 1.0), "b": (0.8, 2.0), "c": (0.95, 0.5),
                               "d": (0.99, 5.0), "e": (0.85, 1.5)}
    assert p.stopped_at("b") == 1 and p.stopped_at("c") is None
    # non-rung epochs continue; max_t always stops
    assert p.on_report("c", 2, (0.0, 100.0)) == CONTINUE
    assert p.on_report("c", 9, (0.99, 0.1)) == STOP


def test_the_rank_rule_is_r_over_n_at_most_one_over_the_reduction_factor():
    # five mutually non-dominated points on a line: ranks follow the epsilon net
    p = RungPolicy(1, 2, 8, mode=("min", "min"))
    pts = {"a": (0.0, 1.0), "b": (1.0, 0.0), "c": (0.5, 0.5)}
    # a: first; b: net order a, b -> r = 1 of 2 <= 1/2; c: a, b, c -> r = 2 of 3 > 1/2
    assert [p.on_report(t, 1, v) for t, v in pts.items()] == [CONTINUE, CONTINUE, STOP]
    # a dominating newcomer is first whatever came before
    assert p.on_report("d", 1, (-1.0, -1.0)) == CONTINUE


@pytest.mark.parametrize("m", [2, 3])
def test_random_sequences_stop_the_heavily_dominated_and_keep_the_dominating(m):
    rng = np.random.default_rng(m)
    rf = 3
    p = RungPolicy(1, rf, 9, mode=("min",) * m)
    seen: list[np.ndarray] = []
    for i in range(80):
        v = rng.random(m)
        decision = p.on_report(i, 1, tuple(v))
        n = len(seen) + 1
        dominators = sum(bool((s <= v).all() and (s < v).any()) for s in seen)
        if dominators / n > 1 / rf:  # every dominator ranks ahead of it
            assert decision == STOP
        if all((v <= s).all() and (v < s).any() for s in seen):  # it dominates all
            assert decision == CONTINUE
        seen.append(v)
    passed, judged = p.pass_counts()[1]
    assert judged == 80 and 0.2 < passed / judged < 0.6


def test_constraints_come_first_with_several_objectives():
    p = RungPolicy(1, 3, 9, mode=MO)
    assert p.on_report("a", 1, (0.5, 10.0)) == CONTINUE
    # b dominates a but is infeasible: ranked after every feasible value
    assert p.on_report("b", 1, (0.99, 0.1), violation=0.5) == STOP
    # among the infeasible, the smaller violation ranks first; c is feasible and dominated
    # by a: rank 1 of 3 (a, c, b) -> continues (1/3 <= 1/3)
    assert p.on_report("c", 1, (0.4, 11.0)) == CONTINUE
    q = RungPolicy(1, 2, 8, mode=MO)
    q.replay([("x", 1, (0.9, 1.0), 2.0), ("y", 1, (0.1, 9.0), 1.0)])
    # infeasible only: z's violation 0.1 puts it first, w's 3.0 last
    assert q.on_report("z", 1, (0.0, 99.0), 0.1) == CONTINUE
    assert q.on_report("w", 1, (1.0, 0.0), 3.0) == STOP
    assert q.recorded_violations()[1] == {"x": 2.0, "y": 1.0, "z": 0.1, "w": 3.0}


def test_constraints_come_first_with_one_objective():
    p = RungPolicy(1, 3, 9)  # max
    assert p.on_report("a", 1, 0.1) == CONTINUE
    assert p.on_report("b", 1, 0.99, violation=0.3) == STOP  # infeasible below feasible a
    # recorded, worst first: b (infeasible), a (0.1); the cutoff straddles them -> a
    assert p.on_report("c", 1, 0.05) == STOP
    assert p.on_report("d", 1, 0.2) == CONTINUE
    q = RungPolicy(1, 3, 9, mode="min")
    q.replay([("x", 1, 0.5, 1.0), ("y", 1, 0.4, 0.5)])
    assert q.on_report("f", 1, 100.0) == CONTINUE  # feasible beats every infeasible
    r = RungPolicy(1, 3, 9, mode="min")
    r.replay([("x", 1, 0.5, 1.0), ("y", 1, 0.4, 0.5)])
    # infeasible: cutoff between violations 1.0 and 0.5 at 2/3 -> 0.667; 0.6 beats it
    assert r.on_report("g", 1, 0.0, 0.6) == CONTINUE
    assert r.on_report("h", 1, 0.0, 0.9) == STOP


def test_one_objective_without_violations_is_unchanged():
    rng = random.Random(3)
    events = [(t, e, rng.random()) for e in (1, 3) for t in range(30)]
    plain = RungPolicy(1, 3, 9).replay(events)
    explicit = RungPolicy(1, 3, 9).replay([(t, e, v, 0.0) for t, e, v in events])
    as_events = RungPolicy(1, 3, 9).replay([Event(t, e, v) for t, e, v in events])
    assert plain == explicit == as_events
    # an independent oracle of the quantile rule at rung 1 (Li et al. 2020, stopping form)
    seen: list[float] = []
    for (_, _, v), decision in zip(events[:30], plain[:30]):
        expected = CONTINUE if not seen or v >= np.percentile(seen, 100 * (1 - 1 / 3)) else STOP
        assert decision == expected
        seen.append(v)


def _mo_events(seed: int, n: int = 40) -> list[tuple]:
    rng = random.Random(seed)
    events = []
    for epoch in (1, 2, 3, 9):
        for t in range(n):
            v = (rng.random(), rng.random() * 10)
            violation = rng.choice([0.0, 0.0, 0.0, rng.random()])
            events.append((t, epoch, v, violation))
    return events


def test_replay_equals_live_with_several_objectives_and_violations():
    events = _mo_events(0)
    kwargs = dict(grace_period=1, reduction_factor=3, max_t=9, mode=MO, brackets=2, seed=5)
    live = RungPolicy(**kwargs)
    decisions = [live.on_report(t, e, v, c) for t, e, v, c in events]
    rebuilt = RungPolicy.from_events([Event(t, e, v, c) for t, e, v, c in events], **kwargs)
    assert RungPolicy(**kwargs).replay(events) == decisions
    for b in range(2):
        assert rebuilt.recorded(b) == live.recorded(b)
        assert rebuilt.recorded_violations(b) == live.recorded_violations(b)
    assert rebuilt.pass_counts() == live.pass_counts()
    assert all(rebuilt.stopped_at(t) == live.stopped_at(t) for t in range(40))
    assert STOP in decisions[:40] and CONTINUE in decisions[:40]


def test_brackets_keep_their_own_rungs_in_mo_mode():
    p = RungPolicy(1, 3, 27, mode=MO, brackets=2, seed=1)
    assert p.brackets == [[1, 3, 9, 27], [3, 9, 27]]
    in0 = [t for t in range(200) if p.bracket_of(t) == 0][:3]
    in1 = [t for t in range(200) if p.bracket_of(t) == 1][:3]
    assert len(in0) == 3 and len(in1) == 3
    # bracket 1 starts judging at epoch 3, so its trials always pass epoch 1
    assert [p.on_report(t, 1, (0.1, 50.0)) for t in in1] == [CONTINUE] * 3
    assert p.on_report(in0[0], 1, (0.9, 1.0)) == CONTINUE
    assert p.on_report(in0[1], 1, (0.1, 50.0)) == STOP  # dominated in bracket 0
    # at epoch 3 bracket 1's first arrival continues however bad: bracket 0's record is apart
    assert p.on_report(in0[0], 3, (0.9, 1.0)) == CONTINUE
    assert p.on_report(in1[0], 3, (0.05, 90.0)) == CONTINUE
    assert p.on_report(in1[1], 3, (0.01, 99.0)) == STOP
    assert set(p.recorded(0)[3]) == {in0[0]} and set(p.recorded(1)[3]) == {in1[0], in1[1]}


def test_missing_objectives_are_neither_judged_nor_recorded():
    p = RungPolicy(1, 3, 9, mode=MO)
    p.replay([("a", 1, (0.9, 1.0)), ("b", 1, (0.95, 0.5))])
    for t, v in [("c", None), ("d", (None, 1.0)), ("e", (0.1, math.nan)), ("f", [math.nan, 2.0])]:
        assert p.on_report(t, 1, v) == CONTINUE
    assert set(p.recorded()[1]) == {"a", "b"}


def test_bad_mode_values_and_violations_are_refused():
    with pytest.raises(ValueError, match="2 or 3"):
        RungPolicy(1, 3, 9, mode=("max",))
    with pytest.raises(ValueError, match="2 or 3"):
        RungPolicy(1, 3, 9, mode=("max", "up"))
    p = RungPolicy(1, 3, 9, mode=("max", "min", "min"))
    with pytest.raises(ValueError, match="3 objectives"):
        p.on_report("a", 1, (0.9, 1.0))
    with pytest.raises(ValueError, match="violation must be >= 0"):
        p.on_report("a", 1, (0.9, 1.0, 2.0), violation=-0.1)
    with pytest.raises(ValueError, match="violation must be >= 0"):
        RungPolicy(1, 3, 9).on_report("a", 1, 0.5, violation=math.nan)
