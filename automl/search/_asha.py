"""The rung policy: asynchronous successive halving, optionally in Hyperband brackets.

Pure: no Ray, no Optuna, no clock. Its decisions are a function of the events it is
given, ``(trial, epoch, value[, violation]) -> "continue" | "stop"``, in order, so the same event list
always gives the same decisions: a resumed sweep rebuilds the policy by replaying the
events its ``trials.jsonl`` recorded (:meth:`RungPolicy.from_events`), the benchmark
simulator drives it directly, and Ray Tune reaches it through a thin
``TrialScheduler`` adapter (:class:`automl.search._adapters.RungScheduler`).

Sources: ASHA, Li et al. 2020, "A System for Massively Parallel Hyperparameter Tuning"
(MLSys), Algorithm 2 in its stopping form (a trial reaching a rung continues when its
value is in the top ``1/reduction_factor`` of the values recorded there so far, as Ray
Tune's ``ASHAScheduler`` and Syne Tune's ``stopping`` type do); Hyperband brackets,
Li et al. 2018, "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
Optimization" (JMLR), run asynchronously as in Li et al. 2020, section 3. Several
objectives (MO-ASHA): Schmucker et al. 2021, "Multi-objective Asynchronous Successive
Halving" (arXiv 2106.12639), with the rank rule of Syne Tune's ``MOASHA``
(``syne_tune/optimizer/schedulers/multiobjective/moasha.py``); constraints first, as
Optuna's ``constraints_func`` convention (violation = sum of the positive parts).
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from automl.search._pareto import mo_order

CONTINUE, STOP = "continue", "stop"
_EPS = 1e-9


def judged_at(rung: float) -> int:
    """The epoch at which a trial is judged at ``rung``: its first report with
    ``epoch >= rung`` (rungs are fractional when ``reduction_factor`` is, e.g. 2.5)."""
    return math.ceil(rung - _EPS)


@dataclass(frozen=True)
class Event:
    """One report a policy judges: ``trial`` reached ``epoch`` with ``value`` (the metric
    as reported, or one float per objective in multi-objective mode; ``None`` when absent,
    which is never stopped nor recorded) and ``violation`` (>= 0, the total constraint
    violation; 0 = feasible)."""

    trial: Hashable
    epoch: int
    value: float | Sequence[float] | None
    violation: float = 0.0


def _missing(value) -> bool:
    """None or NaN, or (a sequence with) a None or NaN in it."""
    if value is None:
        return True
    if isinstance(value, (str, bytes)):
        return False
    if isinstance(value, (Sequence, np.ndarray)):
        return any(_missing(v) for v in value)
    try:
        return math.isnan(float(value))
    except (TypeError, ValueError):
        return False


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

    Constraints (``violation`` > 0 in :meth:`on_report`) come first: an infeasible value
    ranks below every feasible one, and infeasible values rank among themselves by
    violation (smaller is better). With one objective the cutoff is the same interpolated
    quantile, taken over the recorded values in that order; when its two neighbours are one
    infeasible and one feasible value, the cutoff is the feasible one. With no violation
    anywhere at the rung this is exactly the rule above.

    Several objectives (MO-ASHA, ``mode`` a tuple of 2 or 3 ``"max"``/``"min"``): a report's
    ``value`` is one float per objective, in ``mode``'s order. At a rung, the ``n`` values
    recorded there plus the new one are ranked: feasible before infeasible, infeasible by
    violation ascending (ties: earlier arrival first, the new one last), feasible by
    :func:`automl.search._pareto.mo_order` (non-dominated sorting, epsilon-net order inside
    a front; objectives turned to minimisation). With ``r`` the new value's 0-based
    position among the ``n + 1``, the trial continues when ``r / (n + 1) <= 1 /
    reduction_factor`` (Syne Tune's ``MOASHA`` rule; so the first trial at a rung, ``r =
    0``, always continues, and e.g. with ``reduction_factor`` 3 the 2nd arrival continues
    only when it ranks first, the 3rd when it ranks first or second). Schmucker et al.
    2021, "Multi-objective Asynchronous Successive Halving".

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
        mode: ``"max"`` or ``"min"``: whether larger values are better; or a tuple/list
            of 2 or 3 of them, one per objective (multi-objective mode).
        brackets: number of Hyperband brackets (1 = plain ASHA); at most the number of
            rungs of bracket 0.
        seed: seeds the bracket assignment.

    Raises:
        ValueError: an argument is outside the ranges above.
    """

    def __init__(self, grace_period: float, reduction_factor: float, max_t: int,
                 mode: str | Sequence[str] = "max", brackets: int = 1, seed: int = 0):
        if not grace_period > 0:
            raise ValueError(f"grace_period must be > 0 epochs, got {grace_period}")
        if not reduction_factor > 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor}")
        if not max_t >= grace_period:
            raise ValueError(f"max_t ({max_t}) must be >= grace_period ({grace_period})")
        if isinstance(mode, (list, tuple)):
            if not (2 <= len(mode) <= 3 and all(m in ("max", "min") for m in mode)):
                raise ValueError("a multi-objective mode must be 2 or 3 of 'max'/'min', "
                                 f"got {mode!r}")
            mode = tuple(mode)
        elif mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min' (or 2-3 of them), got {mode!r}")
        self.grace_period, self.reduction_factor = float(grace_period), float(reduction_factor)
        self.max_t, self.mode, self.seed = int(max_t), mode, int(seed)
        #: True when ``mode`` is a tuple (MO-ASHA)
        self.multi_objective = isinstance(mode, tuple)
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
        if self.multi_objective:  # stored for minimisation, one sign per objective
            self._signs = np.array([-1.0 if m == "max" else 1.0 for m in mode])
        else:
            self._sign = 1.0 if mode == "max" else -1.0
        # per bracket, per rung level: trial -> signed value recorded there (larger better;
        # MO: a tuple, smaller better) and trial -> its violation
        self._recorded: list[dict[float, dict[Hashable, float | tuple]]] = [
            {r: {} for r in rungs} for rungs in self.brackets]
        self._violations: list[dict[float, dict[Hashable, float]]] = [
            {r: {} for r in rungs} for rungs in self.brackets]
        self._decisions: dict[tuple[Hashable, float], str] = {}  # (trial, rung) -> decision
        self._bracket: dict[Hashable, int] = {}
        self._stopped: dict[Hashable, int] = {}  # trial -> epoch it was stopped at a rung

    # -- what the policy is ---------------------------------------------------------------
    def rung_epochs(self) -> list[int]:
        """Epochs (ascending, every bracket) at which some trial can be judged."""
        return sorted({judged_at(r) for rungs in self.brackets for r in rungs})

    def bracket_weights(self) -> list[tuple[float, list[int]]]:
        """``[(probability, rung epochs)]`` per bracket: the chance a new trial is assigned
        to it (Hyperband's ``n_s``, normalised) and the epochs at which it judges."""
        return [(w, [judged_at(r) for r in rungs])
                for w, rungs in zip(self._weights, self.brackets, strict=True)]

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

    def recorded(self, bracket: int = 0) -> dict[int, dict[Hashable, float | tuple]]:
        """``{epoch judged at: {trial: value as reported}}`` of one bracket (a copy); in
        multi-objective mode each value is a tuple of floats in ``mode``'s order."""
        return {judged_at(r): {t: self._unsign(v) for t, v in rec.items()}
                for r, rec in self._recorded[bracket].items()}

    def recorded_violations(self, bracket: int = 0) -> dict[int, dict[Hashable, float]]:
        """``{epoch judged at: {trial: violation}}`` of one bracket (a copy; 0 = feasible)."""
        return {judged_at(r): dict(rec) for r, rec in self._violations[bracket].items()}

    def _signed(self, value) -> float | tuple:
        if self.multi_objective:
            v = np.asarray(value, dtype=float).reshape(-1)
            if len(v) != len(self.mode):
                raise ValueError(f"value must have {len(self.mode)} objectives {self.mode}, "
                                 f"got {value!r}")
            return tuple(float(x) for x in self._signs * v)
        return self._sign * float(value)

    def _unsign(self, v: float | tuple) -> float | tuple:
        if self.multi_objective:
            return tuple(float(x) for x in self._signs * np.asarray(v))
        return self._sign * v

    # -- decisions ------------------------------------------------------------------------
    def on_report(self, trial: Hashable, epoch: int, value: float | Sequence[float] | None,
                  violation: float = 0.0) -> str:
        """Judge one report. Returns :data:`CONTINUE` or :data:`STOP` (see the class doc).

        ``value``: a float (one objective) or one float per objective (multi-objective
        mode); None, NaN, or a None/NaN in any objective is neither judged nor recorded.
        ``violation``: the total constraint violation, >= 0 (0 = feasible).

        Raises:
            ValueError: ``violation`` negative or NaN, or a multi-objective ``value`` with
                the wrong number of objectives.
        """
        violation = float(violation)
        if not violation >= 0:
            raise ValueError(f"violation must be >= 0 (0 = feasible), got {violation!r}")
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
            if _missing(value):
                break
            signed = self._signed(value)
            rec, viol = self._recorded[k][rung], self._violations[k][rung]
            if self.multi_objective:
                decision = self._judge_mo(rec, viol, signed, violation)
            elif violation > 0 or any(v > 0 for v in viol.values()):
                decision = self._judge_constrained(rec, viol, signed, violation)
            else:
                decision = self._judge(rec, signed)
            rec[trial], viol[trial] = signed, violation
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

    def _judge_constrained(self, recorded: Mapping[Hashable, float],
                           violations: Mapping[Hashable, float], signed: float,
                           violation: float) -> str:
        """The quantile rule over (feasible first, infeasible by violation): see the class doc."""
        if not recorded:
            return CONTINUE
        # ascending = worst first: infeasible by violation descending, then feasible values
        keys = sorted(((violations[t] > 0, -violations[t] if violations[t] > 0 else v)
                       for t, v in recorded.items()), key=lambda kv: (not kv[0], kv[1]))
        pos = (1 - 1 / self.reduction_factor) * (len(keys) - 1)
        lo, hi = keys[math.floor(pos)], keys[math.ceil(pos)]
        if lo[0] != hi[0]:  # straddles the infeasible/feasible boundary: the feasible one
            lo = hi = hi if not hi[0] else lo
        frac = pos - math.floor(pos)
        cut_infeasible, cut = lo[0], lo[1] + (hi[1] - lo[1]) * frac
        if violation > 0:  # infeasible: continues only above an infeasible cutoff
            return CONTINUE if cut_infeasible and -violation >= cut else STOP
        return CONTINUE if cut_infeasible or signed >= cut else STOP

    def _judge_mo(self, recorded: Mapping[Hashable, tuple], violations: Mapping[Hashable, float],
                  signed: tuple, violation: float) -> str:
        """MO-ASHA's rank rule (see the class doc): continue when ``r / n <= 1/rf``."""
        if not recorded:
            return CONTINUE
        trials = list(recorded)
        points = [recorded[t] for t in trials] + [signed]
        viol = [violations[t] for t in trials] + [violation]
        feasible = [i for i, v in enumerate(viol) if v == 0]
        ranked = [feasible[i] for i in mo_order(np.array([points[i] for i in feasible]))] \
            if feasible else []
        ranked += sorted((i for i, v in enumerate(viol) if v > 0), key=lambda i: (viol[i], i))
        r = ranked.index(len(points) - 1)
        return CONTINUE if r / len(points) <= 1 / self.reduction_factor + _EPS else STOP

    def replay(self, events: Iterable[Event | Sequence]) -> list[str]:
        """Judge ``events`` in order (``Event``, ``(trial, epoch, value)`` or ``(trial,
        epoch, value, violation)``); the decisions."""
        out = []
        for e in events:
            if isinstance(e, Event):
                trial, epoch, value, violation = e.trial, e.epoch, e.value, e.violation
            else:
                trial, epoch, value, *rest = e
                violation = rest[0] if rest else 0.0
            out.append(self.on_report(trial, int(epoch), value, violation))
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
