"""A storage for the one process that writes the study: every write goes to the durable
storage at once (``study.db``: what resume, ``automl dashboard`` and the report read),
and reads are answered from memory.

Why: Optuna's TPE with ``constant_liar`` reads every trial from the storage on each
``suggest_*`` call (it must see the running trials, so it skips the study's per-trial
cache). On SQLite that read costs about 9 ms, and a define-by-run space calls it once per
parameter, so one ``ask`` took 85 ms on an idle 2-core machine and 160 ms during a sweep,
where the trial that just ended waits for it (``benchmarks/results/orchestration.md``).
The sweep's driver is the only writer of its study while the sweep runs (trials report
through it; ``automl dashboard`` opens ``study.db`` read-only), so what it wrote is what
the storage holds, and its reads need not go back to SQLite.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Container, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState


class SoleWriterStorage(BaseStorage):
    """An Optuna storage over ``backend`` for a process that is the only writer of the
    studies it touches.

    * Writes go to ``backend`` first and return what it returns; a write that raises
      (``database is locked``, a finished trial) changes nothing here.
    * A study's trials are read from ``backend`` once, on first use; afterwards
      ``get_all_trials`` and ``get_trial`` are answered from memory. A parameter write
      updates the copy in memory; any other trial write marks the trial to be read again
      (one row) on the next read.
    * Study-level calls (names, directions, study attributes) go to ``backend``.

    It is wrong when another process or storage object writes the same study meanwhile:
    use it only for the sweep's own study, in the driver.

    Args:
        backend: the durable storage (an ``optuna.storages.RDBStorage``, or anything
            ``optuna.storages.get_storage`` accepts).
    """

    def __init__(self, backend: Any):
        self._backend = optuna.storages.get_storage(backend)
        self._trials: dict[int, dict[int, FrozenTrial]] = {}  # study id -> number -> trial
        self._where: dict[int, tuple[int, int]] = {}  # trial id -> (study id, number)
        self._stale: set[int] = set()
        self._lock = threading.RLock()

    # -- the trials held in memory ----------------------------------------------------------
    def _study(self, study_id: int) -> dict[int, FrozenTrial]:
        if study_id not in self._trials:
            trials = self._backend.get_all_trials(study_id, deepcopy=True)
            self._trials[study_id] = {t.number: t for t in trials}
            for t in trials:
                self._where[t._trial_id] = (study_id, t.number)
        return self._trials[study_id]

    def _fresh(self, study_id: int) -> dict[int, FrozenTrial]:
        held = self._study(study_id)
        for trial_id in [i for i in self._stale if self._where[i][0] == study_id]:
            trial = self._backend.get_trial(trial_id)
            held[trial.number] = copy.deepcopy(trial)
            self._stale.discard(trial_id)
        return held

    def _held(self, trial_id: int) -> FrozenTrial | None:
        where = self._where.get(trial_id)
        if where is None:
            return None
        return self._fresh(where[0])[where[1]]

    def _touched(self, trial_id: int) -> None:
        if trial_id in self._where:
            self._stale.add(trial_id)

    # -- studies: straight to the backend ---------------------------------------------------
    def create_new_study(self, directions: Sequence[StudyDirection],
                         study_name: str | None = None) -> int:
        return self._backend.create_new_study(directions, study_name)

    def delete_study(self, study_id: int) -> None:
        with self._lock:
            self._backend.delete_study(study_id)
            for trial in self._trials.pop(study_id, {}).values():
                self._where.pop(trial._trial_id, None)
                self._stale.discard(trial._trial_id)

    def set_study_user_attr(self, study_id: int, key: str, value: Any) -> None:
        self._backend.set_study_user_attr(study_id, key, value)

    def set_study_system_attr(self, study_id: int, key: str, value: Any) -> None:
        self._backend.set_study_system_attr(study_id, key, value)

    def get_study_id_from_name(self, study_name: str) -> int:
        return self._backend.get_study_id_from_name(study_name)

    def get_study_name_from_id(self, study_id: int) -> str:
        return self._backend.get_study_name_from_id(study_id)

    def get_study_directions(self, study_id: int) -> list[StudyDirection]:
        return self._backend.get_study_directions(study_id)

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return self._backend.get_study_user_attrs(study_id)

    def get_study_system_attrs(self, study_id: int) -> dict[str, Any]:
        return self._backend.get_study_system_attrs(study_id)

    def get_all_studies(self) -> list:
        return self._backend.get_all_studies()

    # -- trials: written through, read from memory ------------------------------------------
    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        with self._lock:
            held = self._study(study_id)
            trial_id = self._backend.create_new_trial(study_id, template_trial)
            trial = copy.deepcopy(self._backend.get_trial(trial_id))
            held[trial.number] = trial
            self._where[trial_id] = (study_id, trial.number)
            return trial_id

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        with self._lock:
            self._backend.set_trial_param(trial_id, param_name, param_value_internal,
                                          distribution)
            where = self._where.get(trial_id)
            if where is None or trial_id in self._stale:
                return
            held = self._trials[where[0]]
            trial = copy.copy(held[where[1]])  # copy on write: readers keep what they got
            trial.params = {**trial.params,
                            param_name: distribution.to_external_repr(param_value_internal)}
            trial.distributions = {**trial.distributions, param_name: distribution}
            held[where[1]] = trial

    def get_trial_id_from_study_id_trial_number(self, study_id: int, trial_number: int) -> int:
        with self._lock:
            trial = self._study(study_id).get(trial_number)
            if trial is not None:
                return trial._trial_id
        return self._backend.get_trial_id_from_study_id_trial_number(study_id, trial_number)

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Sequence[float] | None = None) -> bool:
        with self._lock:
            try:
                return self._backend.set_trial_state_values(trial_id, state, values)
            finally:
                self._touched(trial_id)

    def set_trial_intermediate_value(self, trial_id: int, step: int,
                                     intermediate_value: float) -> None:
        with self._lock:
            self._backend.set_trial_intermediate_value(trial_id, step, intermediate_value)
            self._touched(trial_id)

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._lock:
            self._backend.set_trial_user_attr(trial_id, key, value)
            self._touched(trial_id)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        with self._lock:
            self._backend.set_trial_system_attr(trial_id, key, value)
            self._touched(trial_id)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._lock:
            trial = self._held(trial_id)
            if trial is not None:
                return copy.deepcopy(trial)  # optuna.Trial edits the one it is given
        return self._backend.get_trial(trial_id)

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        with self._lock:
            held = self._fresh(study_id)
            trials = [held[n] for n in sorted(held)
                      if states is None or held[n].state in states]
            return copy.deepcopy(trials) if deepcopy else trials

    def remove_session(self) -> None:
        self._backend.remove_session()
