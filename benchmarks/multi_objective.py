"""Multi-objective search quality (issue 15): hypervolume against budget on YAHPO
surrogates, through the project's own search core with a simulated trainable.

Methods, each run to the same budget in epochs (``budget_full`` full trainings of
``max_t`` epochs), once per seed:

* ``ours``: the default sampler ``auto`` (``make_sampler``: multi-objective TPE, Optuna's
  TPESampler, Ozaki et al. 2022, constant liar, for the ``n_startup_trials`` 10 start-up
  trials and conditional parameters; then the random forest on ParEGO's scalarisation,
  ``automl.search._forest.ForestSampler``) in the project's ``StudySearch`` + MO-ASHA
  (``make_policy``: the project's ``RungPolicy`` with one mode per objective, one
  bracket; a stopped trial is told PRUNED);
* ``motpe``: multi-objective TPE alone (``sampler: tpe``), every trial trained to
  ``max_t`` (no early stopping);
* ``nsga2``: Optuna's ``NSGAIISampler`` (population 50), no early stopping;
* ``random``: random search, no early stopping;
* ``syne_tune_moasha``: Syne Tune 0.16's ``MOASHA`` (random configurations, its
  non-dominated-sort priority), when syne-tune is installed (``make bench-setup``);
* full mode only, extra rows: ``ours[k=v+..]`` (:data:`VARIANTS`), ours with spec knobs
  changed, the candidates tried for its default, each compared with the peers as ours is;
  ``ours[sampler=tpe]`` is the default before this one (multi-objective TPE + MO-ASHA in
  2 brackets).

With 20 seeds or more (a multiple of 10) a table gives ours' paired wins against the best
peer of each block of 10 seeds: how much the goal's "8 of 10" moves with the seeds.

Every method runs through the same loop: a trial reports at each rung epoch (the only
epochs a rung policy judges) and at ``max_t``; the budget is charged in epochs as the
trial advances (the fidelity counted as resumable), and the budget ends a trial mid-way.

Problems (YAHPO Gym, Pfisterer et al. 2022, offline surrogates via
``benchmarks/_yahpo.py``; deterministic):

* ``lcbench``: LCBench task 168331 (OpenML ``volkert``: 180 features, 10 classes),
  maximise ``val_accuracy`` (%), minimise the MLP's parameter count, epochs 1..52 (grace
  period 2, reduction factor 3: rungs 2, 6, 18). The count follows the network LCBench
  trained (Zimmer et al. 2021, Auto-PyTorch's ``ShapedMLPNet`` with ``mlp_shape=funnel``):
  :func:`funnel_params`.
* ``rbv2_xgboost``: task 1590 (OpenML ``adult``), maximise ``acc``, minimise
  ``timepredict`` (s); fidelity ``trainsize`` = epoch / 27 for epochs 1..27 (rungs 1, 3,
  9).

Quality: the hypervolume of the trials trained to ``max_t`` by a given budget (the
models a user would deploy; stopped trials are not candidates), in the space (−accuracy,
log10 cost), each objective normalised to [0, 1] by the smallest and largest value any
method reached at ``max_t`` on that problem over all seeds, reference point (1.1, 1.1)
(exact 2-D hypervolume, ``automl.search._pareto.hypervolume``). A measured cost (the
digits problem's latency, :attr:`Problem.cost_key`) is scored by the median of every
measurement of the trial's architecture in the run (:func:`pooled_costs`), and a second
table scores the same runs by each trial's own measurement. Seed ``s`` seeds the
sampler and the bracket draw. ``python -m benchmarks --only multi_objective [--seeds N]
[--first-seed S]``: seeds S..S+N-1 (fresh seeds: the record's are 0..39).
"""

from __future__ import annotations

import math
import re
import statistics
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks._common import Goal, Result, Table

NAME = "multi_objective"
TITLE = "Multi-objective search: hypervolume against budget (YAHPO LCBench, rbv2_xgboost)"
METHODS = ("ours", "motpe", "nsga2", "random", "syne_tune_moasha")
PEERS = METHODS[1:]
#: extra rows of ours in the full run, each the default with spec knobs changed
#: (``brackets``, ``n_startup``, ``rfrac``: ``search.random_fraction``, ``sampler``): the
#: candidates tried for the default, compared with the peers as ours is; ``sampler=tpe``:
#: the previous default (multi-objective TPE) and the candidates tried with it
VARIANTS = ("ours[sampler=tpe]", "ours[brackets=2]", "ours[brackets=1+sampler=tpe]",
            "ours[n_startup=5+sampler=tpe]", "ours[rfrac=0.2+sampler=tpe]",
            "ours[rfrac=0.33+sampler=tpe]", "ours[sampler=random]",
            "ours[rfrac=0.33+brackets=1+sampler=tpe]")
