"""The job's progress, ETA and budget, without Ray: the sweep's ETA model, the stage
progress lines, and the job budget's estimates and shrinking."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from automl._progress import Eta, StageProgress, eta_text
from automl.budget import HIGH, Candidate, JobBudget, _parallel, candidate_of
from automl.search import RungPolicy
from automl.search._adapters import BudgetStopper
from automl.search._eta import TrialState, expected_epochs, sweep_eta
from automl.search._tuner import warm_point
from automl.spec import Experiment


def test_expected_epochs_follow_the_rungs():
    half = lambda r: 0.5  # noqa: E731
    # rungs 1 and 3, target 9: 1 epoch surely, 2 more with p 0.5, 6 more with p 0.25
    assert expected_epochs(0, 9, [1, 3, 9], half) == pytest.approx(1 + 0.5 * 2 + 0.25 * 6)
    assert expected_epochs(3, 9, [1, 3, 9], half) == 6  # judged at 3 already: runs on
    assert expected_epochs(4, 4, [1, 3], half) == 0
    assert expected_epochs(0, 4, [], half) == 4  # no early stopping


def test_sweep_eta_counts_running_and_unstarted_trials_and_overhead():
    # one ended, two running (at epochs 3 and 1), one not started; 9 epochs each
    trials = [TrialState(1, 9, True), TrialState(3, 9, False), TrialState(1, 9, False)]
    eta = sweep_eta(trials, 4, rungs=[1, 3], passed={1: (1, 2), 3: (0, 1)},
                    reduction_factor=3.0, epoch_s=1.0, elapsed_s=10.0, slots=1, epochs_done=5)
    p1 = (1 + 3 / 3) / (2 + 3)      # continue rate at rung 1 with the 1/3 prior worth 3
    p3 = (0 + 3 / 3) / (1 + 3)
    running = 6 + (2 + p3 * 6)      # past every rung; at rung 1, judged at 3 next
    one_new = 1 + p1 * 2 + p1 * p3 * 6
    overhead = (10.0 - 5) / 3       # slot time not in epochs, per trial started
    assert eta == pytest.approx(running + one_new + overhead)
    capped = sweep_eta(trials, 4, rungs=[1, 3], passed={}, reduction_factor=3.0, epoch_s=1.0,
                       elapsed_s=10.0, slots=1, epochs_done=5, time_budget_s=12.0)
    assert capped == 2.0
    assert sweep_eta([], 4, rungs=[], passed={}, reduction_factor=None, epoch_s=1.0,
                     elapsed_s=0.0, slots=2, epochs_done=0) is None


def test_sweep_eta_charges_the_cold_start_once_not_to_every_trial_to_come():
    # 2 slots; both trials started only at 4 s (Tune's set-up, torch imports), then
    # 3 more started by 10 s with 0.2 s of slot time outside epochs each
    trials = [TrialState(2, 2, True), TrialState(2, 2, True), TrialState(2, 2, True),
              TrialState(1, 2, False), TrialState(1, 2, False)]
    kw = dict(rungs=[], passed={}, reduction_factor=None, epoch_s=1.0, elapsed_s=10.0,
              slots=2, epochs_done=8)
    cold = sweep_eta(trials, 10, **kw)
    warm = sweep_eta(trials, 10, **kw, warm=(4.0, 0, 2))
    left_epochs = 2 * 1 + 5 * 2
    assert cold == pytest.approx((left_epochs + 5 * (20 - 8) / 5) / 2)  # 2.4 s a trial
    assert warm == pytest.approx((left_epochs + 5 * ((10 - 4) * 2 - 8) / 3) / 2)
    assert warm < cold
    # before every slot has started a trial (or with no start since), the old measure
    assert sweep_eta(trials, 10, **kw, warm=(4.0, 0, 5)) == pytest.approx(cold)


def test_warm_point_is_the_slots_th_start_of_this_session():
    trials = [TrialState(0, 2, False)] * 4  # one from an earlier session, 3 started now
    starts = [(3.0, 0), (3.5, 0), (6.0, 4)]
    assert warm_point(starts[:1], trials, 2) is None
    assert warm_point(starts, trials, 2) == (3.5, 0, 3)  # 1 earlier + 2 started by then


def test_policy_counts_who_continued_at_each_rung():
    p = RungPolicy(1, 2, 4)
    p.replay([("a", 1, 0.5), ("b", 1, 0.9), ("c", 1, 0.1), ("b", 2, 0.95)])
    assert p.pass_counts() == {1: (2, 3), 2: (1, 1)}  # c stopped at 1


def test_stage_progress_prints_a_line_per_step_off_a_terminal():
    buf = io.StringIO()
    now = [0.0]
    seen = []
    bar = StageProgress(Console(file=buf, width=200), "cv", 4, work=8, eta_s=30.0,
                        publish=lambda *a: seen.append(a), clock=lambda: now[0])
    assert bar.eta_s == 30.0  # before any step: the estimate given
    now[0] = 5.0
    bar.step("trial 3 fold 1: accuracy 0.9900", work=2)
    assert bar.eta_s == pytest.approx(5.0 / 2 * 6)  # 2 of 8 epochs in 5 s
    bar.close()
    line = buf.getvalue().strip()
    # one step measured: the a-priori relative range (0.4-1.3) around the measured point
    assert line == "cv     1/4  elapsed 5s  eta 15s (6-20s)  trial 3 fold 1: accuracy 0.9900"
    assert seen[0] == ("cv", 0, 4, Eta(30.0, 12.0, 39.0), 0.0)
    assert seen[-1] == ("cv", 1, 4, Eta(0.0, 0.0, 0.0), 5.0)
    assert eta_text(None) == "-" and eta_text(245.4) == "4m05s" and eta_text(59.6) == "1m00s"


def _budget(spec: dict, now: list[float]) -> JobBudget:
    exp = Experiment.model_validate(spec)
    return JobBudget(exp, train_rows=1000, pool_rows=1400, slots=2, t0=0.0,
                     clock=lambda: now[0])


def test_cv_shrinks_to_fit_what_the_budget_leaves_and_says_so():
    now = [0.0]
    b = _budget({"budget_s": 400, "selection": {"top_k": 5, "cv_folds": 5}}, now)
    cands = [Candidate(10, 1e-3)] * 5  # 10 epochs x 1,120 rows x 1 ms + 1.5 s: 12.7 s a fold
    assert b.fit_cv(cands) == (5, 5) and b.notes == []  # 25 folds on 2 slots: ~190 s
    now[0] = 300.0  # 100 s left: they no longer fit
    top_k, folds = b.fit_cv(cands)
    assert (top_k, folds) < (5, 5) and top_k >= 2 and folds >= 2
    assert b.cv_s(cands, folds, top_k) * HIGH <= b.left_s or (top_k, folds) == (2, 2)
    assert b.notes and b.notes[-1].startswith("budget cv shrunk from 5 candidates x 5 folds")
    free = _budget({"selection": {"top_k": 5, "cv_folds": 5}}, now)  # no budget_s
    assert free.fit_cv(cands) == (5, 5) and free.notes == []


def test_the_search_ends_when_the_later_stages_would_not_fit():
    now = [0.0]
    b = _budget({"budget_s": 100, "selection": {"top_k": 2, "cv_folds": 2}}, now)
    cands = [Candidate(10, 1e-3), Candidate(10, 1e-3)]
    later = b.later_s(cands)
    assert 0 < later < 100 and set(b.estimates) == {"cv", "refit", "compression", "publish"}
    now[0] = 100 - later - 1
    assert not b.search_over(cands)
    now[0] = 100 - later + 1
    assert b.search_over(cands) and b.search_stopped_at_s == pytest.approx(now[0], abs=0.1)
    rec = b.record(wall_s=99.0)
    assert rec["within"] is True and rec["budget_s"] == 100


def test_the_budget_plans_with_the_upper_end_and_says_when_that_cost_trials():
    now = [0.0]
    spec = {"budget_s": 100, "selection": {"top_k": 2, "cv_folds": 2}}
    b = _budget(spec, now)
    cands = [Candidate(10, 1e-3), Candidate(10, 1e-3)]
    later = b.later(cands)
    assert later.high == pytest.approx(later.s * HIGH) and later.low < later.s
    assert b.estimates["cv"]["high_s"] == pytest.approx(b.cv_s(cands) * HIGH, abs=0.01)
    now[0] = 100 - later.high - 1
    assert not b.search_over(cands, pace=(10, 30, 20.0))
    now[0] = 100 - later.high + 1  # the point still fits: only the upper end ends it
    assert b.search_over(cands, pace=(10, 30, 20.0))  # 10 trials ended in 20 s
    slack = 100 - now[0] - later.s
    cost = math.floor(slack * 10 / 20.0)
    assert cost >= 1
    line = b.stop_line()
    assert line.startswith(f"budget search ended at {now[0]:.0f} s of budget_s 100") and \
        line.endswith(f"run {slack:.0f} s more: about {cost} more trials ended")
    assert b.record()["trials_cost_by_upper_end"] == cost and b.record()["search_stop"] == line
    # past what the point allows too: the upper end cost nothing, the line says nothing of it
    late = [100 - later.s + 1]
    b2 = _budget(spec, late)
    assert b2.search_over(cands, pace=(10, 30, 20.0))
    assert "more trial" not in b2.stop_line() and b2.record()["trials_cost_by_upper_end"] == 0
    # never more trials than were left to end
    b3 = _budget(spec, [100 - later.high + 1])
    assert b3.search_over(cands, pace=(38, 2, 20.0)) and b3.stop[2] == 2
    assert _budget({"selection": {"top_k": 2}}, [1e9]).stop_line() is None


def test_compression_epochs_scale_down_to_fit():
    now = [0.0]
    stages = [{"stage": "distill", "student": {"family": "resnet", "width": 4, "depth": 1},
               "epochs": 40}, {"stage": "prune", "fine_tune_epochs": 20}]
    b = _budget({"budget_s": 60, "compression": {"enabled": True, "stages": stages}}, now)
    w = Candidate(10, 1e-3)  # teacher: 1 s an epoch; the student 0.3 s: 60 epochs = 18 s
    now[0] = 40.0  # 20 s left; the chain needs (18 + 4 x 2 s) x 1.3 = 34 s
    comp = b.fit_compression(w)
    assert 1 <= comp.stages[0].epochs < 40 and 1 <= comp.stages[1].fine_tune_epochs < 20
    assert b.notes[-1].startswith("budget compression training epochs scaled by")
    assert _budget({"compression": {"enabled": True, "stages": stages}}, now) \
        .fit_compression(w).stages[0].epochs == 40  # no budget: unchanged
    now[0] = 52.0  # 8 s left: not even the fixed cost (5 x 2 s x 1.3): skipped, said
    assert b.fit_compression(w).enabled is False
    assert b.notes[-1].startswith("budget compression skipped to fit budget_s 60") \
        and b.notes[-1].endswith("automl compress RUN_DIR")


def test_cv_shrinks_to_one_candidate_when_two_by_two_folds_do_not_fit():
    now = [0.0]
    b = _budget({"budget_s": 100, "selection": {"top_k": 3, "cv_folds": 3}}, now)
    cands = [Candidate(10, 1e-3)] * 3
    one, two = b.cv_s(cands, 2, 1) * HIGH, b.cv_s(cands, 2, 2) * HIGH
    assert one < two
    rest = (b.after_cv_s(cands[0]) + 3.0) * HIGH  # refit, compression, publish
    now[0] = 100 - rest - (one + two) / 2  # room between what 1 x 2 and 2 x 2 folds need
    assert b.fit_cv(cands) == (1, 2)
    assert b.notes[-1].startswith("budget cv shrunk from 3 candidates x 3 folds to 1 x 2")


def test_helpers():
    assert _parallel([4, 3, 3, 2], 2) == 6
    assert candidate_of([], 4, 100) is None
    c = candidate_of([{"epoch": 1, "train_time_s": 0.2, "eval_time_s": 0.05},
                      {"epoch": 2, "train_time_s": 0.3, "eval_time_s": 0.05}], 6, 100)
    assert c.epochs == 6 and c.s_per_row_epoch == pytest.approx(0.3 / 100)


def test_budget_stopper_asks_at_most_once_a_second_and_stays_stopped():
    now, calls = [0.0], []

    def over():
        calls.append(now[0])
        return now[0] >= 2.0

    s = BudgetStopper(over, every_s=1.0, clock=lambda: now[0])
    assert not s.stop_all() and not s.stop_all() and len(calls) == 1
    now[0] = 2.5
    assert s.stop_all() and s.stop_all() and len(calls) == 2
    assert s("trial", {}) is False


def test_sweep_eta_runs_each_trial_on_its_own_brackets_rungs():
    """Hyperband: a trial of the bracket starting at 3 is not judged at 1; a trial not
    started yet is in each bracket with the policy's probability."""
    policy = RungPolicy(1, 3, 9, brackets=2, seed=0)
    weights = policy.bracket_weights()
    assert [r for _, r in weights] == [[1, 3, 9], [3, 9]]
    assert sum(w for w, _ in weights) == pytest.approx(1.0)
    half = {1: (1, 2), 3: (1, 2)}  # continue rate 1/2 at both rungs, with the 1/2 prior
    kw = dict(passed=half, reduction_factor=2.0, epoch_s=1.0, elapsed_s=1.0, slots=1,
              epochs_done=1, rungs=[1, 3])
    running = [TrialState(1, 9, True), TrialState(1, 9, False, 1)]  # at 1, in bracket 1
    eta = sweep_eta(running, 3, brackets=weights, **kw)
    in_b1 = 2 + 0.5 * 6  # from 1: to rung 3 surely, past it with p 1/2
    new = weights[0][0] * (1 + 0.5 * 2 + 0.25 * 6) + weights[1][0] * (3 + 0.5 * 6)
    assert eta == pytest.approx(in_b1 + new)
    # one bracket (the default argument): the same trial would be judged at 3 only, too
    assert sweep_eta(running, 3, **kw) == pytest.approx(in_b1 + 1 + 0.5 * 2 + 0.25 * 6)


def test_the_refit_beside_the_chain_counts_once_in_the_later_stages():
    stages = [{"stage": "prune", "fine_tune_epochs": 20}]
    w = Candidate(10, 1e-3)
    on = _budget({"budget_s": 100, "compression": {"enabled": True, "stages": stages}}, [0.0])
    assert on.refit_beside_compression
    refit, comp = on.refit_s(w), on.compression_s(w)
    assert on.after_cv_s(w) == pytest.approx(max(refit, comp))
    assert on.later_s([w]) == pytest.approx((on.cv_s([w]) + max(refit, comp) + 3.0) * HIGH)
    one_slot = JobBudget(on.exp, train_rows=1000, pool_rows=1400, slots=1, t0=0.0)
    assert not one_slot.refit_beside_compression
    assert one_slot.after_cv_s(w) == pytest.approx(refit + comp)
    off = _budget({"budget_s": 100, "compression": {"enabled": False}}, [0.0])
    assert not off.refit_beside_compression and off.after_cv_s(w) == pytest.approx(refit)
