"""The rung policy: asynchronous successive halving, optionally in Hyperband brackets.

Pure: no Ray, no Optuna, no clock. Its decisions are a function of the events it is
given, ``(trial, epoch, value[, violation]) -> "continue" | "stop"``, in order, so the same event list
always gives the same decisions: a resumed sweep rebuilds the policy by replaying the
events its ``trials.jsonl`` recorded (:meth:`RungPolicy.from_events`), the benchmark
simulator drives it directly, and Ray Tune reaches it through a thin
``TrialScheduler`` adapter (:class:`automl.search._adapters.RungScheduler`).

Sources: ASHA, Li et al. 2020, "A System for Massively Parallel Hyperparameter Tuning"
(MLSys), Algorithm 2 in its stopping form: a trial reaching a rung continues when its
value is in the top ``1/reduction_factor`` of the values recorded there, read either as
Ray Tune's ``ASHAScheduler`` reads it (an interpolated quantile of the values recorded
before it, ``cutoff="quantile"``) or as Algorithm 2's top-k and Optuna's
``SuccessiveHalvingPruner`` read it (within the top ``max(1, floor(n / reduction_factor))``
of the ``n`` values with its own, ``cutoff="rank"``); Hyperband brackets,
Li et al. 2018, "Hyperband: A Novel Bandit-Based Approach to Hyperparameter
Optimization" (JMLR), run asynchronously as in Li et al. 2020, section 3. Several
objectives (MO-ASHA): Schmucker et al. 2021, "Multi-objective Asynchronous Successive
Halving" (arXiv 2106.12639), with the rank rule of Syne Tune's ``MOASHA``
(``syne_tune/optimizer/schedulers/multiobjective/moasha.py``); constraints first, as
Optuna's ``constraints_func`` convention (violation = sum of the positive parts).
Adaptive brackets (``adaptive=True``): the rank correlation between consecutive rungs,
measured on trials that were not judged at the lower one, decides which rung the
brackets start at; the idea of choosing brackets by how well low fidelities rank the
high ones is Hyper-Tune's (Li et al. 2022, "Hyper-Tune: Towards Efficient
Hyper-parameter Tuning at Scale", VLDB), the rule here is this project's own.
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
    report at or past the rung (:func:`judged_at`), and its value is recorded there.
    ``cutoff="quantile"`` (Ray Tune's rule): it stops when its value is below the
    ``1 - 1/reduction_factor`` quantile (linear interpolation, ``numpy.nanpercentile``) of
    the values other trials recorded at that rung before it, else it continues.
    ``cutoff="rank"`` (Li et al. 2020's top-k, Optuna's ``SuccessiveHalvingPruner``): it
    continues when fewer than ``max(1, floor(n / reduction_factor))`` of the ``n`` values
    (those recorded before it and its own) are better than its own, so a tie passes. The
    quantile rule lets more of the early arrivals through (with 3 values recorded, a 2nd
    best of 4 above the interpolated cutoff passes; the rank rule passes only the best); on
    the search-quality suite the rank rule had the better average rank. A report at
    ``max_t`` or later is always "stop" (the trial is done). A report at a rung the trial
    was already judged at (a trial resumed from its checkpoint re-reports that epoch)
    returns the decision taken then, unchanged.

    Constraints (``violation`` > 0 in :meth:`on_report`) come first: an infeasible value
    ranks below every feasible one, and infeasible values rank among themselves by
    violation (smaller is better). With one objective the cutoff is the same interpolated
    quantile, taken over the recorded values in that order (when its two neighbours are one
    infeasible and one feasible value, the cutoff is the feasible one), or the same rank in
    that order. With no violation anywhere at the rung this is exactly the rule above.

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

    Adaptive brackets (``adaptive=True``, one objective): the rung ladder is bracket 0's,
    ``L_0 < L_1 < ...``, and ``brackets`` is how many brackets run at once, a window that
    starts at rung ``s`` (:attr:`start`, 0 at first): brackets ``s, s + 1, ...`` with
    Hyperband's ``n_s`` for a ladder that begins at ``L_s``. Every trial's value at every
    rung it reaches is kept, judged there or not. A trial of a bracket that starts above
    ``L_i`` reaches ``L_i`` and ``L_{i+1}`` without being judged at ``L_i``, so those
    trials give an unbiased sample of how well rung ``i`` ranks trials for rung ``i + 1``:
    :meth:`rung_correlation` (Spearman's rho over them). After each report the window
    starts at the lowest rung ``i`` whose correlation is not known to be poor: fewer than
    ``min_pairs`` pairs, or rho at least ``min_correlation``. So where the first epochs
    say little of the later ones (measured on LCBench: rho 0 between epochs 1 and 3, 0.7
    to 0.97 between 3 and 9), no trial is stopped on them any more, and where they do
    (MF-Hartmann 3: 0.97) the policy stays as fixed brackets would. Once the window starts
    above a rung, every new trial passes that rung unjudged, so its correlation keeps being
    measured and the window moves back down if it rises. The window never starts at a rung
    at ``max_t``: where every rung ranks poorly (a metric that has saturated, say) trials
    are still stopped at the highest rung below ``max_t``. A trial's bracket is drawn from
    the window at its first report and kept. With ``adaptive=False`` the brackets are
    fixed, as described above.

    Probes and narrowing (adaptive only). The first ``probe_trials`` trials (by first
    report) are put in the bracket just above the window's first, so they pass its first
    rung unjudged: the correlation that places the window is measured from the sweep's
    start instead of from the few trials a 2-bracket window draws there. Once the
    window's first rung ranks trials well for the next (Spearman's rho at least
    ``narrow_at`` over at least ``min_pairs`` pairs), the hedge of a second bracket is not
    needed: the window narrows to that one bracket, and a ``probe_rate`` share of new
    trials still go to the next bracket so the correlation keeps being measured (it widens
    again if rho falls). On the search-quality suite, 12 probes and narrowing at 0.8
    lowered the sum of the four average ranks from 15.83 to 14.17
    (``benchmarks/results/search_quality.md``); on seeds it was not chosen on, the gain
    held at 30 full trainings and not at 10 (``benchmarks/results/sq_fresh_seeds.md``).

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
        adaptive: the window of ``brackets`` brackets starts at the lowest rung that ranks
            trials well (see above); one objective only.
        min_pairs: adaptive: pairs a rung's correlation needs before it counts (>= 3).
        min_correlation: adaptive: Spearman's rho at or above which a rung is trusted
            (-1..1).
        cutoff: ``"quantile"`` or ``"rank"``: how the top ``1/reduction_factor`` at a rung
            is read with one objective (see above; several objectives rank as MO-ASHA).
        probe_trials: adaptive: trials that probe the window's first rung (>= 0).
        narrow_at: adaptive: Spearman's rho of the window's first rung at or above which
            the window narrows to one bracket (-1..1; None: it never narrows).
        probe_rate: adaptive, narrowed: the share of new trials that still probe (0..1,
            1 excluded).

    Raises:
        ValueError: an argument is outside the ranges above, or ``adaptive`` with several
            objectives.
    """

    def __init__(self, grace_period: float, reduction_factor: float, max_t: int,
                 mode: str | Sequence[str] = "max", brackets: int = 1, seed: int = 0,
                 adaptive: bool = False, min_pairs: int = 5, min_correlation: float = 0.5,
                 cutoff: str = "quantile", probe_trials: int = 0,
                 narrow_at: float | None = None, probe_rate: float = 0.1):
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
        if adaptive and self.multi_objective:
            raise ValueError("adaptive brackets need one objective, got mode "
                             f"{mode!r}")
        if cutoff not in ("quantile", "rank"):
            raise ValueError(f"cutoff must be 'quantile' or 'rank', got {cutoff!r}")
        self.cutoff = cutoff
        if not min_pairs >= 3:
            raise ValueError(f"min_pairs must be >= 3, got {min_pairs}")
        if not -1 <= min_correlation <= 1:
            raise ValueError(f"min_correlation must be within -1..1, got {min_correlation}")
        self.adaptive, self.width = bool(adaptive), int(brackets)
        self.min_pairs, self.min_correlation = int(min_pairs), float(min_correlation)
        if not probe_trials >= 0:
            raise ValueError(f"probe_trials must be >= 0, got {probe_trials}")
        if narrow_at is not None and not -1 <= narrow_at <= 1:
            raise ValueError(f"narrow_at must be within -1..1, got {narrow_at}")
        if not 0 <= probe_rate < 1:
            raise ValueError(f"probe_rate must be within 0..1 (1 excluded), got {probe_rate}")
        self.probe_trials, self.narrow_at = int(probe_trials), narrow_at
        self.probe_rate = float(probe_rate)
        self._start_rho: tuple[float | None, int] = (None, 0)  # the start rung's (rho, pairs)
        #: rung levels of bracket 0 (epochs, possibly fractional), ascending
        self.ladder: list[float] = levels
        #: rung levels of each bracket, ascending (adaptive: one bracket per rung of the
        #: ladder, of which ``width`` run at once)
        self.brackets: list[list[float]] = [
            levels[k:] for k in range(len(levels) if self.adaptive else brackets)]
        #: adaptive: the rung (index into :attr:`ladder`) the bracket window starts at
        self.start = 0
        self._seen: dict[Hashable, dict[int, float]] = {}  # trial -> rung index -> signed
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

    def _window(self) -> list[tuple[int, float]]:
        """``[(bracket, probability)]`` a new trial is drawn from: the ``width`` brackets
        from :attr:`start` (0 unless adaptive) with Hyperband's ``n_s`` (Li et al. 2018,
        Alg. 1) for the ladder from that rung, normalised; narrowed, :attr:`start` with
        ``1 - probe_rate`` and the next with ``probe_rate``."""
        s_max = len(self.ladder) - 1 - self.start
        if self.narrowed:
            if self.probe_rate == 0:
                return [(self.start, 1.0)]
            return [(self.start, 1 - self.probe_rate), (self.start + 1, self.probe_rate)]
        ks = range(min(self.width, s_max + 1))
        n_s = [math.ceil((s_max + 1) / (s_max + 1 - k) * self.reduction_factor ** (s_max - k))
               for k in ks]
        return [(self.start + k, n / sum(n_s)) for k, n in zip(ks, n_s, strict=True)]

    @property
    def narrowed(self) -> bool:
        """Adaptive: whether the window is one bracket now (its first rung's Spearman's rho
        is at least ``narrow_at`` over at least ``min_pairs`` pairs; a bracket above it
        exists)."""
        rho, n = self._start_rho
        return (self.adaptive and self.narrow_at is not None and rho is not None
                and n >= self.min_pairs and rho >= self.narrow_at
                and self.start + 1 < len(self.ladder))

    def bracket_weights(self) -> list[tuple[float, list[int]]]:
        """``[(probability, rung epochs)]`` per bracket, in bracket order: the chance a new
        trial is assigned to it now (Hyperband's ``n_s``, normalised; 0 outside the
        adaptive window) and the epochs at which it judges."""
        window = dict(self._window())
        return [(window.get(k, 0.0), [judged_at(r) for r in rungs])
                for k, rungs in enumerate(self.brackets)]

    def _draw(self, trial: Hashable) -> int:
        if (self.adaptive and len(self._bracket) < self.probe_trials
                and self.start + 1 < len(self.brackets)):
            return self.start + 1  # a probe: unjudged at the window's first rung
        window = self._window()
        if len(window) == 1:
            return window[0][0]
        u = random.Random(f"{self.seed}:{trial}").random()
        cumulative = np.cumsum([w for _, w in window])
        i = int(min(np.searchsorted(cumulative, u, side="right"), len(window) - 1))
        return window[i][0]

    def bracket_of(self, trial: Hashable) -> int:
        """The bracket ``trial`` belongs to (0 = the one starting at ``grace_period``).
        Fixed brackets: a function of the seed and ``trial`` alone. Adaptive: fixed at the
        trial's first report; before it, the bracket it would be drawn into now."""
        if trial not in self._bracket:
            if self.adaptive:
                return self._draw(trial)
            self._bracket[trial] = self._draw(trial)
        return self._bracket[trial]

    def rung_correlation(self, i: int) -> tuple[float | None, int]:
        """``(rho, pairs)``: Spearman's rank correlation between the values at rungs
        ``i`` and ``i + 1`` of the ladder, over the trials that reached both in a bracket
        starting above rung ``i`` (so none was judged at ``i``); rho is None with fewer
        than 3 pairs or when either side is constant. Adaptive policies only keep these
        values (an empty sample otherwise). Spearman (1904), computed by
        ``scipy.stats.spearmanr`` (ties get their average rank).

        Raises:
            ValueError: ``i`` is not a rung below the ladder's last.
        """
        if not 0 <= i < len(self.ladder) - 1:
            raise ValueError(f"rung index must be within 0..{len(self.ladder) - 2}, got {i}")
        pairs = [(seen[i], seen[i + 1]) for t, seen in self._seen.items()
                 if self._bracket.get(t, 0) > i and i in seen and i + 1 in seen]
        if len(pairs) < 3 or len({x for x, _ in pairs}) < 2 or len({y for _, y in pairs}) < 2:
            return None, len(pairs)
        from scipy.stats import spearmanr  # the driver only: trial workers never judge

        x, y = zip(*pairs, strict=True)
        return float(spearmanr(x, y).statistic), len(pairs)

    def summary(self) -> dict:
        """What the policy is and learnt, JSON-ready: ``rungs`` (the ladder's epochs),
        ``brackets`` (how many run at once), ``adaptive``, ``start_epoch`` (where the
        window starts now) and, adaptive, ``probe_trials``, ``narrowed`` (whether the window
        is one bracket now) and ``correlations``: per pair of consecutive rungs,
        ``{"from", "to" (epochs), "spearman" (None: not measurable), "pairs"}``."""
        out = {"rungs": [judged_at(r) for r in self.ladder], "brackets": self.width,
               "adaptive": self.adaptive, "start_epoch": judged_at(self.ladder[self.start])}
        if self.adaptive:
            out["probe_trials"], out["narrowed"] = self.probe_trials, self.narrowed
            out["correlations"] = []
            for i in range(len(self.ladder) - 1):
                rho, n = self.rung_correlation(i)
                out["correlations"].append({
                    "from": judged_at(self.ladder[i]), "to": judged_at(self.ladder[i + 1]),
                    "spearman": None if rho is None else round(rho, 4), "pairs": n})
        return out

    def note(self) -> str | None:
        """One console line when the adaptive window has left the lowest rung(s) or
        narrowed to one bracket, naming the correlations that moved it; None otherwise."""
        if not self.adaptive or (self.start == 0 and not self.narrowed):
            return None
        s = self.summary()
        # recomputed over every report so far, a correlation that moved the window may no
        # longer be measurable (one side constant now): said so, not formatted as a number
        parts = [f"epoch {c['from']} vs {c['to']}: Spearman "
                 f"{'not measurable' if c['spearman'] is None else format(c['spearman'], '.2f')}"
                 f" over {c['pairs']} trials" for c in s["correlations"][:self.start + 1]]
        line = "rungs  "
        if self.start:
            line += (f"brackets start at epoch {s['start_epoch']}: the epochs below ranked "
                     f"trials poorly for the next rung ({'; '.join(parts[:self.start])})")
        if self.narrowed:
            line += ("; " if self.start else "") + (
                f"one bracket from epoch {s['start_epoch']}: it ranked trials well for the "
                f"next rung ({parts[self.start]}); {self.probe_rate:.0%} of trials still pass "
                "it unjudged")
        return line

    def _place_window(self) -> None:
        """Adaptive: :attr:`start` = the lowest rung whose correlation with the next is
        not known to be poor (see the class doc), but never a rung at ``max_t`` (a
        window starting there would stop no trial)."""
        s, top = 0, max(0, sum(judged_at(r) < self.max_t for r in self.ladder) - 1)
        while True:
            rho, n = self.rung_correlation(s) if s < len(self.ladder) - 1 else (None, 0)
            if s >= top or n < self.min_pairs or rho is None or rho >= self.min_correlation:
                break
            s += 1
        self.start, self._start_rho = s, (rho, n)

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
        if trial not in self._bracket:
            self._bracket[trial] = self._draw(trial)
        k = self._bracket[trial]
        if self.adaptive and not _missing(value):
            self._keep(trial, k, epoch, value)
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
            elif self.cutoff == "rank":
                decision = self._judge_rank(rec, viol, signed, violation)
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

    def _keep(self, trial: Hashable, bracket: int, epoch: int, value: float) -> None:
        """Adaptive: keep the trial's value at each rung it reached (its first report at
        or past it), and place the window again when that makes a new pair."""
        seen, new_pair = self._seen.setdefault(trial, {}), False
        for i, level in enumerate(self.ladder):
            if epoch >= judged_at(level) and i not in seen:
                seen[i] = self._signed(value)
                new_pair |= i > 0 and bracket > i - 1 and i - 1 in seen
        if new_pair:
            self._place_window()

    def _judge(self, recorded: Mapping[Hashable, float], signed: float) -> str:
        """Stop when ``signed`` is below the top-1/reduction_factor cutoff of ``recorded``."""
        if not recorded:
            return CONTINUE
        cutoff = np.nanpercentile(list(recorded.values()), (1 - 1 / self.reduction_factor) * 100)
        return STOP if signed < cutoff else CONTINUE

    def _judge_rank(self, recorded: Mapping[Hashable, float],
                    violations: Mapping[Hashable, float], signed: float,
                    violation: float) -> str:
        """The rank rule (see the class doc): continue when fewer than ``max(1, floor(n /
        reduction_factor))`` of the ``n`` values (feasible first) beat this one."""
        def key(value: float, viol: float) -> tuple:  # larger is better
            return (1, value) if viol <= 0 else (0, -viol)

        mine = key(signed, violation)
        n = len(recorded) + 1
        top = max(1, math.floor(n / self.reduction_factor + _EPS))
        better = sum(key(v, violations[t]) > mine for t, v in recorded.items())
        return CONTINUE if better < top else STOP

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
