"""Thin adapters that plug the search core into Ray Tune through its public interfaces:
:class:`RungScheduler` (a ``TrialScheduler``, Tune's FIFO order, our rung policy's
decisions), :class:`StudySearcher` (a ``Searcher`` over :class:`StudySearch`) and
:class:`BudgetStopper` (a ``Stopper``: the job budget ends the sweep).

Both name a trial by the study's trial number, which the searcher puts in every config
under :data:`TRIAL_KEY`; Tune's own trial ids live only inside one session.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from automl.search._asha import STOP, RungPolicy
from automl.search._objectives import Objectives
from automl.search._result import end_state
from automl.search._study import StudySearch
from automl.search._trial import TRIAL_KEY

__all__ = ["TRIAL_KEY", "BudgetStopper", "RungScheduler", "StudySearcher", "judge", "trial_number"]


def trial_number(trial) -> int | str:
    """The study's number of a Tune ``Trial`` (its Tune id when it has none)."""
    return (getattr(trial, "config", None) or {}).get(TRIAL_KEY, trial.trial_id)


class BudgetStopper(Stopper):
    """Tune's ``Stopper`` that ends the whole sweep once ``over()`` is true (the job
    budget, ``automl.budget``); asked at most every ``every_s`` seconds (Tune asks on
    every controller step)."""

    def __init__(self, over: Callable[[], bool], every_s: float = 1.0,
                 clock: Callable[[], float] | None = None):
        import time

        self.over, self.every_s = over, every_s
        self.clock = clock or time.monotonic
        self._next, self._stopped = 0.0, False

    def __call__(self, trial_id, result) -> bool:
        return False

    @property
    def stopped(self) -> bool:
        """Whether ``over()`` ended the sweep."""
        return self._stopped

    def stop_all(self) -> bool:
        if not self._stopped and self.clock() >= self._next:
            self._next = self.clock() + self.every_s
            self._stopped = bool(self.over())
        return self._stopped


def judge(policy: RungPolicy, objectives: Objectives, number, result: dict) -> str:
    """``policy.on_report`` for one Tune result: its epoch, objective value(s) and, with
    constraints, its total violation."""
    value = objectives.value(result)
    if objectives.constraints:
        return policy.on_report(number, int(result["epoch"]), value,
                                violation=objectives.violation(result))
    return policy.on_report(number, int(result["epoch"]), value)


class RungScheduler(FIFOScheduler):
    """Tune's ``TrialScheduler`` for a :class:`~automl.search._asha.RungPolicy`: each
    result's ``epoch`` and objective value(s) (:class:`Objectives`) go to
    :meth:`RungPolicy.on_report`, its "stop" becomes ``TrialScheduler.STOP``; trials run
    in the order they were suggested."""

    def __init__(self, policy: RungPolicy, objectives: Objectives | str):
        super().__init__()
        if isinstance(objectives, str):  # one metric, judged in the policy's mode
            objectives = Objectives((objectives,), (str(policy.mode),))
        self.policy, self.objectives = policy, objectives

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True  # metric and mode come from the spec, with the policy

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if "epoch" not in result:
            return TrialScheduler.CONTINUE
        decision = judge(self.policy, self.objectives, trial_number(trial), result)
        return TrialScheduler.STOP if decision == STOP else TrialScheduler.CONTINUE

    def debug_string(self) -> str:
        return f"automl rung policy, rungs at epochs {self.policy.rung_epochs()}"


class StudySearcher(Searcher):
    """Tune's ``Searcher`` for a :class:`~automl.search._study.StudySearch`.

    ``suggest`` hands out :meth:`StudySearch.ask`'s configuration with its trial number
    (``FINISHED`` once the space is exhausted, said once through ``note``); results go to
    :meth:`StudySearch.report`; at a trial's end its state follows
    :func:`~automl.search._result.end_state` (a trial the scheduler stopped before its own
    epochs is ``stopped_early``, told PRUNED; an error is told FAIL).

    Args:
        search: the study core.
        metric, mode: the sweep's (first) objective, as Tune is told.
        epochs_of: ``flat config -> the trial's own training.epochs``.
        note: called with one line for the console (e.g. the space is exhausted).
        objectives: every objective and constraint (default: ``metric`` in ``mode``).
    """

    def __init__(self, search: StudySearch, metric: str, mode: str,
                 epochs_of: Callable[[dict], int], note: Callable[[str], None] = print,
                 objectives: Objectives | None = None):
        super().__init__(metric=metric, mode=mode)
        self.search, self._epochs_of, self._note = search, epochs_of, note
        self.objectives = objectives or Objectives((metric,), (mode,))
        self._numbers: dict[str, int] = {}
        self._configs: dict[str, dict] = {}

    def suggest(self, trial_id: str):
        suggestion = self.search.ask()
        if suggestion is None:
            if self.search.exhausted:
                self._note(self.search.exhausted)
            return Searcher.FINISHED
        self._numbers[trial_id] = suggestion.number
        config = {**suggestion.config, TRIAL_KEY: suggestion.number}
        self._configs[trial_id] = config
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        number = self._numbers.get(trial_id)
        if number is not None and "epoch" in result:
            self.search.report(number, int(result["epoch"]), self.objectives.value(result))

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        number = self._numbers.pop(trial_id, None)
        config = self._configs.pop(trial_id, {})
        if number is None:
            return
        result = result or {}
        epochs = int(result.get("epoch", 0))
        if error or not epochs:
            self.search.end(number, "failed")
            return
        state = end_state(epochs, self._epochs_of(config))
        constraints = self.objectives.constraint_map(result) or None
        self.search.end(number, state, epochs, self.objectives.value(result), constraints)

    def __getstate__(self) -> dict:
        # Tune pickles its config (this searcher too) into tuner.pkl; resume never reads
        # it, and the study's storage and the console stay with this process.
        return {"_numbers": dict(self._numbers), "_metric": self._metric, "_mode": self._mode,
                "objectives": self.objectives}

    def save(self, checkpoint_path: str) -> None:
        """Tune's snapshot of this searcher: the session's Tune ids -> trial numbers
        (the study itself is always current in ``study.db``; resume reads that)."""
        with open(checkpoint_path, "w") as f:
            json.dump({"numbers": self._numbers}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path) as f:
            self._numbers = {k: int(v) for k, v in json.load(f)["numbers"].items()}