_VARIANT = re.compile(r"^ours\[((?:brackets|n_startup|rfrac|sampler)=[\w.]+"
                      r"(?:\+(?:brackets|n_startup|rfrac|sampler)=[\w.]+)*)\]$")
FRACTIONS = (0.1, 0.2, 1 / 3, 0.5, 0.75, 1.0)
#: a trial trained to ``max_t``: (epochs spent when it finished, accuracy, cost, cost key)
Point = tuple[int, float, float, str | None]


def funnel_params(num_layers: int, max_units: int, in_features: int, classes: int) -> int:
    """Weights and biases of LCBench's funnel MLP (Auto-PyTorch ``ShapedMLPNet``,
    ``get_shaped_neuron_counts(shape="funnel")``, as LCBench, Zimmer et al. 2021, used):
    ``num_layers`` Linear layers; the first hidden width is ``w0 = max(in_features,
    max_units)``, each later hidden width drops by ``int((w0 - classes) / (num_layers -
    1))``, and the last layer maps to ``classes``. ``num_layers = 1`` is one Linear
    ``in_features -> classes``."""
    if num_layers <= 1:
        widths = []
    else:
        w0 = max(in_features, max_units)
        step = max(0, int((w0 - classes) / (num_layers - 1)))
        widths = [w0 - i * step for i in range(num_layers - 1)]
    total, prev = 0, in_features
    for w in [*widths, classes]:
        total += prev * w + w
        prev = w
    return int(total)


@dataclass
class Problem:
    """One benchmark problem: ``evaluate(config, epoch) -> (accuracy, cost)``."""

    name: str
    label: str
    bench: Any  # the YAHPO surrogate
    evaluate: Callable[[dict, int], tuple[float, float]]
    max_t: int
    grace: int
    rf: int = 3
    #: for a measured cost: ``config -> key`` of what the cost depends on (the digits
    #: problem's architecture); :func:`compare` then also scores each trial with the median
    #: of every measurement of its key in the run (:func:`pooled_costs`)
    cost_key: Callable[[dict], str] | None = None


def problems() -> list[Problem]:
    """The two YAHPO problems (raises ImportError when yahpo-gym is missing)."""
    from benchmarks._yahpo import LCBench, RBv2XGBoost

    lc = LCBench("168331")

    def lc_eval(config: dict, epoch: int) -> tuple[float, float]:
        out = lc.query(config, epoch)
        return out["val_accuracy"], float(funnel_params(int(config["num_layers"]),
                                                        int(config["max_units"]), 180, 10))

    xgb = RBv2XGBoost("1590")

    def xgb_eval(config: dict, epoch: int) -> tuple[float, float]:
        from benchmarks._spaces import active

        out = xgb.query(active(xgb.config_space(), config), epoch / 27)
        return out["acc"], max(out["timepredict"], 1e-6)

    return [Problem("lcbench", "LCBench 168331 (val_accuracy vs params)", lc, lc_eval, 52, 2),
            Problem("rbv2_xgboost", "rbv2_xgboost 1590 (acc vs timepredict)", xgb, xgb_eval, 27, 1)]


def lcbench_problem() -> Problem:
    """The LCBench problem of :func:`problems` (a worker process's factory)."""
    return problems()[0]


def rbv2_problem() -> Problem:
    """The rbv2_xgboost problem of :func:`problems` (a worker process's factory)."""
    return problems()[1]


