"""The search-quality benchmark's machinery: the simulated-clock driver charges what the
issue says and orders asynchronous reports by the clock, it replays the single-trial
simulation the Ray Tune check is made against, and the statistics and ``--problems``
parsing do what they claim."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO))

from benchmarks import _events, _simulate, _sqstats, search_quality  # noqa: E402
from benchmarks._events import Job  # noqa: E402
from benchmarks._problems import Problem, ProblemError, parse_problems  # noqa: E402

PARAMS = [f"X_{i}" for i in range(6)]


def _cs():
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=0)
    cs.add([CS.UniformFloatHyperparameter(p, 0.0, 1.0) for p in PARAMS])
    return cs


def bowl(config: dict, epoch: int) -> float:
    return sum((config[p] - 0.3) ** 2 for p in PARAMS) + 1.0 / epoch


def toy(max_t: int = 9, resumable: bool = True) -> Problem:
    """Score = -bowl; cost (s) = t x the config's ``X_0`` + 1 (cumulative)."""
    return Problem("toy", "toy", max_t, resumable, _cs(),
                   lambda c, t: (-bowl(c, t), t * (c["X_0"] + 1.0)))


class Scripted:
    """Hands out the given jobs in order; ``stop_at[trial]`` is where tell says stop."""

    def __init__(self, jobs, stop_at=None):
        self.jobs, self.stop_at, self.told, self.finished = list(jobs), stop_at or {}, [], []

    def ask(self):
        return self.jobs.pop(0) if self.jobs else None

    def tell(self, job, t, score, cost_s):
        self.told.append((job.trial, t))
        return t < self.stop_at.get(job.trial, 10**9)

    def finish(self, job, t, score):
        self.finished.append((job.trial, t))


def _cfg(x0: float) -> dict:
    return {p: (x0 if p == "X_0" else 0.3) for p in PARAMS}


def test_a_stopped_trial_pays_the_epochs_it_computed_and_a_restart_pays_again():
    jobs = [Job(0, _cfg(0.5), [1, 3, 9]), Job(1, _cfg(0.5), [1, 3, 9]),
            Job(2, _cfg(0.5), [9])]  # trial 2: trial 1's config restarted at 9
    runner = Scripted(jobs, stop_at={1: 3})
    ev = _events.run(toy(), runner, budget_units=100)
    assert [(e.trial, e.fidelity, e.budget) for e in ev] == [
        (0, 1, 1), (0, 3, 3), (0, 9, 9), (1, 1, 10), (1, 3, 12), (2, 9, 21)]
    assert [e.full for e in ev] == [False, False, True, False, False, True]
    assert runner.finished == [(0, 9), (1, 3), (2, 9)]
    # simulated time: cumulative cost, resumed: the last report is at 3 x 1.5 x 3 + 9 x 1.5
    assert ev[-1].time == pytest.approx(1.5 * 9 + 1.5 * 3 + 1.5 * 9)


def test_a_fidelity_that_cannot_resume_is_charged_in_full_at_every_evaluation():
    ev = _events.run(toy(resumable=False), Scripted([Job(0, _cfg(0.5), [1, 3, 9])]), 100)
    assert [e.budget for e in ev] == [1, 4, 13]


def test_the_budget_ends_the_run_before_a_step_that_would_pass_it():
    runner = Scripted([Job(0, _cfg(0.5), [1, 3, 9]), Job(1, _cfg(0.5), [1, 3, 9])])
    ev = _events.run(toy(), runner, budget_units=11)
    assert [(e.trial, e.fidelity) for e in ev] == [(0, 1), (0, 3), (0, 9), (1, 1)]
    assert ev[-1].budget == 10


