"""Multi-objective search without Ray: the spec's objectives and constraints, what a trial
reports reaching the study (several values, PRUNED, constraints for the sampler), the
ranking and front of the search, and the winner of the cross-validated front."""

from __future__ import annotations

import optuna
import pytest
from conftest import write_spec

from automl.errors import SpecError
from automl.search import Objectives, StudySearch, cv_candidates, pareto_of, rank_trials
from automl.search._forest import ForestSampler
from automl.search._result import COMPLETED, FAILED, STOPPED, TrialRecord
from automl.search._sampler import make_sampler
from automl.selection._front import choose_on_front, front_axes
from automl.spec import Experiment, load_spec

State = optuna.trial.TrialState
MO = {"objectives": [{"metric": "val_accuracy"}, {"metric": "latency_ms"}]}


def _exp(search: dict, **more) -> Experiment:
    return Experiment.model_validate({"name": "mo", "search": search, **more})


# --------------------------------------------------------------------------- spec
@pytest.mark.parametrize("search, key, words", [
    ({"objectives": [{"metric": "val_accuracy"}]}, "search.objectives:", "2 or 3"),
    ({"objectives": [{"metric": "val_accuracy"}, {"metric": "latncy_ms"}]},
     "search.objectives.1.metric:", "did you mean 'latency_ms'"),
    ({"objectives": [{"metric": "val_accuracy"}, {"metric": "val_accuracy"}]},
     "search.objectives.1.metric:", "already objective 0"),
    ({**MO, "constraints": [{"metric": "flops", "max": 1}]},
     "search.constraints.0.metric:", "no trial reports 'flops'"),
    ({**MO, "sampler": "cmaes"}, "search.sampler:", "tpe, multivariate_tpe, nsga2, random"),
    ({**MO, "metric": "val_loss"}, "search.objectives:", "remove those two keys"),
    ({"objectives": [{"metric": "val_accuracy"}, {"metric": "params", "mode": "max"}]},
     "search.objectives.1.mode:", "use mode: min"),
])
def test_each_mistake_names_its_key_path_and_the_fix(tmp_path, search, key, words):
    import yaml

    path = write_spec(tmp_path, yaml.safe_dump({"name": "mo", "search": search}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    line = str(e.value)
    assert "\n" not in line and str(path) in line and key in line and words in line


def test_a_plain_metric_spec_is_unchanged():
    exp = _exp({"metric": "val_loss"})
    assert not exp.search.multi_objective
    assert Objectives.of(exp.search) == Objectives(("val_loss",), ("min",))
    assert Objectives.of(exp.search).mode == "min"
    s = make_sampler(exp.search)  # the one-objective default: TPE and the forest in turn
    assert isinstance(s, ForestSampler) and isinstance(s.fallback, optuna.samplers.TPESampler)


def test_auto_resolves_by_objectives_and_constraints_and_picks_its_brackets():
    sch = {"scheduler": {"max_epochs": 27}}
    one, two = _exp({}, **sch), _exp(MO, **sch)
    tied = _exp({**MO, "constraints": [{"metric": "latency_ms", "max": 0.8}]}, **sch)
    assert (one.search.uses_forest, two.search.uses_forest, tied.search.uses_forest) == (
        True, True, False)
    # one objective: 2 adaptive brackets; several with the forest: 1; with TPE: 2 fixed
    assert [e.bracket_count() for e in (one, two, tied)] == [2, 1, 2]
    assert (one.adaptive_bracketing(), two.adaptive_bracketing()) == (True, False)
    assert _exp({**MO, "sampler": "tpe"}, **sch).bracket_count() == 2
    assert _exp(MO, scheduler={"max_epochs": 27, "brackets": 3}).bracket_count() == 3


def test_objectives_fill_metric_mode_and_samplers_get_the_constraints():
    exp = _exp({**MO, "constraints": [{"metric": "latency_ms", "max": 0.8}]})
    assert exp.search.metric == "val_accuracy" and exp.search.mode == "max"
    obj = Objectives.of(exp.search)
    assert obj.mode == ("max", "min") and obj.multi
    row = {"val_accuracy": 0.9, "latency_ms": 1.0}
    assert obj.value(row) == (0.9, 1.0)
    assert obj.constraint_values(row) == pytest.approx([0.2])
    assert obj.violation(row) == pytest.approx(0.2) and not obj.feasible(row)
    assert obj.feasible({"val_accuracy": 0.9, "latency_ms": 0.5})
    assert obj.value({"val_accuracy": 0.9}) is None  # a missing objective is not judged
    assert obj.minimised(row) == [-0.9, 1.0]
    assert obj.constraint_map(row) == pytest.approx({"latency_ms<=0.8": 0.2})
    for name in ("tpe", "nsga2", "random", "multivariate_tpe"):
        exp2 = _exp({**MO, "sampler": name, "constraints": [{"metric": "params", "max": 5}]})
        assert make_sampler(exp2.search) is not None
    both = Objectives.of(_exp({"constraints": [{"metric": "params", "min": 2, "max": 5}]}).search)
    assert both.constraint_values({"params": 1}) == [1.0]
    assert both.constraint_values({"params": 7}) == [2.0]
    assert both.constraint_values({"params": 3}) == [-1.0]


# --------------------------------------------------------------------------- study
def _space(trial):
    trial.suggest_float("x", 0.0, 1.0)
    return {}


def test_several_values_reach_the_study_with_their_constraints(tmp_path):
    obj = Objectives(("val_accuracy", "latency_ms"), ("max", "min"),
                     (("latency_ms", None, 0.8),))
    search = StudySearch(_space, f"sqlite:///{tmp_path / 'study.db'}", "mo",
                         optuna.samplers.TPESampler(seed=0, n_startup_trials=2),
                         obj.mode, 6, metric_names=obj.metrics)
    a, b, c = search.ask(), search.ask(), search.ask()
    for n, epoch, acc, lat in ((a.number, 1, 0.5, 0.3), (a.number, 2, 0.7, 0.3),
                               (b.number, 1, 0.4, 1.2), (c.number, 1, 0.6, 0.5)):
        search.report(n, epoch, (acc, lat))
    row = {"val_accuracy": 0.7, "latency_ms": 0.3}
    search.end(a.number, COMPLETED, 2, obj.value(row), obj.constraint_map(row))
    bad = {"val_accuracy": 0.4, "latency_ms": 1.2}
    search.end(b.number, STOPPED, 1, obj.value(bad), obj.constraint_map(bad))
    search.end(c.number, FAILED)
    study = optuna.load_study(study_name="mo", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert study.metric_names == ["val_accuracy", "latency_ms"]
    t = {x.number: x for x in study.trials}
    assert t[a.number].state == State.COMPLETE and t[a.number].values == [0.7, 0.3]
    assert t[a.number].constraints == pytest.approx({"latency_ms<=0.8": -0.5})
    assert t[b.number].state == State.PRUNED and t[b.number].intermediate_values == {}
    assert t[b.number].constraints == pytest.approx({"latency_ms<=0.8": 0.4})
    assert t[c.number].state == State.FAIL
    for _ in range(3):  # the sampler goes on asking with infeasible and pruned trials held
        assert search.ask() is not None


# --------------------------------------------------------------------------- ranking
def _rec(i, acc, lat, state=COMPLETED, params=100):
    return TrialRecord(str(i), {"x": i}, {"epochs": 4}, state, 4 if state == COMPLETED else 1,
                       4, {"val_accuracy": acc, "latency_ms": lat, "params": params})


def test_ranking_puts_the_feasible_front_first_and_cv_spreads_along_it():
    obj = Objectives(("val_accuracy", "latency_ms"), ("max", "min"),
                     (("latency_ms", None, 1.0),))
    trials = [_rec(0, 0.90, 0.5), _rec(1, 0.95, 0.9), _rec(2, 0.80, 0.2),
              _rec(3, 0.85, 0.6),                      # dominated by 0
              _rec(4, 0.99, 2.0),                      # best accuracy, breaks the constraint
              _rec(5, 0.70, 0.1, state=STOPPED),       # cheap but stopped at a rung
              _rec(6, 0.99, 0.1, state=FAILED)]
    ranked = rank_trials(trials, obj)
    ids = [t.trial_id for t in ranked]
    assert "6" not in ids and ids[-1] == "4"  # failed out, infeasible last
    assert set(ids[:3]) == {"0", "1", "2"} and ids[3] == "3" and ids[4] == "5"
    front = pareto_of(ranked, obj)
    assert set(front) == {"0", "1", "2"}
    picked = cv_candidates(ranked, front, obj, 2)
    assert {t.trial_id for t in picked} == {"1", "2"}  # the two extremes first
    plain = Objectives(("val_accuracy",), ("max",))
    assert [t.trial_id for t in rank_trials(trials, plain)][:3] == ["4", "1", "0"]
    assert pareto_of(rank_trials(trials, plain), plain) == []


def _cv_row(i, acc, n_params=100):
    return {"trial_id": str(i), "rank": i + 1, "n_params": n_params,
            "summary": {"accuracy": {"mean": acc}, "f1_macro": {"mean": acc - 0.01}}}


@pytest.mark.parametrize("pick", ["knee", "best"])
def test_the_winner_of_the_cross_validated_front(pick):
    exp = _exp({**MO, "constraints": [{"metric": "latency_ms", "max": 1.0}]},
               selection={"pick": pick})
    assert [a[0] for a in front_axes(exp)] == ["cv_accuracy", "latency_ms"]
    rows = [_cv_row(0, 0.80), _cv_row(1, 0.95), _cv_row(2, 0.97), _cv_row(3, 0.99),
            _cv_row(4, 0.90)]
    searched = {"0": {"latency_ms": 0.1}, "1": {"latency_ms": 0.2}, "2": {"latency_ms": 0.6},
                "3": {"latency_ms": 3.0}, "4": {"latency_ms": 0.5}}
    win, reason, table = choose_on_front(exp, rows, searched, {r["trial_id"] for r in rows})
    by = {r["trial_id"]: r for r in table}
    assert not by["3"]["feasible"] and not by["3"]["on_front"]
    assert not by["4"]["on_front"]  # dominated by 1 (more accurate, faster)
    assert {t for t, r in by.items() if r["on_front"]} == {"0", "1", "2"}
    assert win == ("1" if pick == "knee" else "2") and by[win]["winner"]
    assert "within the constraints" in reason
    assert by["2"]["objectives"] == {"cv_accuracy": 0.97, "latency_ms": 0.6}


def test_f1_against_size_needs_no_code():
    """Any reported metric against any cost: ``val_f1`` against ``params`` maps to CV
    ``f1_macro`` on the final front, with three objectives as well."""
    exp = _exp({"objectives": [{"metric": "val_f1"}, {"metric": "params"}]})
    assert front_axes(exp) == [("cv_f1_macro", "max", "cv:f1_macro"), ("params", "min", "params")]
    three = _exp({"sampler": "nsga2", "objectives": [
        {"metric": "val_accuracy"}, {"metric": "macs"}, {"metric": "model_bytes"}]})
    assert Objectives.of(three.search).mode == ("max", "min", "min")
    assert [a[0] for a in front_axes(three)] == ["cv_accuracy", "macs", "model_bytes"]
    rows = [_cv_row(0, 0.9), _cv_row(1, 0.8)]
    win, _, table = choose_on_front(exp, rows, {"0": {"params": 900}, "1": {"params": 100}},
                                    {"0", "1"})
    assert all(r["on_front"] for r in table) and win in ("0", "1")


def test_the_resolved_spec_of_a_run_loads_again(tmp_path):
    """``spec.yaml`` in a run directory (what resume reads) holds metric/mode filled in
    from the first objective: it validates to the same experiment."""
    import yaml

    exp = _exp({**MO, "constraints": [{"metric": "latency_ms", "max": 0.8}]})
    path = write_spec(tmp_path, yaml.safe_dump(exp.to_dict()))
    again = load_spec(path)
    assert again == exp and again.search.objective_list() == exp.search.objective_list()


def test_a_model_is_not_on_the_front_for_being_faster_by_noise():
    """Two trials of one model measure latencies a few percent apart: the less accurate
    one is not on the front for that (relative tolerance on latency_ms), while a real
    speed-up still is; with no tolerance the front is plain Pareto dominance."""
    from automl.search import front_within, pareto_front

    pts = [[-0.58, 0.1921], [-0.28, 0.1898], [-0.20, 0.10], [-0.60, 0.30]]
    assert list(pareto_front(pts)) == [0, 1, 2, 3]
    assert list(front_within(pts, [0.0, 0.0])) == [0, 1, 2, 3]
    assert list(front_within(pts, [0.0, 0.10])) == [0, 2, 3]
    obj = Objectives(("val_accuracy", "latency_ms"), ("max", "min"))
    trials = [_rec(i, -a, lat) for i, (a, lat) in enumerate(pts)]
    assert set(pareto_of(rank_trials(trials, obj), obj)) == {"0", "2", "3"}
    with pytest.raises(ValueError, match="tolerance needs 2 entries"):
        front_within(pts, [0.1])
