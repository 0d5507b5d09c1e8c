"""The rung policy (ASHA / Hyperband) driven with event lists, without Ray; one
conformance test replays the same events through Ray Tune's own ASHAScheduler."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from automl.search import CONTINUE, STOP, RungPolicy, judged_at


def test_rungs_and_the_epochs_they_are_judged_at():
    assert RungPolicy(1, 3, 100).rung_epochs() == [1, 3, 9, 27, 81]
    assert RungPolicy(2, 3, 18).rung_epochs() == [2, 6, 18]
    # a fractional factor: rungs 1, 2.5, 6.25, 15.6 judged at the first epoch past them
    assert RungPolicy(1, 2.5, 20).rung_epochs() == [1, 3, 7, 16]
    assert judged_at(2.5) == 3 and judged_at(3.0) == 3
    hb = RungPolicy(1, 3, 27, brackets=3)
    assert hb.brackets == [[1, 3, 9, 27], [3, 9, 27], [9, 27]]


def test_stops_below_the_top_third_and_records_in_order():
    p = RungPolicy(1, 3, 9)
    # a: nothing recorded yet; b: above a; c: above the 2/3 quantile of .5, .9 (0.7667)
    assert [p.on_report(t, 1, v) for t, v in [("a", 0.5), ("b", 0.9), ("c", 0.8)]] == \
        [CONTINUE, CONTINUE, CONTINUE]
    assert p.on_report("d", 1, 0.75) == STOP  # below the quantile of .5, .8, .9 (0.8333)
    assert p.on_report("e", 1, 0.85) == CONTINUE  # .5 .75 .8 .9 -> 0.8
    assert p.stopped_at("d") == 1 and p.stopped_at("e") is None
    assert p.recorded()[1] == {"a": 0.5, "b": 0.9, "c": 0.8, "d": 0.75, "e": 0.85}
    # non-rung epochs continue; max_t always stops
    assert p.on_report("e", 2, 0.0) == CONTINUE
    assert p.on_report("b", 9, 0.99) == STOP


def test_a_rung_reported_again_gets_the_same_answer_and_is_not_recorded_twice():
    p = RungPolicy(1, 3, 9)
    p.replay([("a", 1, 0.9), ("b", 1, 0.8), ("c", 1, 0.7)])
    assert p.on_report("c", 1, 0.7) == STOP  # judged before: stopped (0.7 < 0.8667)
    first = RungPolicy(1, 3, 9).replay([("a", 1, 0.9), ("b", 1, 0.8), ("c", 1, 0.7)])
    assert first[2] == STOP
    # a resumed trial re-reports its checkpointed rung with any value: the decision stands
    assert p.on_report("a", 1, 0.0) == CONTINUE
    assert p.recorded()[1]["a"] == 0.9


def test_minimising_and_missing_values():
    p = RungPolicy(1, 3, 9, mode="min")
    p.replay([("a", 1, 0.1), ("b", 1, 0.2)])
    assert p.on_report("c", 1, 0.3) == STOP  # a larger loss is worse
    assert p.on_report("d", 1, None) == CONTINUE and "d" not in p.recorded()[1]
    assert p.on_report("e", 1, float("nan")) == CONTINUE


@pytest.mark.parametrize("kwargs, message", [
    ({"grace_period": 0, "reduction_factor": 3, "max_t": 9}, "grace_period must be > 0"),
    ({"grace_period": 1, "reduction_factor": 1, "max_t": 9}, "reduction_factor must be > 1"),
    ({"grace_period": 5, "reduction_factor": 3, "max_t": 4}, "max_t .4. must be >= grace"),
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "mode": "up"}, "mode must be"),
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "brackets": 4}, r"between 1 and 3"),
])
def test_bad_arguments_say_what_must_hold(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RungPolicy(**kwargs)


def _drive(decide, seed: int, n_trials: int = 30, max_t: int = 27) -> list[tuple]:
    """Interleaved reports of 4 concurrent trials that report until told to stop (or
    ``max_t``); a stopped trial's slot goes to the next. ``[(trial, epoch, value,
    decision)]`` in order."""
    rng = random.Random(seed)
    quality = {f"t{i}": rng.random() for i in range(n_trials)}
    order = list(quality)
    live, waiting, out = {t: 0 for t in order[:4]}, order[4:], []
    while live:
        t = rng.choice(sorted(live))
        live[t] += 1
        epoch = live[t]
        value = quality[t] * (1 - 0.5 ** epoch) + rng.gauss(0, 0.02)
        d = decide(t, epoch, value)
        out.append((t, epoch, value, d))
        if epoch >= max_t or d == STOP:
            del live[t]
            if waiting:
                live[waiting.pop(0)] = 0
    return out


@pytest.mark.parametrize("seed", range(4))
def test_same_decisions_as_ray_tunes_asha_on_the_same_events(seed):
    from ray.tune.schedulers import ASHAScheduler, TrialScheduler

    ray_asha = ASHAScheduler(time_attr="epoch", metric="v", mode="max", max_t=27,
                             grace_period=1, reduction_factor=3)
    added = set()

    def ray_decide(t, epoch, value):
        trial = SimpleNamespace(trial_id=t)
        if t not in added:
            ray_asha.on_trial_add(None, trial)
            added.add(t)
        d = ray_asha.on_trial_result(None, trial, {"epoch": epoch, "v": value})
        return STOP if d == TrialScheduler.STOP else CONTINUE

    ours = RungPolicy(1, 3, 27)
    expected = _drive(ray_decide, seed)
    got = _drive(ours.on_report, seed)
    assert got == expected
    assert sum(d == STOP for *_, d in got) > 5  # the streams do exercise stopping


def test_rebuilt_from_its_events_it_decides_as_the_first_did():
    first = RungPolicy(1, 3, 27)
    events = [(t, e, v) for t, e, v, _ in _drive(first.on_report, 7)]
    rebuilt = RungPolicy.from_events(events, grace_period=1, reduction_factor=3, max_t=27)
    assert rebuilt.recorded() == first.recorded()
    for t in {e[0] for e in events}:
        assert rebuilt.stopped_at(t) == first.stopped_at(t)
    # the next new trial is judged against the same rungs
    assert rebuilt.on_report("new", 1, 0.3) == first.on_report("new", 1, 0.3)


def test_hyperband_brackets_are_fixed_per_trial_and_start_at_their_own_rung():
    p = RungPolicy(1, 3, 27, brackets=3, seed=5)
    again = RungPolicy(1, 3, 27, brackets=3, seed=5)
    trials = [str(i) for i in range(600)]
    assigned = [p.bracket_of(t) for t in trials]
    assert assigned == [again.bracket_of(t) for t in reversed(trials)][::-1]
    share = [assigned.count(k) / len(trials) for k in range(3)]
    # Hyperband's n_s for s_max=3: 27, 12, 6 (of 45) for the brackets starting at 1, 3, 9
    assert share[0] > share[1] > share[2] > 0.05
    late = next(t for t in trials if p.bracket_of(t) == 2)
    assert p.on_report(late, 1, 0.0) == CONTINUE and p.on_report(late, 3, 0.0) == CONTINUE
    assert p.recorded(2)[9] == {}  # not judged before its bracket's first rung (9)
    p.on_report(late, 9, 0.5)
    assert p.recorded(2)[9] == {late: 0.5}
