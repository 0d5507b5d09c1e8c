"""Multi-objective search quality on the digits ResNet space with real training and
measured CPU latency (issue 15): the methods and the hypervolume of
``benchmarks/multi_objective.py``, on :class:`benchmarks.multi_objective.DigitsResNet`
(val_accuracy against ``latency_ms`` at batch 1 on 1 thread, 12 epochs, grace period 2,
reduction factor 3: rungs 2 and 6).

Real training costs about a minute per run here, so this record runs a smaller budget
than the YAHPO problems: 10 seeds of 20 full trainings (240 epochs; quick: 1 seed, 3),
two runs at a time in worker processes (each on 1 torch thread, so a trial's latency is
measured beside the other process's training; ``latency_stability`` found the p50 at
batch 1 within its idle spread then). NSGA-II is left out (its first generation of 50 is
random sampling at this budget; ``random`` stands for it).

The hypervolume scores each model trained to ``max_t`` by its validation accuracy and by
the median latency of its architecture over every measurement in the run (all methods and
seeds, :func:`benchmarks.multi_objective.pooled_costs`): one measurement's spread (about a
third of the median between calls here) is larger than the gap between the fastest
architectures, on which this front's volume turns. Each search still sees only its own
trials' measurements, and a second table gives the volume by those.
``python -m benchmarks --only multi_objective_digits``.
"""

from __future__ import annotations

from benchmarks._common import Result
from benchmarks.multi_objective import SYNE_TUNE_NOTE, _methods, compare, digits_problem

NAME = "multi_objective_digits"
#: seeds, full trainings of budget (12 epochs each) and worker processes of a full run:
#: with 20 trainings TPE's 10 random start-up trials are half of the budget, not all of it
SEEDS, BUDGET_FULL, WORKERS = 10, 20, 2
TITLE = "Multi-objective search: hypervolume against budget (digits ResNet, real training)"


def run(quick: bool, ctx: dict) -> Result:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = ctx.get("seeds") or (1 if quick else SEEDS)
    first = ctx.get("first_seed") or 0
    budget_full = 3 if quick else BUDGET_FULL
    workers = 1 if quick else WORKERS
    methods, st_missing = _methods()
    methods = [m for m in methods if m != "nsga2"]
    p = digits_problem()
    tables, goals, data, wall = compare(p, range(first, first + seeds), budget_full, methods,
                                        workers=workers, make=digits_problem)
    notes = [f"syne_tune_moasha not run: {st_missing}."] if st_missing else []
    notes += [SYNE_TUNE_NOTE,
              f"A smaller budget ({budget_full} full trainings, {seeds} seeds) than the YAHPO "
              f"problems: real training, {workers} run(s) at a time on 2 cores. The latency "
              "objective is a measurement (see latency_stability for its spread).",
              f"Wall time {wall} s."]
    return Result(NAME, TITLE, settings={"budget_full_trainings": budget_full,
                                         "methods": methods, "workers": workers,
                                         "wall_s": wall},
                  seeds={"seeds": f"{first}..{first + seeds - 1}", "count": seeds},
                  tables=tables, goals=goals, notes=notes, data={p.name: data})
