"""The sweep's trial scheduler: ASHA in epochs, its rungs rebuilt when a sweep resumes."""

from __future__ import annotations

import math
from typing import Any

from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from automl.spec import Experiment


class ResumableASHA(ASHAScheduler):
    """Ray's ``ASHAScheduler`` whose rungs survive a crashed driver.

    Tune does not snapshot its scheduler (``TuneController.__getstate__`` drops it), so a
    restored sweep starts ASHA with empty rungs: restored trials meet each rung again
    with nothing recorded (no cutoff, so they pass) or, resumed from a checkpoint below
    a rung they had already passed, are judged at a non-rung epoch against whatever the
    new process has seen. :meth:`seed_rungs` puts back what every trial reported at
    each rung (``trials.jsonl``). A trial that re-runs a rung it was seeded at is judged
    again there with its new value, as the first run judged it.

    Source: ASHA, Li et al. 2020 ("A System for Massively Parallel Hyperparameter
    Tuning"), as Ray Tune implements it (``ray.tune.schedulers.ASHAScheduler``).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seeded: set[tuple[str, int]] = set()  # (trial id, rung) put back by seed_rungs

    def seed_rungs(self, history: dict[str, list[dict[str, Any]]], metric: str, mode: str) -> int:
        """Record each trial's ``metric`` at every rung its ``history`` reached, at the
        epoch ASHA judged it there (:func:`judged_at`).

        Args:
            history: ``trial_id -> per-epoch rows`` (``epoch`` and ``metric`` keys), as
                :func:`automl.search._progress.load_history` reads ``trials.jsonl``.
            metric, mode: the sweep's objective (``mode`` ``"max"`` or ``"min"``).

        Returns:
            the number of (trial, rung) values recorded.
        """
        sign = 1.0 if mode == "max" else -1.0
        count = 0
        for bracket in self._brackets:  # one bracket unless `brackets` is set
            for rung, recorded in bracket._rungs:
                epoch = judged_at(rung)
                for trial_id, rows in history.items():
                    value = next((r.get(metric) for r in rows if r["epoch"] == epoch), None)
                    if value is not None:
                        recorded[trial_id] = sign * float(value)
                        self._seeded.add((trial_id, epoch))
                        count += 1
        return count

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        epoch = result.get(self._time_attr)
        if epoch is not None and (trial.trial_id, int(epoch)) in self._seeded:
            self._seeded.discard((trial.trial_id, int(epoch)))
            for bracket in self._brackets:  # judged again at this rung, with its new value
                for rung, recorded in bracket._rungs:
                    if judged_at(rung) == int(epoch):
                        recorded.pop(trial.trial_id, None)
        return super().on_trial_result(tune_controller, trial, result)


def judged_at(rung: float) -> int:
    """The epoch at which ASHA judges a trial at ``rung``: its first report with
    ``epoch >= rung`` (rungs are fractional when ``reduction_factor`` is)."""
    return math.ceil(rung - 1e-9)


def rung_epochs(exp: Experiment) -> list[int]:
    """Epochs (ascending) at which ``exp``'s ASHA can stop a trial; empty for FIFO. Read
    from Ray's own rungs (``grace_period * reduction_factor**k`` up to ``max_epochs``)."""
    scheduler = make_scheduler(exp)
    if not isinstance(scheduler, ASHAScheduler):
        return []
    return sorted({judged_at(rung) for b in scheduler._brackets for rung, _ in b._rungs})


def make_scheduler(exp: Experiment):
    """ASHA (Li et al. 2020) with its budget in epochs, or FIFO when ``scheduler.type: none``.

    ``grace_period`` is the first rung (epochs every trial gets), each later rung
    keeps the top 1/``reduction_factor`` of trials reaching it, up to ``max_epochs``.
    Returns a :class:`ResumableASHA` (Ray's ``ASHAScheduler``) or Ray's ``FIFOScheduler``.
    """
    sch = exp.scheduler
    if sch.type == "none":
        return FIFOScheduler()
    return ResumableASHA(
        time_attr="epoch",
        max_t=exp.max_epochs,
        grace_period=sch.grace_period,
        reduction_factor=sch.reduction_factor,
    )
