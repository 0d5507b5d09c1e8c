"""The sweep's trial scheduler: ASHA in epochs, its rungs rebuilt when a sweep resumes."""

from __future__ import annotations

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
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seeded: set[tuple[str, int]] = set()  # (trial id, rung) put back by seed_rungs

    def seed_rungs(self, history: dict[str, list[dict[str, Any]]], metric: str, mode: str) -> int:
        """Record each trial's ``metric`` at every rung its ``history`` reached.

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
                for trial_id, rows in history.items():
                    value = next((r.get(metric) for r in rows if r["epoch"] == rung), None)
                    if value is not None:
                        recorded[trial_id] = sign * float(value)
                        self._seeded.add((trial_id, int(rung)))
                        count += 1
        return count

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        epoch = result.get(self._time_attr)
        if epoch is not None and (trial.trial_id, int(epoch)) in self._seeded:
            self._seeded.discard((trial.trial_id, int(epoch)))
            for bracket in self._brackets:  # judged again at this rung, with its new value
                for rung, recorded in bracket._rungs:
                    if rung == epoch:
                        recorded.pop(trial.trial_id, None)
        return super().on_trial_result(tune_controller, trial, result)


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