class DigitsResNet:
    """The digits ResNet space of ``search_spaces/resnet_latency.yaml`` (depth 1..3, width
    8/16/32/64, stages 2..3, Adam with lr 1e-4..3e-2 log, batch 32/64/128), really trained
    on scikit-learn's digits (60/20/20 split, seed 0) one epoch at a time, on 1 CPU thread.
    ``evaluate(config, epoch) -> (val_accuracy, latency_ms)``: the model of the current
    trial is trained on up to ``epoch`` (a new config starts a new model, seeded by the
    config); ``latency_ms`` is :func:`automl.models.cost.model_costs` (batch 1, 1 thread),
    measured once per trial."""

    max_t, grace = 12, 2

    def __init__(self):
        import torch
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        X, y = load_digits(return_X_y=True)
        X = (X / 16.0).reshape(-1, 1, 8, 8).astype("float32")
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.4, random_state=0, stratify=y)
        Xva, _, yva, _ = train_test_split(Xte, yte, test_size=0.5, random_state=0, stratify=yte)
        self.X, self.y = torch.from_numpy(Xtr), torch.from_numpy(ytr).long()
        self.Xv, self.yv = torch.from_numpy(Xva), torch.from_numpy(yva).long()
        self._key, self._state = None, None

    def space(self, trial) -> None:
        trial.suggest_int("depth", 1, 3)
        trial.suggest_categorical("width", [8, 16, 32, 64])
        trial.suggest_int("stages", 2, 3)
        trial.suggest_float("lr", 1e-4, 3e-2, log=True)
        trial.suggest_categorical("batch_size", [32, 64, 128])

    def config_space(self):
        import ConfigSpace as CS

        cs = CS.ConfigurationSpace(seed=0)
        cs.add([CS.UniformIntegerHyperparameter("depth", 1, 3),
                CS.CategoricalHyperparameter("width", [8, 16, 32, 64]),
                CS.UniformIntegerHyperparameter("stages", 2, 3),
                CS.UniformFloatHyperparameter("lr", 1e-4, 3e-2, log=True),
                CS.CategoricalHyperparameter("batch_size", [32, 64, 128])])
        return cs

    def __call__(self, config: dict, epoch: int) -> tuple[float, float]:
        import torch
        import torch.nn.functional as F

        from automl.models import build_model
        from automl.models.cost import model_costs

        key = tuple(sorted(config.items()))
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            if key != self._key or self._state["done"] > epoch:
                seed = zlib.crc32(repr(key).encode())  # stable across processes
                torch.manual_seed(seed)
                model = build_model({"family": "resnet", "depth": int(config["depth"]),
                                     "width": int(config["width"]),
                                     "stages": int(config["stages"])}, (1, 8, 8), 10)
                ms = model_costs(model, self.X[:1], threads=1, repeats=10, warmup=3)["latency_ms"]
                opt = torch.optim.Adam(model.parameters(), lr=float(config["lr"]))
                self._key = key
                self._state = {"model": model, "opt": opt, "done": 0, "ms": ms,
                               "gen": torch.Generator().manual_seed(seed)}
            st, bs = self._state, int(config["batch_size"])
            model = st["model"]
            while st["done"] < epoch:
                model.train()
                perm = torch.randperm(len(self.X), generator=st["gen"])
                for i in range(0, len(perm), bs):
                    idx = perm[i:i + bs]
                    if len(idx) < 2:
                        continue
                    loss = F.cross_entropy(model(self.X[idx]), self.y[idx])
                    st["opt"].zero_grad(set_to_none=True)
                    loss.backward()
                    st["opt"].step()
                st["done"] += 1
            model.eval()
            with torch.inference_mode():
                acc = float((model(self.Xv).argmax(1) == self.yv).float().mean())
            return acc, float(st["ms"])
        finally:
            torch.set_num_threads(before)


def digits_problem() -> Problem:
    d = DigitsResNet()
    return Problem("digits_resnet", "digits ResNet (val_accuracy vs measured latency_ms)", d, d,
                   d.max_t, d.grace, cost_key=resnet_architecture)


def resnet_architecture(config: dict) -> str:
    """What a digits ResNet's latency depends on: ``depth=..,width=..,stages=..``."""
    return f"depth={int(config['depth'])},width={int(config['width'])},stages={int(config['stages'])}"


def _experiment(p: Problem, sampler: str, seed: int, asha: bool, knobs: dict | None = None):
    """The spec of a run: ``sampler`` with 10 start-up trials, ASHA (or none) on ``p``'s
    rungs; ``knobs`` (a variant's, see :data:`VARIANTS`) change it."""
    from automl.spec import Experiment

    knobs = knobs or {}
    scheduler = {"type": "asha" if asha else "none", "grace_period": p.grace,
                 "reduction_factor": p.rf, "max_epochs": p.max_t}
    if "brackets" in knobs:
        scheduler["brackets"] = int(knobs["brackets"])
    return Experiment.model_validate({
        "name": p.name, "training": {"epochs": p.max_t},
        "search": {"sampler": knobs.get("sampler", sampler), "seed": seed,
                   "n_startup_trials": int(knobs.get("n_startup", 10)),
                   "random_fraction": float(knobs.get("rfrac", 0.0)),
                   "objectives": [{"metric": "val_accuracy", "mode": "max"},
                                  {"metric": "params", "mode": "min"}]},
        "scheduler": scheduler})


