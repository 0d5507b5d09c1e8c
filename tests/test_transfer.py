"""Transfer HPO without Ray: the transfer sampler (no sources: the no-transfer sweep trial
for trial; a fitting source weighs and proposes first; a mis-ranking source drops to 0 and
the inner sampler takes over), RUSH's rung thresholds, the ``nightly.transfer_from`` spec
keys and reading sources from run directories and storages."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import yaml
from conftest import write_spec
from optuna.distributions import FloatDistribution

from automl.errors import DataError, SpecError
from automl.search import RungPolicy, StudySearch, make_sampler
from automl.search._asha import CONTINUE, STOP
from automl.search._transfer import RECORD_KEY, RushPolicy, SourceStudy, TransferSampler
from automl.spec import Experiment, load_spec

optuna.logging.set_verbosity(optuna.logging.WARNING)
DISTS = {"x1": FloatDistribution(0.0, 1.0), "x2": FloatDistribution(0.0, 1.0)}
EPOCHS = 3


def space(trial) -> dict:
    trial.suggest_float("x1", 0.0, 1.0)
    trial.suggest_float("x2", 0.0, 1.0)
    return {}


def score(p: dict, epoch: int, sign: float = 1.0) -> float:
    """Maximised; best at (0.8, 0.2); a learning curve rising with the epoch."""
    return sign * (-(p["x1"] - 0.8) ** 2 - (p["x2"] - 0.2) ** 2) + 0.1 * epoch / EPOCHS


def source(name: str, sign: float, n: int = 40, seed: int = 0) -> SourceStudy:
    rng = np.random.default_rng(seed)
    params = [{"x1": float(a), "x2": float(b)} for a, b in rng.random((n, 2))]
    curves = [{e: score(p, e, sign) for e in range(1, EPOCHS + 1)} for p in params]
    return SourceStudy(name, tuple(params), tuple(curves), "max", DISTS)


def sweep(sampler, n: int) -> tuple[StudySearch, list[dict]]:
    search = StudySearch(space, optuna.storages.InMemoryStorage(), "t", sampler, "max", 1000,
                         seed=0)
    asked = []
    for _ in range(n):
        s = search.ask()
        asked.append(s.params)
        for e in range(1, EPOCHS + 1):
            search.report(s.number, e, score(s.params, e))
        search.end(s.number, "completed", EPOCHS, score(s.params, EPOCHS))
    return search, asked


def _exp(**search) -> Experiment:
    return Experiment.model_validate({"search": {"seed": 3, "n_startup_trials": 4, **search}})


@pytest.mark.parametrize("sampler", ["auto", "tpe"])
def test_without_sources_the_sweep_is_the_no_transfer_sweep_trial_for_trial(sampler):
    exp = _exp(sampler=sampler)
    _, plain = sweep(make_sampler(exp.search), 10)
    _, none = sweep(make_sampler(exp.search, sources=(), max_epoch=EPOCHS), 10)
    wrapped_sampler = TransferSampler(make_sampler(exp.search), [], EPOCHS, seed=3)
    search, wrapped = sweep(wrapped_sampler, 10)
    assert plain == none == wrapped  # bit-identical params, trial for trial
    assert RECORD_KEY not in search.study.user_attrs


def test_a_fitting_source_weighs_and_its_best_configuration_runs_first():
    good = source("good", 1.0)
    sampler = make_sampler(_exp(sampler="tpe").search, sources=[good], max_epoch=EPOCHS)
    assert isinstance(sampler, TransferSampler)
    search, asked = sweep(sampler, 12)
    record = search.study.user_attrs[RECORD_KEY]
    assert record["transfer"][0] == 0 and record["dropped"] == []
    # the first trial is the source's best configuration (predicted), close to (0.8, 0.2)
    best = max(good.params, key=lambda p: score(p, EPOCHS))
    assert score(asked[0], EPOCHS) >= score(best, EPOCHS) - 0.05
    assert record["weights"]["good"] > 0 and record["tau"][0] > 0.2
    w = sampler.weights(search.study)
    assert w["sources"][0] + w["own"] == pytest.approx(1.0) and w["trials"] == 12
    # the transfer sweep's best after 12 trials beats a no-transfer one's with the same seed
    _, cold = sweep(make_sampler(_exp(sampler="tpe").search), 12)
    assert max(score(p, EPOCHS) for p in asked) >= max(score(p, EPOCHS) for p in cold)


def test_a_mis_ranking_source_drops_to_zero_and_the_inner_sampler_takes_over():
    bad = source("bad", -1.0)
    good = source("good", 1.0, seed=1)
    sampler = make_sampler(_exp(sampler="tpe").search, sources=[bad, good], max_epoch=EPOCHS)
    search, _ = sweep(sampler, 14)
    record = search.study.user_attrs[RECORD_KEY]
    assert "bad" in record["dropped"] and record["weights"]["bad"] == 0.0
    assert record["tau"][0] < 0 < record["tau"][1]
    assert record["history"][-1]["weights"][0] == 0.0 < record["history"][-1]["weights"][1] \
        + record["history"][-1]["own"]
    # only the bad source: after the zero-shot portfolio every trial is the inner sampler's
    alone = make_sampler(_exp(sampler="tpe").search, sources=[bad], max_epoch=EPOCHS)
    search, _ = sweep(alone, 10)
    record = search.study.user_attrs[RECORD_KEY]
    assert record["dropped"] == ["bad"] and record["own"] == 1.0
    assert all(n < 3 for n in record["transfer"]) and set(range(3, 10)) <= set(record["inner"])


def test_source_and_sampler_arguments_are_checked():
    with pytest.raises(ValueError, match="2 trials' params but 1 curves"):
        SourceStudy("s", ({"x1": 0.1}, {"x1": 0.2}), ({1: 0.5},), "max", DISTS)
    with pytest.raises(ValueError, match="mode must be 'max' or 'min'"):
        SourceStudy("s", ({"x1": 0.1},), ({1: 0.5},), "up", DISTS)
    with pytest.raises(ValueError, match="a trial without any value"):
        SourceStudy("s", ({"x1": 0.1},), ({},), "max", DISTS)
    inner = optuna.samplers.RandomSampler(seed=0)
    with pytest.raises(ValueError, match="share no searched parameter"):
        TransferSampler(inner, [SourceStudy("s", ({"y": 1.0},), ({1: 0.5},), "max",
                                            {"y": FloatDistribution(1.0, 1.0)})], 3)
    with pytest.raises(ValueError, match="portfolio must be >= 0"):
        TransferSampler(inner, [source("good", 1.0)], 3, portfolio=-1)
    mo = Experiment.model_validate({"search": {"objectives": [
        {"metric": "val_accuracy", "mode": "max"}, {"metric": "latency_ms", "mode": "min"}]}})
    with pytest.raises(ValueError, match="needs one objective"):
        make_sampler(mo.search, sources=[source("good", 1.0)])


def test_rush_stops_a_trial_below_the_best_anchor_at_a_rung_that_asha_would_pass():
    policy = RushPolicy(RungPolicy(1, 3, 9, mode="max"), anchors=["a"])
    for t, v in (("x", 0.1), ("y", 0.2), ("z", 0.3)):
        assert policy.on_report(t, 1, v) in (CONTINUE, STOP)
    assert policy.on_report("a", 1, 0.9) == CONTINUE and policy.thresholds == {1: 0.9}
    # plain ASHA's cutoff at rung 1 is 0.3 (the 2/3 quantile of 0.1, 0.2, 0.3, 0.9)
    assert RungPolicy(1, 3, 9, mode="max").replay(
        [("x", 1, 0.1), ("y", 1, 0.2), ("z", 1, 0.3), ("a", 1, 0.9), ("b", 1, 0.5)])[-1] == CONTINUE
    assert policy.on_report("b", 1, 0.5) == STOP
    assert policy.on_report("c", 1, 0.95) == CONTINUE  # above the anchor: ASHA decides
    assert policy.on_report("c", 2, 0.1) == CONTINUE  # no rung at epoch 2
    assert policy.rung_epochs() == [1, 3, 9] and policy.max_t == 9
    minimise = RushPolicy(RungPolicy(1, 3, 9, mode="min"), anchors=["a"])
    minimise.on_report("a", 1, 0.2)
    assert minimise.on_report("b", 1, 0.1) == CONTINUE and minimise.on_report("c", 1, 0.3) == STOP


# --------------------------------------------------------------------------- spec and reading
def test_transfer_from_spec_keys_give_one_line_errors_with_the_key_path(tmp_path):
    exp = load_spec(write_spec(tmp_path, "nightly:\n  transfer_from:\n    - runs/a\n"
                               "    - {storage: 'sqlite:///b.db', study: b}\n"
                               "  transfer_portfolio: 2\n"))
    assert [s.label for s in exp.nightly.transfer_from] == ["runs/a", "sqlite:///b.db#b"]
    assert exp.nightly.transfer_portfolio == 2
    cases = {
        "nightly: {transfer_from: ['sqlite:///b.db']}\n":
            r"nightly.transfer_from.0: .*is a storage URL; write \{storage: sqlite:///b.db, "
            r"study: NAME\}",
        "nightly: {transfer_from: [{storage: 'sqlite:///b.db'}]}\n":
            r"nightly.transfer_from.0: .*needs study",
        "nightly: {transfer_from: [{run_dir: a, storage: 'sqlite:///b.db', study: s}]}\n":
            r"nightly.transfer_from.0: .*give either run_dir",
        "nightly: {transfer_from: [{run_dir: a, stduy: s}]}\n":
            r"nightly.transfer_from.0.stduy: unknown key",
        "nightly: {transfer_portfolio: -1}\n": r"nightly.transfer_portfolio: ",
    }
    for text, pattern in cases.items():
        with pytest.raises(SpecError, match=pattern) as e:
            load_spec(write_spec(tmp_path, text))
        assert "\n" not in str(e.value)
        assert e.value.exit_code == 2
    with pytest.raises(SpecError, match="nightly.transfer_from: transfer weighs sources"):
        load_spec(write_spec(tmp_path, "search: {objectives: [{metric: val_accuracy, mode: max},"
                             " {metric: latency_ms, mode: min}]}\n"
                             "nightly: {transfer_from: [runs/a]}\n"))


def _run_dir(path, name: str, lrs: list[float], metric: str = "val_accuracy"):
    """A run directory as `automl search` leaves it, for what transfer reads: spec.yaml and
    study.db with one trial per learning rate (curves over 2 epochs)."""
    path.mkdir(parents=True)
    (path / "spec.yaml").write_text(yaml.safe_dump({"name": name, "search": {"metric": metric}}))
    study = optuna.create_study(study_name=name, direction="maximize",
                                storage=f"sqlite:///{path / 'study.db'}")
    for lr in lrs:
        t = optuna.trial.create_trial(
            params={"training.lr": lr, "model.mlp.width": 16},
            distributions={"training.lr": FloatDistribution(1e-4, 1.0, log=True),
                           "model.mlp.width": optuna.distributions.CategoricalDistribution(
                               [16, 32])},
            value=0.9 - abs(lr - 0.01), intermediate_values={1: 0.5, 2: 0.9 - abs(lr - 0.01)})
        study.add_trial(t)
    return path


SPACE = {"model": {"family": "mlp", "mlp": {"depth": 1, "width": {
    "type": "categorical", "choices": [16, 32]}}},
    "training": {"lr": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                 "epochs": 2}}


def test_sources_are_read_from_run_directories_and_storages(tmp_path):
    from automl.nightly._sources import check_sources, read_sources

    a = _run_dir(tmp_path / "a", "night-a", [0.002, 0.01, 0.05, 0.5])  # 0.5: outside
    b = _run_dir(tmp_path / "b", "night-b", [0.003, 0.02])
    c = _run_dir(tmp_path / "c", "night-c", [0.003, 0.02], metric="val_loss")
    exp = Experiment.model_validate({**SPACE, "nightly": {"transfer_from": [
        str(a), {"storage": f"sqlite:///{b / 'study.db'}", "study": "night-b"}, str(c)]}})
    check_sources(exp)
    sources, info = read_sources(exp)
    assert [s.name for s in sources] == [str(a), f"sqlite:///{b / 'study.db'}#night-b"]
    assert info[0]["status"] == "used" and info[0]["trials"] == 3
    assert info[0]["skipped"] == {"training.lr outside its new domain": 1}
    assert info[2]["status"] == "skipped: it optimised val_loss, this sweep val_accuracy"
    assert sources[0].curves[1] == {1: 0.5, 2: 0.9} and sources[0].mode == "max"
    assert set(sources[0].distributions) == {"training.lr", "model.mlp.width"}
    assert sources[0].distributions["training.lr"].high == 0.1  # this sweep's domain
    missing = Experiment.model_validate({**SPACE, "nightly": {"transfer_from": [
        str(a), str(tmp_path / "nowhere")]}})
    with pytest.raises(DataError, match=r"nightly.transfer_from\[1\]") as e:
        check_sources(missing)
    assert "automl search" in str(e.value.fix)
    wrong = Experiment.model_validate({**SPACE, "nightly": {"transfer_from": [
        {"storage": f"sqlite:///{b / 'study.db'}", "study": "other"}]}})
    with pytest.raises(DataError, match="holds no study 'other' \\(it holds night-b\\)"):
        read_sources(wrong)


def test_the_benchmark_statistics_rank_speed_up_and_negative_transfer():
    """``benchmarks/transfer.py``'s summary on hand-made traces (no surrogate): 2 tasks, 2
    seeds; transfer reaches random's final value at 3 full trainings where random needed
    30 (speed-up 10), and is worse than ours without transfer on one task of two."""
    from benchmarks._common import Result
    from benchmarks.transfer import Cells, summarise

    cells = Cells(__import__("pathlib").Path("/nonexistent-transfer-cells"))
    best = {"automl": (0.9, 0.95), "automl_transfer": (0.97, 0.93), "warm_topk": (0.8, 0.8),
            "random": (0.85, 0.85)}
    reach = {"automl": 10, "automl_transfer": 3, "warm_topk": 20, "random": 30}
    for t, task in enumerate(("a", "b")):
        for s in (0, 1):
            for m, scores in best.items():
                trace = [[reach[m] * 50 * 0.5, 0.5], [reach[m] * 50, scores[t]]]
                cells.cells[(task, m, s, 1, 16)] = {"trace": trace}
    res = Result("transfer", "t")
    summarise(res, cells, {"a": (1.0, 0.0), "b": (1.0, 0.0)}, ["a", "b"],
              list(best), [0, 1], [1], [16])
    (table,) = res.tables
    rows = {r[0]: r for r in table.rows}
    assert rows["automl_transfer"][3] == pytest.approx((0.03 + 0.07) / 2)  # regret at B=30
    assert rows["automl_transfer"][-1] == pytest.approx(10.0)  # 30 / 3, both tasks
    assert rows["warm_topk"][-1] == pytest.approx(1.0)  # never reaches 0.85: charged 30
    goals = {g.goal: g for g in res.goals}
    neg = next(g for k, g in goals.items() if "negative-transfer" in k)
    assert neg.measured == "50% (1 of 2 tasks)" and neg.met is False
    rank = next(g for k, g in goals.items() if "best average rank" in k)
    assert rank.measured == "B=5 automl_transfer, B=10 automl_transfer" and rank.met
