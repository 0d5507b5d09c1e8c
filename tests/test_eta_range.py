"""The ETA's range, without Ray: the sweep's Monte Carlo and its conformal calibration
(``automl.search._eta``), the range of the other stages and its text
(``automl._progress``), the run's history of estimates and what ``automl dashboard``
shows of it."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from rich.console import Console

from automl._progress import (
    PRIOR_RANGE,
    Eta,
    EtaHistory,
    StageProgress,
    eta_text,
    latest_eta_line,
    read_eta_history,
)
from automl.search._eta import (
    Calibration,
    TrialState,
    calibrate,
    fit_calibration,
    sweep_eta,
    sweep_quantiles,
)

#: 2 slots, rungs at 1 and 3 of 9, half the trials judged so far continued
KW = dict(rungs=[1, 3], passed={1: (4, 8), 3: (1, 3)}, reduction_factor=3.0, epoch_s=0.2,
          elapsed_s=12.0, slots=2, epochs_done=30)


def _seen(spread: float, n: int = 12) -> list[TrialState]:
    """``n`` ended trials whose seconds per epoch average 0.2 with the given relative
    ``spread`` (half of them 0.2 (1 - spread), half 0.2 (1 + spread))."""
    return [TrialState(3, 9, True, 0, 0.2 * (1 + spread * (1 if i % 2 else -1)))
            for i in range(n)]


def _width(q) -> float:
    lo, mid, hi = q
    return (hi - lo) / mid


def test_the_range_widens_with_the_spread_of_epoch_times():
    known = {**KW, "passed": {1: (400, 800), 3: (100, 300)}}  # rates all but known
    narrow = sweep_quantiles(_seen(0.05), 40, **known)
    wide = sweep_quantiles(_seen(0.8), 40, **known)
    assert narrow[0] <= narrow[1] <= narrow[2] and wide[0] <= wide[1] <= wide[2]
    assert _width(wide) > 2 * _width(narrow)


def test_the_range_narrows_as_a_rungs_continue_rate_is_known_better():
    few = sweep_quantiles(_seen(0.0), 40, **{**KW, "passed": {1: (2, 4), 3: (1, 2)}})
    many = sweep_quantiles(_seen(0.0), 40, **{**KW, "passed": {1: (200, 400), 3: (100, 200)}})
    assert _width(many) < _width(few)


def test_the_range_collapses_to_the_point_when_everything_is_known():
    # one running trial past its last rung at its own 0.5 s an epoch, nothing to come
    running = [TrialState(3, 9, True, 0, 0.2), TrialState(4, 9, False, 0, 0.5)]
    lo, mid, hi = sweep_quantiles(running, 2, **KW)
    assert lo == mid == hi == pytest.approx(0.5 * 5)
    # trials to come that all cost the same, no early stopping, one slot: the Monte Carlo
    # is the expectation, sweep_eta's point
    same = [TrialState(4, 4, True, 0, 0.2)] * 5
    kw = {**KW, "rungs": [], "passed": {}, "reduction_factor": None, "slots": 1,
          "epochs_done": 20, "elapsed_s": 9.0}
    lo, mid, hi = sweep_quantiles(same, 12, **kw)
    assert lo == mid == hi == pytest.approx(sweep_eta(same, 12, **kw))


def test_it_is_deterministic_for_a_seed():
    trials = [*_seen(0.5), TrialState(1, 9, False, 0, 0.3), TrialState(0, 6, False)]
    a = sweep_quantiles(trials, 40, **KW, seed=7)
    assert sweep_quantiles(trials, 40, **KW, seed=7) == a
    assert sweep_quantiles(trials, 40, **KW, seed=8) != a


def test_the_last_trials_tail_counts_on_two_slots():
    # one trial of 10 epochs to come, two free slots: it takes 10 x 0.2 s + overhead on
    # one slot; the expectation spreads its work over both slots
    done = [TrialState(10, 10, True, 0, 0.2), TrialState(10, 10, True, 0, 0.2)]
    kw = {**KW, "rungs": [], "passed": {}, "reduction_factor": None, "epochs_done": 20,
          "elapsed_s": 2 * 0.2 * 10 / 2 + 1.0}  # 1 s of overhead per trial on 2 slots
    lo, mid, hi = sweep_quantiles(done, 3, **kw)
    assert mid == pytest.approx(10 * 0.2 + 1.0)
    assert sweep_eta(done, 3, **kw) == pytest.approx(mid / 2)


def test_it_is_capped_by_the_search_time_budget():
    q = sweep_quantiles(_seen(0.8), 40, **KW, time_budget_s=15.0)
    assert max(q) <= 3.0  # 15 s less the 12 s spent
    assert calibrate(q, Calibration(0.1, 0.5), cap_s=3.0).high <= 3.0


def test_none_before_an_epoch_and_bad_arguments():
    assert sweep_quantiles([], 4, **{**KW, "epochs_done": 0}) is None
    with pytest.raises(ValueError, match="draws must be >= 1"):
        sweep_quantiles(_seen(0.1), 4, **KW, draws=0)


def test_calibrate_widens_the_raw_range_and_shifts_the_point():
    eta = calibrate((10.0, 20.0, 30.0), Calibration(shift=math.log(1.1), widen=math.log(2)))
    assert (eta.low, eta.s, eta.high) == pytest.approx((5.0, 22.0, 60.0))
    # narrowed past the point: the range still holds it
    eta = calibrate((18.0, 20.0, 22.0), Calibration(shift=0.0, widen=-0.5))
    assert eta.low <= eta.s <= eta.high and eta.s == 20.0


def test_the_conformal_fit_reaches_its_coverage_on_fresh_moments():
    """Raw ranges that cover only about half of the truth, in log space; fitted on 300
    moments, the calibrated 80% range covers 80% of 4000 others (CQR's guarantee: at least
    80%, at most 80% + 1/(n+1) in expectation)."""
    rng = np.random.default_rng(0)

    def moments(n):
        mid = rng.uniform(5, 60, n)
        y = mid * np.exp(rng.normal(0.1, 0.3, n))  # the truth runs 10% over the median
        return [(m * 0.85, m, m * 1.15, t) for m, t in zip(mid, y, strict=True)]

    fit = fit_calibration(moments(300))
    assert fit.n == 300 and fit.widen > 0 and fit.shift == pytest.approx(0.1, abs=0.05)
    fresh = moments(4000)
    raw_cover = np.mean([lo <= y <= hi for lo, _, hi, y in fresh])
    cover = np.mean([(e := calibrate((lo, m, hi), fit)).low <= y <= e.high
                     for lo, m, hi, y in fresh])
    assert raw_cover < 0.5 and 0.77 <= cover <= 0.84


def test_the_conformal_fit_takes_the_ceil_n_plus_1_level_th_score():
    # scores log(lo / y) of 9 moments: 0.1, 0.2, ..., 0.9 -> ceil(10 x 0.8) = 8th: 0.8
    rows = [(math.exp(k / 10), 2.0, 3.0, 1.0) for k in range(1, 10)]
    fit = fit_calibration(rows)
    assert fit.widen == pytest.approx(0.8) and fit.n == 9
    assert fit.shift == pytest.approx(math.log(1 / 2), abs=1e-4)  # kept to 4 decimals
    assert fit_calibration(rows) == fit  # deterministic
    assert fit_calibration(rows[:2]).widen == pytest.approx(0.2)  # too few: the largest
    with pytest.raises(ValueError, match="at least one"):
        fit_calibration([])
    with pytest.raises(ValueError, match="figures > 0"):
        fit_calibration([(1.0, 2.0, 3.0, 0.0)])


def test_eta_text_and_its_checks():
    assert eta_text(Eta(40, 30, 70)) == "40s (30-70s)"
    assert eta_text(Eta(245.4, 190, 360)) == "4m05s (3m10s-6m00s)"
    assert eta_text(Eta(50, 45, 75)) == "50s (45-75s)"  # the range in the point's unit
    assert eta_text(Eta(70, 45, 130)) == "1m10s (45s-2m10s)"
    assert eta_text(None) == "-" and eta_text(12.0) == "12s"
    with pytest.raises(ValueError, match="low <= s <= high"):
        Eta(10, 12, 20)
    assert Eta(10, 5, 20).less(8) == Eta(2, 0, 12)
    assert Eta(10, 5, 20).capped(7) == Eta(7, 5, 7)
    assert Eta.of(10.0) == Eta(10.0, 10.0 * PRIOR_RANGE[0], 10.0 * PRIOR_RANGE[1])


def _bar(gaps: list[float], slots: int = 1):
    now = [0.0]
    bar = StageProgress(Console(file=io.StringIO()), "compress", 10, eta_s=50.0, slots=slots,
                        clock=lambda: now[0])
    for g in gaps:
        now[0] += g
        bar.step()
    return bar


def test_a_stages_range_comes_from_the_spread_of_its_step_times():
    before = _bar([])
    assert before.eta == Eta.of(50.0)  # the a-priori estimate and its stated range
    even = _bar([4.0, 4.0, 4.0, 4.0])
    assert even.eta == Eta(24.0, 24.0, 24.0)  # 6 steps left at 4 s: nothing uncertain
    uneven = _bar([4.0, 1.0, 7.0, 4.0])
    e = uneven.eta
    assert e.s == pytest.approx(24.0) and e.low < 20.0 and e.high > 29.0
    # the first slots' steps carry the workers' start: not in the spread
    assert _bar([30.0, 4.0, 4.0, 4.0]).eta.low == _bar([30.0, 4.0, 4.0, 4.0]).eta.s


def test_the_history_of_estimates_and_the_dashboards_line(tmp_path):
    from automl.dashboard import eta_line

    now = [1000.0]
    history = EtaHistory(tmp_path / "eta.jsonl", clock=lambda: now[0])

    class View:
        done, total, eta, elapsed_s = 12, 40, Eta(40.2, 30.0, 70.0), 21.0

    history.finish(None, View())
    history("cv", 0, 9, None, 0.0)  # no estimate yet: nothing written
    now[0] = 1050.0
    history("cv", 2, 9, Eta(12.0, 9.0, 15.0), 4.5)
    got = read_eta_history(tmp_path / "eta.jsonl")
    assert got == {"sweep": [{"time": 1000.0, "elapsed_s": 21.0, "done": 12, "total": 40,
                              "eta_s": 40.2, "low_s": 30.0, "high_s": 70.0}],
                   "cv": [{"time": 1050.0, "elapsed_s": 4.5, "done": 2, "total": 9,
                           "eta_s": 12.0, "low_s": 9.0, "high_s": 15.0}]}
    with open(tmp_path / "eta.jsonl", "a") as f:
        f.write('{"stage": "cv", "torn')  # a killed writer
    assert latest_eta_line(tmp_path / "eta.jsonl", now=1053.0) == \
        "cv 2/9  eta 12s (9-15s), 3s ago"
    assert eta_line(tmp_path, now=1053.0).startswith("cv 2/9  eta 12s (9-15s)")
    assert eta_line(tmp_path / "nothing").startswith("none yet")
    assert read_eta_history(tmp_path / "nothing.jsonl") == {}


def test_summary_json_holds_the_history_of_estimates(tmp_path):
    from automl.pipeline import compose_summary
    from automl.spec import Experiment

    exp = Experiment.model_validate({"name": "h"})
    EtaHistory(tmp_path / "eta.jsonl", clock=lambda: 5.0)("refit", 1, 1, Eta(3, 2, 4), 1.0)
    summary = compose_summary(exp, tmp_path, {"rows": 1})
    assert summary["eta_history"]["refit"][0]["high_s"] == 4.0
    assert json.loads((tmp_path / "summary.json").read_text())["eta_history"] == \
        summary["eta_history"]
