"""The rung policy: asynchronous successive halving, optionally in Hyperband brackets.

Pure: no Ray, no Optuna, no clock. Its decisions are a function of the events it is
given, ``(trial, epoch, value) -> "continue" | "stop"``, in order, so the same event list
always gives the same decisions: a resumed sweep rebuilds the policy by replaying the
events its ``trials.jsonl`` recorded (:meth:`RungPolicy.from_events`), the benchmark
simulator drives it directly, and Ray Tune reaches it through a thin
``TrialScheduler`` adapter (:class:`automl.search._adapters.RungScheduler`).

Sources: ASHA, Li et al. 2020, "A System for Massively Parallel Hyperparameter Tuning"
(MLSys), Algorithm 2 in its stopping form (a trial reaching a rung continues when its
value is in the top ``1/reduction_factor`` of the values recorded there so far, as Ray
Tune's ``ASHAScheduler`` and Syne Tune's ``stopping`` type do); Hyperband brackets,
Li et al. 2018, "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
Optimization" (JMLR), run asynchronously as in Li et al. 2020, section 3.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

CONTINUE, STOP = "continue", "stop"
_EPS = 1e-9


def judged_at(rung: float) -> int:
    """The epoch at which a trial is judged at ``rung``: its first report with
    ``epoch >= rung`` (rungs are fractional when ``reduction_factor`` is, e.g. 2.5)."""
    return math.ceil(rung - _EPS)


@dataclass(frozen=True)
class Event:
    """One report a policy judges: ``trial`` reached ``epoch`` with ``value`` (the metric
    as reported; ``None`` when absent, which is never stopped nor recorded)."""

    trial: Hashable
    epoch: int
    value: float | None


class RungPolicy:
    """Asynchronous successive halving in epochs (ASHA), with ``brackets`` > 1 asynchronous
    Hyperband: bracket ``k`` starts its rungs at ``grace_period * reduction_factor**k``.

    Rungs of bracket ``k``: ``grace_period * reduction_factor**(k + i)`` for ``i = 0, 1,
    ...`` while at most ``max_t`` epochs. A trial is judged once per rung, at its first
    report at or past the rung (:func:`judged_at`): it stops when its value is below the
    ``1 - 1/reduction_factor`` quantile (linear interpolation, ``numpy.nanpercentile``) of
    the values other trials recorded at that rung before it, else it continues and its
    value is recorded. A report at ``max_t`` or later is always "stop" (the trial is done).
    A report at a rung the trial was already judged at (a trial resumed from its checkpoint
    re-reports that epoch) returns the decision taken then, unchanged.

    Trials are assigned to brackets with probabilities proportional to the number of
    configurations each bracket starts with in synchronous Hyperband (Li et al. 2018,
    ``n_s``; Syne Tune's default bracket distribution), drawn from
    ``random.Random(f"{seed}:{trial}")``: a trial's bracket depends only on the seed and
    its key, so it is the same after a resume.

    Args:
        grace_period: the first rung, in epochs (> 0).
        reduction_factor: rungs grow by this factor, and 1/``reduction_factor`` of the
            trials reaching a rung continue (> 1).
        max_t: the most epochs a trial can run (>= ``grace_period``).
        mode: ``"max"`` or ``"min"``: whether larger values are better.
        brackets: number of Hyperband brackets (1 = plain ASHA); at most the number of
            rungs of bracket 0.
        seed: seeds the bracket assignment.

    Raises:
        ValueError: an argument is outside the ranges above.
    """

    def __init__(self, grace_period: float, reduction_factor: float, max_t: int,
                 mode: str = "max", brackets: int = 1, seed: int = 0):
        if not grace_period > 0:
            raise ValueError(f"grace_period must be > 0 epochs, got {grace_period}")
        if not reduction_factor > 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor}")
        if not max_t >= grace_period:
            raise ValueError(f"max_t ({max_t}) must be >= grace_period ({grace_period})")
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.grace_period, self.reduction_factor = float(grace_period), float(reduction_factor)
        self.max_t, self.mode, self.seed = int(max_t), mode, int(seed)
        levels = []
        level = self.grace_period
        while level <= self.max_t * (1 + _EPS):
            levels.append(level)
            level *= self.reduction_factor
        if not 1 <= brackets <= len(levels):
            raise ValueError(f"brackets must be between 1 and {len(levels)} (the rungs of "
                             f"bracket 0: {[judged_at(r) for r in levels]}), got {brackets}")
        #: rung levels (epochs, possibly fractional) of each bracket, ascending
        self.brackets: list[list[float]] = [levels[k:] for k in range(brackets)]
        s_max = len(levels) - 1
        # Hyperband's n_s for the bracket that starts k rungs up (Li et al. 2018, Alg. 1)
        weights = [math.ceil((s_max + 1) / (s_max + 1 - k) * self.reduction_factor ** (s_max - k))
                   for k in range(brackets)]
        self._weights = [w / sum(weights) for w in weights]
        self._sign = 1.0 if mode == "max" else -1.0
        # per bracket, per rung level: trial -> signed value recorded there
        self._recorded: list[dict[float, dict[Hashable, float]]] = [
            {r: {} for r in rungs} for rungs in self.brackets]
        self._decisions: dict[tuple[Hashable, float], str] = {}  # (trial, rung) -> decision
        self._bracket: dict[Hashable, int] = {}
        self._stopped: dict[Hashable, int] = {}  # trial -> epoch it was stopped at a rung

    # -- what the policy is ---------------------------------------------------------------
    def rung_epochs(self) -> list[int]:
        """Epochs (ascending, every bracket) at which some trial can be judged."""
        return sorted({judged_at(r) for rungs in self.brackets for r in rungs})

    def bracket_of(self, trial: Hashable) -> int:
        """The bracket ``trial`` belongs to (0 = the one starting at ``grace_period``)."""
        if trial not in self._bracket:
            if len(self.brackets) == 1:
                self._bracket[trial] = 0
            else:
                u = random.Random(f"{self.seed}:{trial}").random()
                cumulative = np.cumsum(self._weights)
                self._bracket[trial] = int(min(np.searchsorted(cumulative, u, side="right"),
                                               len(self._weights) - 1))
        return self._bracket[trial]

    def pass_counts(self) -> dict[int, tuple[int, int]]:
        """``{epoch judged at: (trials that continued, trials judged)}`` over every
        bracket so far (the sweep's ETA reads the continue rate of each rung)."""
        out: dict[int, list[int]] = {}
        for (_, rung), decision in self._decisions.items():
            c = out.setdefault(judged_at(rung), [0, 0])
            c[0] += decision == CONTINUE
            c[1] += 1
        return {e: (c[0], c[1]) for e, c in sorted(out.items())}

    def stopped_at(self, trial: Hashable) -> int | None:
        """The epoch at which a rung stopped ``trial``, or None (never stopped by a rung)."""
        return self._stopped.get(trial)

    def recorded(self, bracket: int = 0) -> dict[int, dict[Hashable, float]]:
        """``{epoch judged at: {trial: value as reported}}`` of one bracket (a copy)."""
        return {judged_at(r): {t: self._sign * v for t, v in rec.items()}
                for r, rec in self._recorded[bracket].items()}

    # -- decisions ------------------------------------------------------------------------
    def on_report(self, trial: Hashable, epoch: int, value: float | None) -> str:
        """Judge one report. Returns :data:`CONTINUE` or :data:`STOP` (see the class doc)."""
        k = self.bracket_of(trial)
        decision = CONTINUE
        # the highest rung at or below this epoch that the trial has not been judged at
        for rung in reversed(self.brackets[k]):
            if epoch < judged_at(rung):
                continue
            if (trial, rung) in self._decisions:
                if judged_at(rung) == epoch:  # the same rung reported again: same answer
                    decision = self._decisions[(trial, rung)]
                break
            if value is None or (isinstance(value, float) and math.isnan(value)):
                break
            decision = self._judge(self._recorded[k][rung], self._sign * float(value))
            self._recorded[k][rung][trial] = self._sign * float(value)
            self._decisions[(trial, rung)] = decision
            break
        if decision == STOP:
            self._stopped.setdefault(trial, int(epoch))
        if epoch >= self.max_t:
            return STOP
        return decision

    def _judge(self, recorded: Mapping[Hashable, float], signed: float) -> str:
        """Stop when ``signed`` is below the top-1/reduction_factor cutoff of ``recorded``."""
        if not recorded:
            return CONTINUE
        cutoff = np.nanpercentile(list(recorded.values()), (1 - 1 / self.reduction_factor) * 100)
        return STOP if signed < cutoff else CONTINUE

    def replay(self, events: Iterable[Event | Sequence]) -> list[str]:
        """Judge ``events`` in order (``Event`` or ``(trial, epoch, value)``); the decisions."""
        out = []
        for e in events:
            trial, epoch, value = (e.trial, e.epoch, e.value) if isinstance(e, Event) else e
            out.append(self.on_report(trial, int(epoch), value))
        return out

    @classmethod
    def from_events(cls, events: Iterable[Event | Sequence], **kwargs) -> RungPolicy:
        """A policy that has judged ``events`` (in the order they happened), e.g. the
        reports of a crashed sweep's ``trials.jsonl``: its rungs, decisions and stopped
        trials are exactly those of the policy that judged them first. ``kwargs`` are the
        constructor's."""
        policy = cls(**kwargs)
        policy.replay(events)
        return policy
