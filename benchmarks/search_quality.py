"""2. Search quality per unit of budget on MF-Hartmann6 (``mfh6_good``, fidelity = epochs
1..100), through the project's own search stack with a simulated trainable.

Methods, each run to the same budget (``budget_full`` full trainings = ``100 x
budget_full`` epochs), once per seed:

* ``automl``: this project's defaults: ``make_sampler`` (TPE, ``n_startup_trials`` 8,
  constant liar) in the project's ``StudySearch`` (a trial ASHA stopped is told PRUNED) +
  ``make_policy`` (ASHA, grace period 1, reduction factor 3, max 100 epochs);
* ``random``: random search, every trial trained to 100 epochs (no early stopping);
* ``random_asha``: random search + the same ASHA;
* ``optuna``: plain Optuna defaults, ``TPESampler(seed)`` + ``SuccessiveHalvingPruner()``;
* full mode also runs a few other settings of the project's own knobs (``variants``).

Regret at a budget = best value reported so far (any fidelity) minus the optimum.
Seed ``s`` seeds the sampler and the benchmark's noise (``mfh6_good`` seed ``s + 1``).
"""

from __future__ import annotations

import statistics
import tempfile
import time

from benchmarks._common import Goal, Result, Table

NAME = "search_quality"
TITLE = "Search quality per unit of budget (MF-Hartmann6)"
PEERS = ("random", "random_asha", "optuna")
#: Other settings of the project's knobs, full mode only: (sampler, n_startup, asha rf,
#: grace, Ray's default OptunaSearch). Multivariate TPE and grace period 3 were measured
#: worse than the defaults and dropped.
VARIANTS = {
    "automl, stopped trials told COMPLETE (Ray's OptunaSearch)": ("tpe", 8, 3, 1, True),
    "automl, n_startup_trials 20": ("tpe", 20, 3, 1, False),
    "automl, reduction_factor 4": ("tpe", 8, 4, 1, False),
}


def _experiment(sampler: str, seed: int, n_startup: int, rf: float, grace: int, asha: bool):
    from automl.spec import Experiment

    return Experiment.model_validate({
        "name": "mfh6", "training": {"epochs": 100},
        "search": {"sampler": sampler, "seed": seed, "n_startup_trials": n_startup,
                   "metric": "val_loss"},
        "scheduler": {"type": "asha" if asha else "none", "grace_period": grace,
                      "reduction_factor": rf, "max_epochs": 100}})


def _stack(exp):
    """(search, policy) factories built the way ``automl.search`` builds them, with the
    study in memory."""
    import optuna

    from automl.search import StudySearch, make_policy, make_sampler
    from benchmarks._simulate import space

    def search():
        return StudySearch(space, optuna.storages.InMemoryStorage(), exp.name,
                           make_sampler(exp.search), "min", 10**6)

    return search, lambda: make_policy(exp)


def run_method(method: str, seed: int, budget: int) -> list:
    """One search; ``[(trial, epoch, value)]`` in report order."""
    import optuna

    from benchmarks._simulate import MFH6, simulate, simulate_optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    f = MFH6(seed + 1)
    if method == "optuna":
        study = optuna.create_study(direction="minimize",
                                    sampler=optuna.samplers.TPESampler(seed=seed),
                                    pruner=optuna.pruners.SuccessiveHalvingPruner())
        return simulate_optuna(study, f, budget, f.max_t)
    if method in VARIANTS:
        sampler, startup, rf, grace, ray_default = VARIANTS[method]
        exp = _experiment(sampler, seed, startup, rf, grace, True)
    else:
        ray_default = False
        exp = _experiment("random" if method.startswith("random") else "tpe", seed, 8, 3, 1,
                          method != "random")
    search, policy = _stack(exp)
    return simulate(search(), policy(), f, budget, f.max_t, stopped_as_complete=ray_default)


def incumbent(log: list, optimum: float) -> list[float]:
    """Regret after each unit of budget: best value so far minus the optimum."""
    out, best = [], float("inf")
    for _, _, v in log:
        best = min(best, v)
        out.append(max(best - optimum, 0.0))
    return out


def _at(curve: list[float], units: int) -> float:
    return curve[min(units, len(curve)) - 1]


def wins(ours: list[list[float]], theirs: list[list[float]], units: int) -> int:
    """Seeds in which ``ours`` has the strictly lower regret after ``units`` of budget."""
    return sum(_at(a, units) < _at(b, units) for a, b in zip(ours, theirs, strict=True))


def _reach(curve: list[float], target: float) -> int | None:
    """First budget (units) at which the regret is at most ``target``."""
    return next((i + 1 for i, r in enumerate(curve) if r <= target + 1e-12), None)


