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


def test_the_rank_cutoff_passes_the_top_floor_n_over_rf_with_its_own_value():
    p = RungPolicy(1, 3, 9, cutoff="rank")
    got = [p.on_report(t, 1, v) for t, v in [("a", 0.5), ("b", 0.9), ("c", 0.8), ("d", 0.95),
                                              ("e", 0.85), ("f", 0.92), ("g", 0.95)]]
    # n = 1..5: only the best of the n passes (c: 0.9 beats it; the quantile rule would
    # pass it, 0.8 >= 0.7667); f: 2nd of 6, top 2 pass; g ties the best: passes
    assert got == [CONTINUE, CONTINUE, STOP, CONTINUE, STOP, CONTINUE, CONTINUE]
    quantile = RungPolicy(1, 3, 9).replay([("a", 1, 0.5), ("b", 1, 0.9), ("c", 1, 0.8)])
    assert quantile[2] == CONTINUE
    # constraints first: an infeasible value is beaten by every feasible one
    c = RungPolicy(1, 3, 9, cutoff="rank")
    c.replay([("a", 1, 0.1, 0.0), ("b", 1, 0.99, 0.5), ("c", 1, 0.2, 0.0)])
    assert c.on_report("d", 1, 0.98, violation=0.1) == STOP  # a and c, feasible, beat it
    assert c.on_report("e", 1, 0.3, violation=0.0) == CONTINUE  # the best feasible
    with pytest.raises(ValueError, match="cutoff must be 'quantile' or 'rank'"):
        RungPolicy(1, 3, 9, cutoff="median")


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
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "mode": ("max", "min"),
      "adaptive": True}, "adaptive brackets need one objective"),
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "adaptive": True,
      "min_pairs": 2}, "min_pairs must be >= 3"),
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "adaptive": True,
      "min_correlation": 1.5}, r"min_correlation must be within -1..1"),
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "adaptive": True,
      "probe_trials": -1}, "probe_trials must be >= 0"),
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "adaptive": True,
      "narrow_at": 1.5}, r"narrow_at must be within -1..1"),
    ({"grace_period": 1, "reduction_factor": 3, "max_t": 9, "adaptive": True,
      "probe_rate": 1.0}, r"probe_rate must be within 0..1"),
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
    # the spec's `brackets: 1, cutoff: quantile` is that policy
    from automl.search import make_policy
    from automl.spec import Experiment

    exp = Experiment.model_validate({"name": "r", "training": {"epochs": 27}, "scheduler": {
        "grace_period": 1, "reduction_factor": 3, "brackets": 1, "cutoff": "quantile"}})
    assert _drive(make_policy(exp).on_report, seed) == expected
    # the default rank cutoff does decide otherwise on these streams
    rank = _drive(RungPolicy(1, 3, 27, cutoff="rank").on_report, seed)
    assert [d for *_, d in rank] != [d for *_, d in expected]


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


def _feed(policy, n_trials: int, value, order_seed: int = 0) -> None:
    """``n_trials`` trials one after another, each reporting at every rung epoch of
    ``policy`` until stopped or done; ``value(trial, epoch)`` is what it reports."""
    for i in range(n_trials):
        t = f"t{i}"
        for epoch in policy.rung_epochs():
            if policy.on_report(t, epoch, value(t, epoch)) == STOP:
                break


def _quality(seed: int):
    rng = random.Random(seed)
    return {f"t{i}": rng.random() for i in range(400)}, rng