def variant_knobs(method: str) -> dict[str, str] | None:
    """``ours[k=v+k=v]`` as ``{k: v}``; None for any other name."""
    m = _VARIANT.match(method)
    return None if m is None else dict(kv.split("=", 1) for kv in m.group(1).split("+"))


def _checkpoints(p: Problem, policy) -> list[int]:
    rungs = policy.rung_epochs() if policy is not None else []
    return sorted({e for e in rungs if e < p.max_t} | {p.max_t})


def run_core(p: Problem, method: str, seed: int, budget: int) -> list[Point]:
    """One run of a method through the project's StudySearch (+ RungPolicy for ``ours`` and
    its variants).
    Returns the :data:`Point` of each trial trained to ``max_t``, in order."""
    import optuna

    from automl.search import STOP, StudySearch, make_policy, make_sampler

    knobs = variant_knobs(method)
    if knobs is not None:
        exp = _experiment(p, "auto", seed, asha=True, knobs=knobs)
    else:
        sampler = {"ours": "auto", "motpe": "tpe", "nsga2": "nsga2", "random": "random"}[method]
        exp = _experiment(p, sampler, seed, asha=method == "ours")
    policy = make_policy(exp)
    search = StudySearch(p.bench.space, optuna.storages.InMemoryStorage(), p.name,
                         make_sampler(exp.search), mode=("max", "min"), num_samples=10**6,
                         seed=seed)
    spent, done = 0, []
    marks = _checkpoints(p, policy)
    while spent < budget:
        s = search.ask()
        if s is None:
            break

        def result(t: int, acc: float, cost: float, number: int = s.number) -> bool:
            search.report(number, t, (acc, cost))
            return (t < p.max_t and policy is not None
                    and policy.on_report(number, t, (acc, cost)) == STOP)

        spent, last = _train(p, s.config, marks, budget, spent, result, done)
        if last is None:
            search.end(s.number, "failed")
        else:
            state = "completed" if last[0] == p.max_t else "stopped_early"
            search.end(s.number, state, last[0], (last[1], last[2]))
    return done


def _train(p: Problem, config: dict, marks: list[int], budget: int, spent: int,
           result, done: list) -> tuple[int, tuple[int, float, float] | None]:
    """Train ``config`` through the epochs ``marks``, charging each step's epochs to the
    budget; ``result(t, acc, cost) -> stop`` is called at each mark. A trial that reaches
    ``max_t`` is appended to ``done`` as ``(epochs spent, acc, cost, key)``, ``key`` being
    ``p.cost_key(config)`` (None without one).

    Returns:
        ``(epochs spent so far, (t, acc, cost) of the last evaluation or None)``; the
        budget is spent in full when the next step would not fit.
    """
    prev, last = 0, None
    for t in marks:
        if spent + (t - prev) > budget:
            return budget, last
        spent += t - prev
        prev = t
        acc, cost = p.evaluate(config, t)
        last = (t, acc, cost)
        stop = result(t, acc, cost)
        if t == p.max_t:
            done.append((spent, acc, cost, p.cost_key(config) if p.cost_key else None))
            break
        if stop:
            break
    return spent, last


def run_syne_tune(p: Problem, seed: int, budget: int) -> list[Point]:
    """Syne Tune's MOASHA (random configurations), driven the same way: ``suggest``,
    ``on_trial_add``, ``on_trial_result`` at each rung epoch and at ``max_t``."""
    from datetime import datetime

    from syne_tune.backend.trial_status import Trial
    from syne_tune.optimizer.scheduler import SchedulerDecision
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

    from benchmarks._spaces import active, syne_tune_space

    np.random.seed(seed)  # Syne Tune's domains and bracket draw use numpy's global RNG
    cs = p.bench.config_space()
    sch = MOASHA(syne_tune_space(cs), metrics=["neg_acc", "cost"], do_minimize=True,
                 time_attr="epoch", max_t=p.max_t, grace_period=p.grace,
                 reduction_factor=p.rf, random_seed=seed)
    rungs = [p.grace * p.rf ** k for k in range(8) if p.grace * p.rf ** k < p.max_t]
    marks = sorted(set(rungs) | {p.max_t})
    spent, done, tid = 0, [], 0
    while spent < budget:
        config = active(cs, dict(sch.suggest().config))
        trial = Trial(trial_id=tid, config=config, creation_time=datetime.now())
        sch.on_trial_add(trial)

        def result(t: int, acc: float, cost: float, trial: Trial = trial) -> bool:
            return t < p.max_t and sch.on_trial_result(
                trial, {"epoch": t, "neg_acc": -acc, "cost": cost}) == SchedulerDecision.STOP

        spent, _ = _train(p, config, marks, budget, spent, result, done)
        tid += 1
    return done


