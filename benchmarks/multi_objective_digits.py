"""Multi-objective search quality on the digits ResNet space with real training and
measured CPU latency (issue 15): the methods and the hypervolume of
``benchmarks/multi_objective.py``, on :class:`benchmarks.multi_objective.DigitsResNet`
(val_accuracy against ``latency_ms`` at batch 1 on 1 thread, 12 epochs, grace period 2,
reduction factor 3: rungs 2 and 6).

Real training costs minutes per run on 2 shared cores, so this record runs fewer seeds
and a smaller budget than the YAHPO problems (3 seeds, 8 full trainings; quick: 1 seed,
3) and leaves NSGA-II out (its first generation of 50 is random sampling at this budget;
``random`` stands for it). ``python -m benchmarks --only multi_objective_digits``.
"""

from __future__ import annotations

from benchmarks._common import Result
from benchmarks.multi_objective import SYNE_TUNE_NOTE, _methods, compare, digits_problem

NAME = "multi_objective_digits"
TITLE = "Multi-objective search: hypervolume against budget (digits ResNet, real training)"


def run(quick: bool, ctx: dict) -> Result:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seeds = ctx.get("seeds") or (1 if quick else 3)
    budget_full = 3 if quick else 8
    methods, st_missing = _methods()
    methods = [m for m in methods if m != "nsga2"]
    p = digits_problem()
    tables, goals, data, wall = compare(p, seeds, budget_full, methods)
    notes = [f"syne_tune_moasha not run: {st_missing}."] if st_missing else []
    notes += [SYNE_TUNE_NOTE,
              f"Fewer seeds ({seeds}) and a smaller budget ({budget_full} full trainings) "
              "than the YAHPO problems: real training on a shared 2-core machine. The "
              "latency objective is a measurement (see latency_stability for its spread).",
              f"Wall time {wall} s."]
    return Result(NAME, TITLE, settings={"budget_full_trainings": budget_full,
                                         "methods": methods, "wall_s": wall},
                  seeds={"seeds": f"0..{seeds - 1}", "count": seeds},
                  tables=tables, goals=goals, notes=notes, data={p.name: data})