def test_adaptive_brackets_leave_a_rung_that_ranks_trials_poorly():
    """Epoch 1 is noise, epochs 3 and on rank trials by quality (LCBench's epoch 1 is
    like this: Spearman 0 with epoch 3): the window moves to start at epoch 3, and no
    trial drawn after that is judged at epoch 1."""
    quality, rng = _quality(0)
    noise = {t: rng.random() for t in quality}
    p = RungPolicy(1, 3, 27, brackets=2, seed=0, adaptive=True)
    assert p.brackets == [[1, 3, 9, 27], [3, 9, 27], [9, 27], [27]] and p.start == 0
    assert [w for w, _ in p.bracket_weights()] == pytest.approx([27 / 39, 12 / 39, 0, 0])
    _feed(p, 60, lambda t, e: noise[t] if e == 1 else quality[t] * (1 - 0.5 ** e))
    rho, pairs = p.rung_correlation(0)
    assert pairs >= 5 and rho < 0.5
    assert p.start == 1
    # the pairs are the trials not judged at epoch 1 (bracket-0 trials passed it selected)
    fed = [f"t{i}" for i in range(60)]
    assert pairs == sum(p.bracket_of(t) >= 1 for t in fed)
    assert any(p.bracket_of(t) == 0 and p.stopped_at(t) != 1 for t in fed)
    rho1, pairs1 = p.rung_correlation(1)  # epochs 3 and 9 do agree, once measured
    assert rho1 is None or rho1 >= 0.5
    weights = p.bracket_weights()
    assert weights[0][0] == 0 and weights[1][0] > weights[2][0] > 0 and weights[3][0] == 0
    judged_at_1 = len(p.recorded(0)[1])
    late = [f"late{i}" for i in range(30)]
    for t in late:
        assert p.bracket_of(t) in (1, 2)
        p.on_report(t, 1, rng.random())
    assert len(p.recorded(0)[1]) == judged_at_1  # none of them was judged at epoch 1
    assert all(p.bracket_of(t) in (1, 2) for t in late)
    summary = p.summary()
    assert summary["rungs"] == [1, 3, 9, 27] and summary["start_epoch"] == 3
    assert summary["correlations"][0] == {"from": 1, "to": 3, "spearman": round(rho, 4),
                                          "pairs": pairs}
    assert p.note().startswith("rungs  brackets start at epoch 3: ")
    assert f"epoch 1 vs 3: Spearman {rho:.2f} over {pairs} trials" in p.note()
    assert RungPolicy(1, 3, 27, brackets=2).note() is None


def test_adaptive_brackets_stay_and_decide_as_fixed_ones_where_low_rungs_rank_well():
    quality, rng = _quality(1)
    value = {}  # (trial, epoch) -> value, drawn once so both policies see the same
    for t in quality:
        for e in (1, 3, 9, 27):
            value[t, e] = quality[t] * (1 - 0.5 ** e) + rng.gauss(0, 0.01)
    adaptive = RungPolicy(1, 3, 27, brackets=2, seed=3, adaptive=True)
    fixed = RungPolicy(1, 3, 27, brackets=2, seed=3)
    _feed(adaptive, 80, lambda t, e: value[t, e])
    _feed(fixed, 80, lambda t, e: value[t, e])
    rho, pairs = adaptive.rung_correlation(0)
    assert pairs >= 5 and rho > 0.9 and adaptive.start == 0
    assert adaptive.recorded(0) == fixed.recorded(0)
    assert adaptive.recorded(1) == fixed.recorded(1)
    assert all(adaptive.stopped_at(t) == fixed.stopped_at(t) for t in quality)
    assert adaptive.bracket_weights()[:2] == fixed.bracket_weights()


def test_adaptive_brackets_are_rebuilt_from_their_events_and_fixed_at_first_report():
    quality, rng = _quality(2)
    noise = {t: rng.random() for t in quality}
    events = []
    first = RungPolicy(1, 3, 27, brackets=2, seed=4, adaptive=True)

    def record(t, e):
        v = noise[t] if e == 1 else quality[t]
        events.append((t, e, v))
        return v
    _feed(first, 50, record)
    assert first.start == 1
    rebuilt = RungPolicy.from_events(events, grace_period=1, reduction_factor=3, max_t=27,
                                     brackets=2, seed=4, adaptive=True)
    assert rebuilt.start == first.start
    assert rebuilt.rung_correlation(0) == first.rung_correlation(0)
    for k in range(4):
        assert rebuilt.recorded(k) == first.recorded(k)
    for t in quality:
        assert rebuilt.stopped_at(t) == first.stopped_at(t)
    # asking for a trial's bracket before its first report does not fix it
    fresh = RungPolicy(1, 3, 27, brackets=2, seed=4, adaptive=True)
    t = next(t for t in (f"x{i}" for i in range(100)) if fresh.bracket_of(t) == 0)
    fresh.replay(events)  # the window moved meanwhile
    assert fresh.start == 1 and fresh.bracket_of(t) == 1
    fresh.on_report(t, 1, 0.5)
    assert fresh.bracket_of(t) == 1 and t not in fresh.recorded(0)[1]


def test_adaptive_brackets_never_start_at_max_t():
    """Rungs 2, 6, 18 of 18 epochs (the digits spec): however poorly epoch 6 ranks trials
    for epoch 18, the window starts at 6 at most, and its trials are still judged there."""
    rng = random.Random(5)
    p = RungPolicy(2, 3, 18, brackets=2, seed=1, adaptive=True)
    _feed(p, 120, lambda t, e: rng.random())  # every rung is noise
    assert p.rung_correlation(0)[1] >= 5 and p.rung_correlation(1)[1] >= 5
    assert p.rung_correlation(1)[0] < 0.5
    assert p.start == 1 and p.summary()["start_epoch"] == 6
    weights = [w for w, _ in p.bracket_weights()]
    assert weights[0] == 0 and weights[1] > weights[2] > 0