def test_asynchronous_workers_report_in_the_order_of_the_simulated_clock():
    # trial 0 is slow (cost 2 s per epoch), trials 1 and 2 fast (1 s per epoch)
    jobs = [Job(0, _cfg(1.0), [3]), Job(1, _cfg(0.0), [1, 2]), Job(2, _cfg(0.0), [2])]
    runner = Scripted(jobs)
    ev = _events.run(toy(max_t=3), runner, 100, workers=2)
    # t=1: trial 1 at 1; t=2: trial 1 at 2 (its worker then takes trial 2, 2 s);
    # t=4: trial 2 at 2, though trial 0 started first; t=6: trial 0 at 3
    assert [(e.trial, e.fidelity) for e in ev] == [(1, 1), (1, 2), (2, 2), (0, 3)]
    assert [e.time for e in ev] == [1.0, 2.0, 4.0, 6.0]
    # a tie (both end at 3 s): the step started first is reported first
    tie = _events.run(toy(max_t=3), Scripted([Job(0, _cfg(0.0), [3]), Job(1, _cfg(0.5), [2])]),
                      100, workers=2)
    assert [(e.trial, e.time) for e in tie] == [(0, 3.0), (1, 3.0)]
    with pytest.raises(ValueError, match="workers must be >= 1"):
        _events.run(toy(), Scripted([]), 10, workers=0)


def test_the_driver_replays_the_single_trial_simulation_of_our_core():
    """benchmarks/_events.py with our CoreRunner reporting every epoch gives the reports of
    benchmarks/_simulate.py (the loop the Ray Tune check replays), score = -value."""
    from benchmarks._peers import CoreRunner, experiment

    p = toy(max_t=100)
    ours = _events.run(p, CoreRunner(p, experiment(p, seed=3, sampler="tpe"),
                                    points=list(range(1, 101))),
                       600)
    search, policy = search_quality._stack(search_quality._experiment("tpe", 3, 8, 3, 1, True))
    sim = _simulate.simulate(search(), policy(), bowl, 600, 100)
    assert len(ours) == len(sim) == 600
    assert [(e.trial, e.fidelity) for e in ours] == [(t, e) for t, e, _ in sim]
    assert [-e.score for e in ours] == pytest.approx([v for _, _, v in sim], abs=1e-12)
    assert len({e.trial for e in ours}) > 3  # ASHA stopped trials early


def test_checkpoints_are_the_rungs_of_every_bracket_and_max_t():
    assert _events.checkpoints(100) == [1, 3, 9, 27, 81, 100]
    assert _events.checkpoints(50) == [1, 3, 9, 27, 50]
    assert _events.checkpoints(27) == [1, 3, 9, 27]


def test_traces_regret_and_reach():
    ev = [_events.Event(0, 1, 5.0, 1, False, 1), _events.Event(0, 9, 2.0, 9, True, 2),
          _events.Event(1, 9, 1.0, 18, True, 3), _events.Event(2, 9, 4.0, 27, True, 4)]
    tr = _sqstats.trace(ev)
    assert tr == [(9.0, 2.0), (27.0, 4.0)]
    assert _sqstats.regret_at(tr, 8, reference=5.0, floor=0.0) == 5.0  # nothing at full yet
    assert _sqstats.regret_at(tr, 26, 5.0, 0.0) == 3.0
    assert _sqstats.regret_at(tr, 27, 5.0, 0.0) == 1.0
    assert _sqstats.reach(tr, 1.0, 5.0, max_t=9) == 3.0 and _sqstats.reach(tr, 0.5, 5.0, 9) is None
    assert _sqstats.median_or_none([1.0, None, None]) is None
    assert _sqstats.median_or_none([1.0, 2.0, None]) == 2.0


def test_ranks_share_ties_and_average_over_seeds_then_problems():
    assert _sqstats.ranks({"a": 0.1, "b": 0.1, "c": 0.5}) == {"a": 1.5, "b": 1.5, "c": 3.0}
    table = {"p1": {"a": [0.0, 1.0], "b": [1.0, 2.0]},   # a first in both seeds
             "p2": {"a": [3.0, 1.0], "b": [1.0, 2.0]}}   # b first, then a
    r = _sqstats.average_ranks(table)
    assert r == {"a": pytest.approx((1.0 + 1.5) / 2), "b": pytest.approx((2.0 + 1.5) / 2)}