def _syne_tune_missing() -> str | None:
    try:
        import syne_tune.optimizer.schedulers.multiobjective.moasha  # noqa: F401
    except ImportError as e:
        return f"syne-tune is not installed ({e}); make bench-setup installs it"
    return None


def _pool(runs: dict[str, list]) -> dict[str, float]:
    """``{key: median cost}`` over every trial of every run that has a cost key."""
    costs: dict[str, list[float]] = {}
    for rs in runs.values():
        for r in rs:
            for _, _, c, k in r:
                if k is not None:
                    costs.setdefault(k, []).append(c)
    return {k: statistics.median(v) for k, v in sorted(costs.items())}


def pooled_costs(runs: dict[str, list]) -> dict[str, list]:
    """``runs`` with each trial's measured cost replaced by the median of every
    measurement of its cost key in ``runs`` (all methods, all seeds).

    A measured latency is noisy (``latency_stability``: an interquartile range of about
    a third of the median between two measurements of one model on this shared machine),
    while the hypervolume of the digits problem turns on the fastest models: scored by
    its one measurement, a model's place on the front is partly the luck of that
    measurement. The pooled figure scores what a method found, the model, as noisy
    benchmarks score the noise-free value of the points a method evaluated; the searches
    themselves still see only their own trials' measurements.
    """
    pool = _pool(runs)
    return {m: [[(s, a, pool[k] if k is not None else c, k) for s, a, c, k in r] for r in rs]
            for m, rs in runs.items()}


def _hv_curves(runs: dict[str, list], budget: int):
    """``(curves, lo, hi)``: each run's :func:`hv_curve`, in the space normalised by the
    smallest and largest (-accuracy, log10 cost) of any trial of ``runs``."""
    allpts = np.array([(-a, math.log10(c)) for rs in runs.values() for r in rs
                       for _, a, c, *_ in r])
    lo, hi = allpts.min(axis=0), allpts.max(axis=0)
    hi = np.where(hi > lo, hi, lo + 1.0)
    return {m: [hv_curve(r, lo, hi, budget) for r in rs] for m, rs in runs.items()}, lo, hi


def hv_curve(done, lo, hi, budget: int) -> list[float]:
    """Hypervolume (normalised space, reference 1.1) at each budget of :data:`FRACTIONS`."""
    from automl.search._pareto import hypervolume

    out = []
    for f in FRACTIONS:
        pts = np.array([(-a, math.log10(c)) for s, a, c, *_ in done if s <= f * budget + 1e-9])
        if len(pts) == 0:
            out.append(0.0)
            continue
        out.append(hypervolume((pts - lo) / (hi - lo), [1.1, 1.1]))
    return out


def _run(p: Problem, m: str, seed: int, budget: int) -> list[Point]:
    return run_syne_tune(p, seed, budget) if m == "syne_tune_moasha" else \
        run_core(p, m, seed, budget)


_PROBLEM: dict[str, Problem] = {}  # one per worker process (parallel compare)