def test_probes_measure_the_first_rung_from_the_start_and_a_good_rung_narrows_the_window():
    """The first 6 trials pass epoch 1 unjudged (bracket 1), so epoch 1's correlation with
    epoch 3 is known after 6 trials; it ranks well here, so the window narrows to bracket
    0 with 10% of new trials still probing, and decides as plain ASHA for the rest."""
    quality, rng = _quality(6)
    value = {(t, e): quality[t] * (1 - 0.5 ** e) + rng.gauss(0, 0.01)
             for t in quality for e in (1, 3, 9, 27)}
    p = RungPolicy(1, 3, 27, brackets=2, seed=0, adaptive=True, probe_trials=6,
                   narrow_at=0.8, probe_rate=0.1)
    assert not p.narrowed
    _feed(p, 6, lambda t, e: value[t, e])
    probes = [f"t{i}" for i in range(6)]
    assert all(p.bracket_of(t) == 1 for t in probes) and p.recorded(0)[1] == {}
    rho, pairs = p.rung_correlation(0)
    assert pairs == 6 and rho >= 0.8
    assert p.narrowed and p.start == 0
    assert [w for w, _ in p.bracket_weights()] == pytest.approx([0.9, 0.1, 0, 0])
    assert p.summary()["narrowed"] is True and p.summary()["probe_trials"] == 6
    assert p.note() == ("rungs  one bracket from epoch 1: it ranked trials well for the next "
                        f"rung (epoch 1 vs 3: Spearman {rho:.2f} over 6 trials); 10% of "
                        "trials still pass it unjudged")
    _feed(p, 200, lambda t, e: value[t, e])
    later = [f"t{i}" for i in range(6, 200)]
    share = sum(p.bracket_of(t) == 1 for t in later) / len(later)
    assert 0.04 < share < 0.17 and all(p.bracket_of(t) in (0, 1) for t in later)
    # without narrowing the 2-bracket window puts about 12/39 of trials in bracket 1
    wide = RungPolicy(1, 3, 27, brackets=2, seed=0, adaptive=True, probe_trials=6)
    _feed(wide, 200, lambda t, e: value[t, e])
    assert not wide.narrowed
    assert sum(wide.bracket_of(t) == 1 for t in later) / len(later) > 0.2
    # rebuilt from its events, a narrowed policy is the same policy
    events = []
    first = RungPolicy(1, 3, 27, brackets=2, seed=0, adaptive=True, probe_trials=6,
                       narrow_at=0.8)

    def record(t, e):
        events.append((t, e, value[t, e]))
        return value[t, e]
    _feed(first, 60, record)
    rebuilt = RungPolicy.from_events(events, grace_period=1, reduction_factor=3, max_t=27,
                                     brackets=2, seed=0, adaptive=True, probe_trials=6,
                                     narrow_at=0.8)
    assert rebuilt.narrowed and first.narrowed
    assert all(rebuilt.bracket_of(f"t{i}") == first.bracket_of(f"t{i}") for i in range(60))
    assert all(rebuilt.stopped_at(f"t{i}") == first.stopped_at(f"t{i}") for i in range(60))


def test_probes_move_the_window_off_a_noise_rung_without_narrowing_it():
    """Epoch 1 is noise: the probes show it at once, the window starts at epoch 3 after
    the probes, and a poor rung never narrows the window."""
    quality, rng = _quality(7)
    noise = {t: rng.random() for t in quality}
    p = RungPolicy(1, 3, 27, brackets=2, seed=1, adaptive=True, probe_trials=8,
                   narrow_at=0.8)
    _feed(p, 8, lambda t, e: noise[t] if e == 1 else quality[t] * (1 - 0.5 ** e))
    rho, pairs = p.rung_correlation(0)
    assert pairs == 8 and rho < 0.5 and p.start == 1
    assert p.recorded(0)[1] == {}  # no trial was judged at epoch 1
    assert p.note().startswith("rungs  brackets start at epoch 3: the epochs below ranked "
                               "trials poorly for the next rung (epoch 1 vs 3: Spearman")


def test_the_note_says_a_correlation_is_no_longer_measurable_instead_of_crashing(monkeypatch):
    p = RungPolicy(1, 3, 27, brackets=2, adaptive=True)
    p.start = 1  # the window moved on a correlation that the final reports made constant
    monkeypatch.setattr(p, "summary", lambda: {"start_epoch": 3, "correlations": [
        {"from": 1, "to": 3, "spearman": None, "pairs": 4},
        {"from": 3, "to": 9, "spearman": 0.5, "pairs": 3}]})
    assert "epoch 1 vs 3: Spearman not measurable over 4 trials" in p.note()
