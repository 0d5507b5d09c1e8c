"""The Ray Tune conformance check of the search-quality benchmark (its driver is
``benchmarks/_events.py``; ``tests/test_benchmark_simulator.py`` checks that the driver
gives the reports of :func:`simulate` below). A simulated backend (Syne Tune's idea):
the search core the project runs (:class:`automl.search.StudySearch` over ``make_sampler``, and the rung
policy :class:`automl.search.RungPolicy`) is driven through its public methods, one trial
at a time, against a synthetic objective that costs nothing to evaluate. No clock, no
sleeps: the budget is counted in fidelity units (one unit = one epoch of one trial).

:func:`run_tune_runtime` runs the same objects through a real ``Tuner`` (via the Tune
adapters) so a benchmark can check that the simulation and Ray Tune see the same reports.

Objective: MF-Hartmann6 (``mfh6_good`` of ``mf-prior-bench``, Mallik et al. 2023, after
Kandasamy et al. 2017): 6 inputs in [0, 1], fidelity 1..100 (epochs), minimised, optimum
-3.32237; lower fidelities are flattened and noisier, never better than the true value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PARAMS = tuple(f"X_{i}" for i in range(6))
METRIC = "val_loss"  # the project's reported metric that is minimised; carries mfh6's value


class MFH6:
    """``objective(config, epoch) -> value`` of ``mfh6_good`` at fidelity ``epoch``.

    Raises:
        ImportError: ``mf-prior-bench`` is not installed (see benchmarks/README.md).
    """

    def __init__(self, seed: int):
        import mfpbench

        self.bench = mfpbench.get("mfh6_good", seed=seed)
        self.max_t = int(self.bench.end)
        best = {p: getattr(self.bench.optimum, p) for p in PARAMS}
        self.optimum = self(best, self.max_t)

    def __call__(self, config: dict[str, float], epoch: int) -> float:
        cfg = self.bench.Config(**{p: float(config[p]) for p in PARAMS})
        return float(self.bench.query(cfg, at=int(epoch)).value.value)


def space(trial: Any) -> None:
    """Define-by-run space: six floats in [0, 1]."""
    for p in PARAMS:
        trial.suggest_float(p, 0.0, 1.0)


def simulate(search, policy, objective: Callable, budget: int, max_t: int,
             stopped_as_complete: bool = False) -> list:
    """Sequential trials through the search core's public methods, as the project's
    searcher and rung policy see them in a sweep: ``search.ask()`` (a
    :class:`automl.search.StudySearch`), one ``search.report`` and
    ``policy.on_report`` per epoch (a :class:`automl.search.RungPolicy`, or None for no
    early stopping), then ``search.end`` with the one end-state rule. No Ray, no clock:
    the budget is counted in fidelity units (one unit = one epoch of one trial).

    Args:
        stopped_as_complete: tell a stopped trial COMPLETE with its last (low-fidelity)
            value, as Ray's own ``OptunaSearch`` does, instead of PRUNED.

    Returns:
        ``[(trial_index, epoch, value)]`` in report order, ``budget`` entries at most.
    """
    from automl.search import STOP, end_state

    log: list[tuple[int, int, float]] = []
    n = 0
    while len(log) < budget:
        s = search.ask()
        if s is None:
            break
        epoch, value = 0, None
        for t in range(1, max_t + 1):
            epoch, value = t, objective(s.config, t)
            log.append((n, t, value))
            search.report(s.number, t, value)
            stop = policy is not None and policy.on_report(s.number, t, value) == STOP
            if stop or len(log) >= budget:
                break
        state = end_state(epoch, max_t)
        if stopped_as_complete and state == "stopped_early":
            state = "completed"
        search.end(s.number, state, epoch, value)
        n += 1
    return log


def simulate_optuna(study, objective: Callable, budget: int, max_t: int) -> list:
    """Plain Optuna, sequential (what ``study.optimize`` does with a pruning objective),
    written with ask-and-tell so it stops exactly at ``budget`` units. Same return as
    :func:`simulate`."""
    import optuna

    log: list[tuple[int, int, float]] = []
    n = 0
    while len(log) < budget:
        trial = study.ask()
        config = {p: trial.suggest_float(p, 0.0, 1.0) for p in PARAMS}
        state, value = optuna.trial.TrialState.COMPLETE, None
        for t in range(1, max_t + 1):
            value = objective(config, t)
            log.append((n, t, value))
            trial.report(value, t)
            if len(log) >= budget:
                break
            if t < max_t and trial.should_prune():
                state = optuna.trial.TrialState.PRUNED
                break
        study.tell(trial, value if state == optuna.trial.TrialState.COMPLETE else None,
                   state=state)
        n += 1
    return log


def run_tune_runtime(make_search: Callable, make_policy: Callable, objective: Callable,
                     budget: int, max_t: int, storage: str) -> list:
    """The same search core through a real ``Tuner`` (function trainable reporting every
    epoch, one trial at a time, ``reuse_actors=True``), plugged in by the project's
    adapters (:class:`StudySearcher`, :class:`RungScheduler`) on the connected Ray
    instance; stops all trials once ``budget`` reports arrived. Same return as
    :func:`simulate`."""
    from ray import tune

    from automl.search._adapters import TRIAL_KEY, RungScheduler, StudySearcher
    from automl.search._tuner import EpochsOf

    log: list[tuple[int, int, float]] = []
    index: dict[str, int] = {}

    class Budget(tune.Stopper):
        def __call__(self, trial_id, result):
            trial, epoch = index.setdefault(trial_id, len(index)), int(result["epoch"])
            # a function that returns makes Tune repeat its last result (done=True):
            # no epoch was trained for it, so it costs no budget
            if not any(t == trial and e == epoch for t, e, _ in log[-1:]):
                log.append((trial, epoch, float(result[METRIC])))
            return len(log) >= budget

        def stop_all(self):
            return len(log) >= budget

    def trainable(config):
        cfg = {k: v for k, v in config.items() if k != TRIAL_KEY}
        for t in range(1, max_t + 1):
            tune.report({METRIC: objective(cfg, t), "epoch": t})

    searcher = StudySearcher(make_search(), METRIC, "min", EpochsOf(max_t), note=lambda s: None)
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(metric=METRIC, mode="min", search_alg=searcher,
                                    scheduler=RungScheduler(make_policy(), METRIC),
                                    num_samples=budget, max_concurrent_trials=1,
                                    reuse_actors=True),
        run_config=tune.RunConfig(storage_path=storage, stop=Budget(), verbose=0),
    )
    tuner.fit()
    return log[:budget]