def _run_in_worker(make: Callable[[], Problem], m: str, seed: int,
                   budget: int) -> list[Point]:
    """:func:`_run` in a worker process of :func:`compare`, on the problem ``make()``
    built once per process (the digits problem holds its data and the trial's model)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    key = getattr(make, "__name__", repr(make))
    if key not in _PROBLEM:
        _PROBLEM[key] = make()
    return _run(_PROBLEM[key], m, seed, budget)


def compare(p: Problem, seeds: int | Sequence[int], budget_full: int, methods: list[str], *,
            workers: int = 1, make: Callable[[], Problem] | None = None):
    """Run every method on ``p`` for ``seeds`` seeds (a count: seeds 0..seeds-1; or the
    seeds themselves); (tables, goals, data, wall seconds). ``data["curves"][m][i]`` is the
    run of ``seeds[i]``.

    With ``workers`` > 1 the (method, seed) runs go to that many processes (spawned), each
    building its problem with ``make`` (a module-level function, required then); the runs
    are independent and deterministic in their seed, so only the wall time changes, and a
    measured objective (the digits problem's latency) is taken beside another run."""
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    seeds, budget = len(seed_list), budget_full * p.max_t  # seeds: from here on, a count
    runs: dict[str, list] = {m: [] for m in methods}
    t0 = time.perf_counter()
    jobs = [(m, seed) for seed in seed_list for m in methods]
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if make is None:
            raise ValueError("compare: workers > 1 needs make, the problem's factory")
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
            futures = {job: ex.submit(_run_in_worker, make, job[0], job[1], budget)
                       for job in jobs}
            for m, seed in jobs:
                runs[m].append(futures[(m, seed)].result())
    else:
        for m, seed in jobs:
            runs[m].append(_run(p, m, seed, budget))
    wall = round(time.perf_counter() - t0, 1)
    measured = runs
    if p.cost_key is not None:  # score each model by its architecture's pooled latency
        runs = pooled_costs(runs)
    curves, lo, hi = _hv_curves(runs, budget)
    third, full = FRACTIONS.index(1 / 3), len(FRACTIONS) - 1
    med = {m: [statistics.median(c[i] for c in curves[m]) for i in range(len(FRACTIONS))]
           for m in methods}
    rows = [[m, *med[m], statistics.median(len(r) for r in runs[m])] for m in methods]
    pooled = " (each model's latency: the median of its architecture's measurements in " \
        "the run)" if p.cost_key is not None else ""
    tables = [Table(f"{p.label}: median hypervolume at a share of the budget "
                    f"({budget_full} full trainings = {budget} epochs, {seeds} seeds"
                    f"{_seed_span(seed_list)}){pooled}",
                    ["method", *[f"{f:.2g}" for f in FRACTIONS], "median trials at max_t"],
                    rows)]
    peers = [m for m in methods if m != "ours" and variant_knobs(m) is None]
    extra = {}
    if p.cost_key is not None:  # the same runs scored by each trial's own measurement
        own, _, _ = _hv_curves(measured, budget)
        own_med = {m: [statistics.median(c[i] for c in own[m]) for i in (third, full)]
                   for m in methods}
        own_rows = []
        for j, (i, at) in enumerate(((third, "1/3"), (full, "full"))):
            best = max(peers, key=lambda m, j=j: own_med[m][j])
            wins = sum(own["ours"][s][i] > own[best][s][i] for s in range(seeds))
            own_rows.append([at, *[own_med[m][j] for m in methods], best, f"{wins}/{seeds}"])
        tables.append(Table(f"{p.label}: the same runs scored by each trial's own latency "
                            "measurement (median hypervolume; ours' paired wins against the "
                            "best peer)", ["budget", *methods, "best peer", "ours wins"],
                            own_rows))
        extra = {"curves_own_measurement": own,
                 "pooled_latency_ms": _pool(measured)}
    pair_rows, goals = [], []
    for i, at in ((third, "1/3"), (full, "full")):
        best = max(peers, key=lambda m, i=i: med[m][i])
        wins = sum(curves["ours"][s][i] > curves[best][s][i] for s in range(seeds))
        ok = all(med["ours"][i] > med[m][i] for m in peers) and wins >= math.ceil(0.8 * seeds)
        pair_rows.append([at, best, med["ours"][i], med[best][i], f"{wins}/{seeds}"])
        goals.append(Goal(f"{p.name}, {at} budget: ours above every peer's median and wins "
                          f">= 80 % of paired seeds vs the best peer",
                          f"ours {med['ours'][i]:.4f} vs {best} {med[best][i]:.4f}; "
                          f"wins {wins}/{seeds}", ok))
    tables.append(Table(f"{p.label}: ours against the best peer (paired by seed)",
                        ["budget", "best peer", "ours median", "peer median", "ours wins"],
                        pair_rows))
    if seeds >= 20 and seeds % 10 == 0:  # how much the 8-of-10 goal moves with the seeds
        blocks = [range(b, b + 10) for b in range(0, seeds, 10)]  # positions in seed_list
        rows = []
        for i, at in ((third, "1/3"), (full, "full")):
            row = [at]
            for blk in blocks:
                bmed = {m: statistics.median(curves[m][s][i] for s in blk) for m in methods}
                best = max(peers, key=lambda m: bmed[m])
                wins = sum(curves["ours"][s][i] > curves[best][s][i] for s in blk)
                row.append(f"{wins}/10 vs {best}{'' if bmed['ours'] > bmed[best] else ' (median below)'}")
            rows.append(row)
        tables.append(Table(f"{p.label}: ours against the best peer of each block of 10 seeds",
                            ["budget", *[f"seeds {seed_list[b[0]]}-{seed_list[b[-1]]}"
                                         for b in blocks]], rows))
    variants = [m for m in methods if variant_knobs(m) is not None]
    if variants:
        rows = []
        for m in ["ours", *variants]:
            row = [m]
            for i in (third, full):
                fewest = min(sum(curves[m][s][i] > curves[b][s][i] for s in range(seeds))
                             for b in peers)
                row += [med[m][i], f"{fewest}/{seeds}"]
            rows.append(row)
        tables.append(Table(
            f"{p.label}: ours and the candidates tried for it (fewest paired wins against "
            "any peer)", ["method", "1/3 median", "1/3 fewest wins", "full median",
                          "full fewest wins"], rows))
    data = {"seeds": seed_list, "curves": curves,
            "normalisation": {"lo": lo.tolist(), "hi": hi.tolist()},
            "points_at_max_t": {m: [[[float(s), float(a), float(c), *([k] if k else [])]
                                     for s, a, c, k in r] for r in measured[m]]
                                for m in methods}, "wall_s": wall, **extra}
    return tables, goals, data, wall


def _seed_span(seed_list: list[int]) -> str:
    """`` a-b`` (or the list when not consecutive) naming the seeds of a run that is not
    on 0..n-1 (fresh seeds), for a table's title; ``""`` for 0..n-1."""
    if seed_list == list(range(len(seed_list))):
        return ""
    return f" {seed_list[0]}-{seed_list[-1]}" if seed_list == list(
        range(seed_list[0], seed_list[-1] + 1)) else f" {seed_list}"


SYNE_TUNE_NOTE = (
    "Syne Tune 0.16's MOASHA, as installed: Bracket.on_result takes the list returned by "
    "NonDominatedPriority (an ORDER of row indices) as per-row priorities, and "
    "compute_epsilon_net returns ranks that nondominated_sort then uses as an order; so the "
    "new trial's 'rank' is the index of whichever row sorts last / n, not its own position. "
    "It is run as published.")


def _methods() -> tuple[list[str], str | None]:
    missing = _syne_tune_missing()
    return [m for m in METHODS if m != "syne_tune_moasha" or missing is None], missing


def run(quick: bool, ctx: dict) -> Result:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        probs = problems()
    except (ImportError, FileNotFoundError) as e:
        return Result(NAME, TITLE, status="unavailable", reason=str(e))
    seeds = ctx.get("seeds") or (2 if quick else 10)
    first = ctx.get("first_seed") or 0
    budget_full = 6 if quick else 40
    methods, st_missing = _methods()
    methods += [] if quick else list(VARIANTS)
    tables, goals, data, wall = [], [], {}, {}
    for p, make in zip(probs, (lcbench_problem, rbv2_problem)):
        # the runs are deterministic in their seed: 2 worker processes change only the wall
        t, g, d, w = compare(p, range(first, first + seeds), budget_full, methods,
                             workers=1 if quick else 2, make=make)
        tables += t
        goals += g
        data[p.name], wall[p.name] = d, w
    notes = [f"syne_tune_moasha not run: {st_missing}."] if st_missing else []
    notes += [
        SYNE_TUNE_NOTE,
        "NSGA-II's population is 50: with this budget its no-early-stopping runs finish few "
        "more trials than one generation, so it is close to random search here.",
        "The digits ResNet problem (real training, measured latency) is the separate record "
        "multi_objective_digits.",
        f"Wall time per problem (s): {wall}. The machine is shared (2 cores; load averages "
        "in the header).",
    ]
    return Result(NAME, TITLE, settings={"budget_full_trainings": budget_full,
                                         "fractions": list(FRACTIONS), "methods": methods,
                                         "wall_s": wall},
                  seeds={"seeds": f"{first}..{first + seeds - 1}", "count": seeds},
                  tables=tables, goals=goals, notes=notes, data=data)