def tune_conformance(budget: int, seed: int = 0) -> dict:
    """Run ``automl`` for one seed through a real Ray ``Tuner`` and the simulation; equal
    report sequences mean the simulation is what Ray Tune would have done."""
    from automl import cluster as runtime
    from benchmarks._simulate import MFH6, run_tune_runtime, simulate

    f = MFH6(seed + 1)
    search, policy = _stack(_experiment("tpe", seed, 8, 3, 1, True))
    t0 = time.perf_counter()
    handle = runtime.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    try:
        with tempfile.TemporaryDirectory() as d:
            real = run_tune_runtime(search, policy, f, budget, f.max_t, d)
    finally:
        runtime.shutdown(handle)
    wall = time.perf_counter() - t0
    sim = simulate(search(), policy(), f, budget, f.max_t)
    same = len(real) == len(sim) and all(
        a[:2] == b[:2] and abs(a[2] - b[2]) < 1e-12 for a, b in zip(real, sim, strict=True))
    return {"budget_units": budget, "seed": seed, "identical": same, "reports": len(real),
            "tune_wall_s": round(wall, 2)}


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE)
    try:
        import mfpbench  # noqa: F401
    except ImportError:
        res.status, res.reason = "unavailable", (
            "mf-prior-bench is not installed: .venv/bin/pip install --no-deps "
            "mf-prior-bench==1.10.0 configspace==1.2.2 more-itertools==11.2.1")
        return res
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = list(range(ctx.get("seeds") or (2 if quick else 10)))
    full = 3 if quick else 20
    budget = 100 * full
    methods = ["automl", *PEERS, *([] if quick else VARIANTS)]
    res.settings = {"benchmark": "mfh6_good", "fidelity": "epochs 1..100",
                    "budget_full_trainings": full, "budget_units": budget,
                    "trials_at_once": 1, "methods": methods,
                    "automl": "TPE (n_startup_trials 8, constant liar) + ASHA "
                              "(grace 1, reduction factor 3, max_t 100)",
                    "optuna": "TPESampler(seed) + SuccessiveHalvingPruner() defaults"}
    res.seeds = {"seeds": seeds, "benchmark_seed": "seed + 1"}
    curves: dict[str, list[list[float]]] = {m: [] for m in methods}
    trials: dict[str, list[int]] = {m: [] for m in methods}
    walls: dict[str, float] = dict.fromkeys(methods, 0.0)
    from benchmarks._simulate import MFH6

    for seed in seeds:
        optimum = MFH6(seed + 1).optimum
        for m in methods:
            t0 = time.perf_counter()
            log = run_method(m, seed, budget)
            walls[m] += time.perf_counter() - t0
            curves[m].append(incumbent(log, optimum))
            trials[m].append(len({t for t, _, _ in log}))
    third = budget // 3
    targets = [c[-1] for c in curves["random"]]  # random search's final best, per seed
    rows, data = [], {}
    for m in methods:
        reach = [_reach(c, tgt) for c, tgt in zip(curves[m], targets, strict=True)]
        need = statistics.median([r if r is not None else float("inf") for r in reach])
        beat = None if m == "automl" else wins(curves["automl"], curves[m], budget)
        beat3 = None if m == "automl" else wins(curves["automl"], curves[m], third)
        finals = [c[-1] for c in curves[m]]
        rows.append([m, statistics.median(finals), statistics.mean(finals),
                     statistics.median([_at(c, third) for c in curves[m]]),
                     need / 100 if need != float("inf") else "not reached",
                     f"{sum(r is not None for r in reach)}/{len(seeds)}",
                     statistics.median(trials[m]),
                     "-" if beat is None else f"{beat}/{len(seeds)}",
                     "-" if beat3 is None else f"{beat3}/{len(seeds)}",
                     round(walls[m] / len(seeds), 2)])
        data[m] = {"final_regret": finals, "reach_units": reach, "trials": trials[m],
                   "regret_at": {str(u): [_at(c, u) for c in curves[m]]
                                 for u in _checkpoints(budget)}}
    res.tables.append(Table(
        f"Regret after {full} full trainings ({budget} epochs), {len(seeds)} seeds",
        ["method", "median final regret", "mean final regret", f"median regret at {third} ep",
         "full trainings to reach random's final best (median)", "seeds reaching it",
         "trials (median)", "automl better at equal budget (final)",
         f"automl better at {third} ep", "s per run"], rows))
    res.tables.append(Table(
        "Median regret against budget (full trainings)",
        ["method", *[f"{u / 100:g}" for u in _checkpoints(budget)]],
        [[m, *[statistics.median(data[m]["regret_at"][str(u)]) for u in _checkpoints(budget)]]
         for m in methods]))
    need = statistics.median([r if r is not None else float("inf")
                              for r in data["automl"]["reach_units"]])
    beat_random = wins(curves["automl"], curves["random"], budget)
    res.goals = [
        Goal("automl reaches random search's final best with <= 1/3 of its budget",
             f"median {need / 100:g} of {full} full trainings" if need != float("inf")
             else "not reached in half the seeds or more", need <= third),
        Goal("automl beats random search at equal budget in >= 80% of seeds",
             f"{beat_random}/{len(seeds)}", beat_random >= 0.8 * len(seeds))]
    try:
        res.data["tune_conformance"] = tune_conformance(150 if quick else 600)
    except Exception as e:  # recorded, not hidden: the simulation figures stand on their own
        res.data["tune_conformance"] = {"error": f"{type(e).__name__}: {e}"}
    conf = res.data["tune_conformance"]
    res.notes += [
        "Simulated trainable: the project's StudySearch + RungPolicy are driven through their "
        "public methods, one trial at a time, no clock (benchmarks/_simulate.py). "
        f"Check against a real Tuner on the same seed ({conf.get('budget_units')} epochs): "
        f"identical report sequence = {conf.get('identical', conf.get('error'))}.",
        "A trial stopped by ASHA reaches Optuna as PRUNED with the value of the epoch it "
        "stopped at (the project's StudySearch), as plain Optuna's pruner does; "
        "Ray's own OptunaSearch tells it COMPLETE with that low-fidelity value, which TPE "
        "then ranks against fully trained trials (the 'told COMPLETE' row, full mode).",
    ]
    res.data.update(per_method=data)
    return res


def _checkpoints(budget: int) -> list[int]:
    return sorted({max(1, budget * k // 20) for k in (1, 2, 4, 5, 10, 20)} | {budget // 3})
