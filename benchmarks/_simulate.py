"""A simulated backend for search-quality benchmarks (Syne Tune's idea): the searcher and
scheduler objects the project builds (Ray Tune's ``OptunaSearch`` over
``automl.search.make_sampler``, ``automl.search._tuner.make_scheduler``) are driven with
the hooks in the order Ray Tune's controller calls them, one trial at a time, against a
synthetic objective that costs nothing to evaluate. No clock, no sleeps: the budget is
counted in fidelity units (one unit = one epoch of one trial).

:func:`run_tune_runtime` runs the same objects through a real ``Tuner`` so a benchmark can
check that the simulation and Ray Tune see the same sequence of reports.

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


class _Trial:
    """The part of a Tune ``Trial`` that schedulers read."""

    def __init__(self, trial_id: str, config: dict):
        self.trial_id, self.config = trial_id, config


def simulate_tune(searcher, scheduler, objective: Callable, budget: int, max_t: int) -> list:
    """Sequential trials through Tune's searcher and scheduler hooks, as the controller
    calls them (``TuneController._process_trial_result`` and ``stop_trial``): per report,
    ``scheduler.on_trial_result``, then ``searcher.on_trial_result`` unless the decision is
    STOP; at a trial's end ``scheduler.on_trial_complete`` and ``searcher.on_trial_complete``
    with its last result.

    Returns:
        ``[(trial_index, epoch, value)]`` in report order, ``budget`` entries at most.
    """
    from ray.tune.schedulers import TrialScheduler
    from ray.tune.search import Searcher

    log: list[tuple[int, int, float]] = []
    n = 0
    while len(log) < budget:
        tid = f"sim{n:05d}"
        config = searcher.suggest(tid)
        if config is None or config == Searcher.FINISHED:
            break
        trial = _Trial(tid, config)
        scheduler.on_trial_add(None, trial)
        result: dict = {}
        for t in range(1, max_t + 1):
            value = objective(config, t)
            log.append((n, t, value))
            result = {METRIC: value, "epoch": t, "training_iteration": t, "trial_id": tid}
            decision = scheduler.on_trial_result(None, trial, result)
            if decision != TrialScheduler.STOP:
                searcher.on_trial_result(tid, result)
            if decision == TrialScheduler.STOP or len(log) >= budget:
                break
        scheduler.on_trial_complete(None, trial, result)
        searcher.on_trial_complete(tid, result)
        n += 1
    return log


def simulate_optuna(study, objective: Callable, budget: int, max_t: int) -> list:
    """Plain Optuna, sequential (what ``study.optimize`` does with a pruning objective),
    written with ask-and-tell so it stops exactly at ``budget`` units. Same return as
    :func:`simulate_tune`."""
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


def run_tune_runtime(make_searcher: Callable, make_scheduler: Callable, objective: Callable,
                     budget: int, max_t: int, storage: str) -> list:
    """The same search through a real ``Tuner`` (function trainable reporting every epoch,
    one trial at a time, ``reuse_actors=True``) on the connected Ray instance; stops all
    trials once ``budget`` reports arrived. Same return as :func:`simulate_tune`."""
    from ray import tune

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
        for t in range(1, max_t + 1):
            tune.report({METRIC: objective(config, t), "epoch": t})

    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(metric=METRIC, mode="min", search_alg=make_searcher(),
                                    scheduler=make_scheduler(), num_samples=budget,
                                    max_concurrent_trials=1, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=storage, stop=Budget(), verbose=0),
    )
    tuner.fit()
    return log[:budget]