def test_paired_wilcoxon_wrapper():
    from scipy.stats import wilcoxon

    ours, theirs = [0.1, 0.2, 0.3, 0.4, 0.5], [0.3, 0.5, 0.2, 0.9, 0.8]
    d = _sqstats.paired(ours, theirs)
    assert (d["wins"], d["losses"], d["ties"]) == (4, 1, 0)
    assert d["p"] == pytest.approx(wilcoxon(ours, theirs).pvalue)
    assert _sqstats.paired([1.0, 2.0], [1.0, 2.0])["p"] == 1.0
    assert _sqstats.paired([1.0], [2.0])["p"] is None
    with pytest.raises(ValueError, match="differ in length"):
        _sqstats.paired([1.0], [1.0, 2.0])


def test_problems_flag_parses_names_and_rejects_bad_ones_in_one_line(capsys):
    from benchmarks.__main__ import main

    assert parse_problems("mfh6, lcbench:189866,rbv2_xgboost:1590,mfh6") == [
        "mfh6", "lcbench:189866", "rbv2_xgboost:1590"]
    for bad in ("mfh7", "lcbench:abc", "lcbench", "openml:3"):
        with pytest.raises(ProblemError, match="^--problems: "):
            parse_problems(bad)
    assert main(["--only", "search_quality", "--problems", "lcbench:abc"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--problems" in err[0] and "lcbench:abc" in err[0]
    assert main(["--only", "search_quality", "--workers", "0"]) == 2
    assert main(["--only", "search_quality", "--methods", "hyperopt"]) == 2
    assert "--methods" in capsys.readouterr().err


def test_a_task_id_the_surrogate_lacks_is_one_line_naming_the_flag(capsys):
    pytest.importorskip("yahpo_gym")
    from benchmarks.__main__ import main

    assert main(["--only", "search_quality", "--problems", "lcbench:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].count("--problems: lcbench:1") == 1 and "189866" in err[0]


def test_a_missing_peer_package_fails_that_method_only(monkeypatch, tmp_path):
    from benchmarks._peers import make_runner
    from benchmarks._problems import load

    pytest.importorskip("mfpbench")
    for mod in ("smac", "dehb", "syne_tune.optimizer.baselines"):
        monkeypatch.setitem(sys.modules, mod, None)
    for method in ("smac", "dehb", "syne_asha"):
        with pytest.raises(ImportError, match="make bench-setup") as e:
            make_runner(method, load("mfh3"), 0)
        assert "\n" not in str(e.value)
    res = search_quality.run(False, {"problems": ["mfh3"], "seeds": 1, "workers": [1],
                                     "methods": ["automl", "random", "smac", "dehb"],
                                     "out": tmp_path, "skip_checks": True})
    assert res.status == "ok"
    assert set(res.data["unavailable"]) == {"smac", "dehb"}
    assert set(res.data["average_rank"]) == {"automl", "random"}
    assert sum(res.data["average_rank"].values()) == pytest.approx(3.0)
    assert any("smac not run" in n for n in res.notes)


@pytest.mark.bench
def test_an_interrupted_run_continues_from_its_cell_cache(tmp_path):
    pytest.importorskip("mfpbench")
    ctx = {"problems": ["mfh3"], "seeds": 2, "workers": [1], "methods": ["automl", "random"],
           "out": tmp_path, "skip_checks": True}
    first = search_quality.run(False, {**ctx, "time_limit_s": 0.0})  # stops before any cell
    assert first.settings["stopped_at_time_limit"] and first.settings["cells_run_now"] == 0
    full = search_quality.run(False, ctx)
    assert full.settings["cells_run_now"] == 4
    again = search_quality.run(False, ctx)
    assert again.settings["cells_run_now"] == 0 and again.settings["cells_cached"] == 4
    assert again.data["regret"] == full.data["regret"]
    assert len(full.data["regret"]["mfh3"]["automl"]["B30"]) == 2


def test_variant_names_give_spec_knobs_and_reject_unknown_ones():
    from benchmarks._peers import experiment, variant_knobs

    assert variant_knobs("automl") is None
    assert variant_knobs("automl[brackets=3]") == {"brackets": "3"}
    knobs = variant_knobs("automl[brackets=2+sampler=multivariate_tpe+rf=2.5]")
    assert knobs == {"brackets": "2", "sampler": "multivariate_tpe", "rf": "2.5"}
    exp = experiment(toy(max_t=27), 4, **knobs)
    assert (exp.scheduler.brackets, exp.scheduler.reduction_factor) == (2, 2.5)
    assert (exp.search.sampler, exp.search.seed) == ("multivariate_tpe", 4)
    with pytest.raises(ValueError, match="unknown knob 'eta'"):
        variant_knobs("automl[eta=3]")


def test_variants_set_the_rung_policys_cutoff_and_adaptive_settings():
    from benchmarks._peers import make_runner

    p = toy(max_t=27)
    default = make_runner("automl", p, 0).policy
    assert (default.cutoff, default.adaptive, default.width) == ("rank", True, 2)
    assert (default.min_pairs, default.min_correlation) == (5, 0.5)
    before = make_runner("automl[brackets=2+cutoff=quantile]", p, 0).policy
    assert (before.cutoff, before.adaptive, before.width) == ("quantile", False, 2)
    tuned = make_runner("automl[min_corr=0.3+min_pairs=8]", p, 0).policy
    assert (tuned.adaptive, tuned.min_correlation, tuned.min_pairs) == (True, 0.3, 8)
    wide = make_runner("automl[brackets=3+adaptive=1]", p, 0).policy
    assert (wide.adaptive, wide.width, wide.cutoff) == (True, 3, "rank")
    assert (default.probe_trials, default.narrow_at, default.probe_rate) == (12, 0.8, 0.1)
    old = make_runner("automl[probe=0+narrow=off]", p, 0).policy
    assert (old.adaptive, old.probe_trials, old.narrow_at) == (True, 0, None)
    probed = make_runner("automl[probe=5+narrow=0.9+prate=0.2]", p, 0).policy
    assert (probed.probe_trials, probed.narrow_at, probed.probe_rate) == (5, 0.9, 0.2)
    # the peer "random + ASHA" stays Ray Tune's plain ASHA
    plain = make_runner("random_asha", p, 0).policy
    assert (plain.cutoff, plain.adaptive, plain.width) == ("quantile", False, 1)


def test_highest_rung_model_sees_only_the_values_at_the_modelled_epoch():
    """BOHB's rule: the wrapped sampler's study holds every trial that reported at the
    largest epoch with ``min_points`` reports, valued at that epoch."""
    import optuna

    from benchmarks._peers import HighestRungSampler

    seen = []

    class Spy(optuna.samplers.RandomSampler):
        def sample_independent(self, study, trial, name, dist):
            seen.append([(t.state.name, t.value) for t in study.get_trials(deepcopy=False)])
            return super().sample_independent(study, trial, name, dist)

    study = optuna.create_study(direction="maximize",
                                sampler=HighestRungSampler(Spy(seed=0), min_points=2))
    curves = [[0.1, 0.2, 0.3], [0.5, 0.6], [0.4]]  # trials 0, 1, 2
    for curve in curves:
        t = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        for epoch, v in enumerate(curve, 1):
            t.report(v, epoch)
        study.tell(t, state=optuna.trial.TrialState.PRUNED)
    seen.clear()
    study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    # epoch 2 is the largest with 2 reports (trials 0 and 1); trial 2 stopped at epoch 1
    assert seen == [[("COMPLETE", 0.2), ("COMPLETE", 0.6)]]
