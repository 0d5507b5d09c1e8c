"""The sweep's ETA: the wall seconds still to go, with an 80% range, from measured epoch
times and the epochs the rung policy is still expected to grant.

Pure: no Ray, no clock of its own. A trial's slot time is its epochs plus a fixed cost per
trial:

* ``s`` = measured seconds per epoch (training steps + validation, the trials' own
  ``train_time_s + eval_time_s``), ``o`` = the rest of the slot time per trial started:
  start-up, gaps, reporting. It is measured from the moment every slot first held a
  trial (``warm``), so the sweep's one-off cold start (Tune's set-up, the first trial
  processes importing torch: 6-10 slot seconds on 2 cores, measured) is not charged
  again to every trial still to come; before then, from the sweep's start;
* a trial at epoch ``e`` of ``target`` runs to the next rung of its Hyperband bracket
  surely and past each rung ``r`` with the rate at which trials judged there continued
  (with a prior of ``1/reduction_factor``, Li et al. 2020's promotion rate, worth
  :data:`PRIOR` trials);
  a trial not yet started starts at 0 with the mean target of those that did, in each
  bracket with the policy's probability of assigning it there.

:func:`sweep_eta` is that model's expectation: ``(expected epochs x s + trials not yet
started x o) / slots``, capped by what ``search.time_budget_s`` leaves.

:func:`sweep_quantiles` is the same model with its uncertainty, a Monte Carlo of
:data:`DRAWS` draws (seeded: the same inputs give the same figures). Each draw takes

* each rung's continue rate from its Beta posterior (the prior above: ``PRIOR / rf``
  continued of ``PRIOR`` judged, plus the counts);
* a running trial at its own measured seconds per epoch, past each rung with that rate;
* what the sampler may still choose: the trials to come are spread over :data:`SETTLE`
  of the trials seen, drawn with replacement (a bootstrap of their seconds per epoch and
  target epochs together), each in a bracket drawn with the policy's probabilities and
  past each rung with the draw's rate, plus ``o``; :data:`SETTLE` small makes the
  trials to come share a few configurations, as TPE settles after its start-up trials
  (``benchmarks/results/eta_replay.md``: the misses are sweeps that moved to much cheaper
  or dearer configurations after the first third);
* the trials on ``slots`` slots, each to come starting on the slot that frees first: the
  draw's remaining time is the last slot's end (so the last long trial's tail counts).

Its 10%, 50% and 90% quantiles are the raw range and point. :func:`calibrate` turns them
into the :class:`~automl._progress.Eta` shown, with constants fitted on recorded sweeps
(:data:`CALIBRATION`, :func:`fit_calibration`): conformalized quantile regression (Romano,
Patterson & Candès, NeurIPS 2019) widens (or narrows) the raw range by one factor
``e^Q`` on each side, ``Q`` the ``ceil((n+1) 0.8)``-th smallest of the scores
``max(log(q_lo / y), log(y / q_hi))`` of ``n`` recorded moments with real remaining time
``y``; the point is the raw median times ``e^shift``, ``shift`` the median of
``log(y / q_mid)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from automl._progress import Eta

#: weight, in trials, of the 1/reduction_factor prior on a rung's continue rate
PRIOR = 3.0
#: draws of the Monte Carlo (256: a call of ``automl.search._tuner.eta_of`` took 1.3-1.5 ms
#: a quarter of the way through a 40-trial sweep, 32 trials to come, on a 2-core machine
#: under a load of 10; 0.9 ms for the Monte Carlo alone)
DRAWS = 256
#: the range's coverage: quantiles (1 - LEVEL)/2 and (1 + LEVEL)/2
LEVEL = 0.8
#: the trials to come are spread over this many of the trials seen (module doc)
SETTLE = 4


@dataclass(frozen=True)
class Calibration:
    """Constants that turn the Monte Carlo's raw quantiles into the ETA shown
    (:func:`calibrate`, fitted by :func:`fit_calibration`).

    Attributes:
        shift: log factor on the raw median (the point).
        widen: ``Q``, the log factor the raw range is widened by on each side (negative:
            narrowed).
        n: recorded moments it was fitted on (0: not fitted).
    """

    shift: float = 0.0
    widen: float = 0.0
    n: int = 0


#: The constants the product uses: ``fit_calibration`` on seeds 0-9 of the record's kept
#: sweeps (``python -m benchmarks --only eta``: ``benchmarks/results/eta_sweeps``, 1/4, 1/3
#: and 1/2 of each sweep; ``tests/test_eta_benchmark.py`` checks them against its
#: ``scores.json``). Fitted on the record of 2026-12-06 (20 sweeps of 40 trials on an
#: idle 2-core machine, load 2.2 from the sweeps themselves): the raw range already covered
#: 47 of 60 moments, so the fit moves it little (median -5%, each side widened by 0.5%).
CALIBRATION = Calibration(shift=-0.0496, widen=0.0047, n=30)


def expected_epochs(start: int, target: int, rungs: Sequence[int],
                    rate: Callable[[int], float]) -> float:
    """Expected further epochs of a trial now at epoch ``start`` (0: not started) that
    runs ``target`` epochs unless a rung stops it; it passes rung ``r`` (``start < r <
    target``) with probability ``rate(r)``."""
    if target <= start:
        return 0.0
    out, alive, at = 0.0, 1.0, start
    for r in [r for r in sorted(rungs) if start < r < target] + [target]:
        out += alive * (r - at)
        at = r
        if r < target:
            alive *= rate(r)
    return out


def epoch_seconds(rows: Sequence[Mapping[str, float]]) -> float:
    """Mean seconds per epoch (training steps + validation) of epoch report ``rows``, each
    with the trial's own ``train_time_s`` and ``eval_time_s`` (missing ones count 0).

    Raises:
        ZeroDivisionError: ``rows`` is empty.
    """
    return sum(r.get("train_time_s", 0.0) + r.get("eval_time_s", 0.0) for r in rows) / len(rows)


@dataclass(frozen=True)
class TrialState:
    """What the ETA needs of one trial: ``epoch`` reached, its ``target`` epochs, whether it
    has ``ended``, its Hyperband ``bracket`` (an index into ``sweep_eta``'s ``brackets``;
    0 with plain ASHA) and its own mean seconds per epoch ``epoch_s`` (None before it
    reported: the sweep's mean stands in)."""

    epoch: int
    target: int
    ended: bool
    bracket: int = 0
    epoch_s: float | None = None


def _overhead(trials: Sequence[TrialState], epoch_s: float, elapsed_s: float, slots: int,
              epochs_done: int, warm: tuple[float, int, int] | None) -> float:
    """``o``: slot seconds outside epochs per trial started (module doc)."""
    started = len(trials)
    if warm is not None and started > warm[2]:
        w_elapsed, w_epochs, w_started = warm
        return max(0.0, (elapsed_s - w_elapsed) * slots
                   - (epochs_done - w_epochs) * epoch_s) / (started - w_started)
    return max(0.0, elapsed_s * slots - epochs_done * epoch_s) / max(started, 1)


def sweep_eta(trials: Sequence[TrialState], total: int, *, rungs: Sequence[int],
              passed: Mapping[int, tuple[int, int]], reduction_factor: float | None,
              epoch_s: float, elapsed_s: float, slots: int, epochs_done: int,
              time_budget_s: float | None = None,
              warm: tuple[float, int, int] | None = None,
              brackets: Sequence[tuple[float, Sequence[int]]] | None = None) -> float | None:
    """Seconds still to go of a sweep of ``total`` trials, the model's expectation (module
    doc), or None before any epoch was measured.

    Args:
        trials: the trials started so far (ended or running).
        rungs: epochs at which the policy judges (empty: no early stopping); with
            ``brackets``, unused.
        passed: ``{rung epoch: (continued, judged)}`` so far.
        reduction_factor: the policy's, for the prior (None: no early stopping).
        epoch_s: measured seconds per epoch (training + validation).
        elapsed_s: wall seconds of the sweep so far (this session).
        slots: trials that run at once.
        epochs_done: epochs reported in this session (``elapsed_s`` paid for them).
        warm: ``(elapsed_s, epochs_done, trials started)`` when the ``slots``-th trial of
            this session started, or None (not yet, or unknown): the overhead per trial
            is measured from then on.
        brackets: ``[(probability, rung epochs)]``, one per Hyperband bracket
            (:meth:`automl.search.RungPolicy.bracket_weights`); None: one bracket, ``rungs``.
    """
    if epochs_done <= 0 or epoch_s <= 0 or slots <= 0:
        return None

    def rate(r: int) -> float:
        prior = 1.0 / reduction_factor if reduction_factor else 1.0
        cont, judged = passed.get(r, (0, 0))
        return (cont + PRIOR * prior) / (judged + PRIOR)

    started = len(trials)
    running = [t for t in trials if not t.ended]
    left = max(0, total - started)
    mean_target = (sum(t.target for t in trials) / started) if started else 0.0
    brackets = list(brackets) if brackets else [(1.0, rungs)]
    last = len(brackets) - 1
    epochs = sum(expected_epochs(t.epoch, t.target, brackets[min(t.bracket, last)][1], rate)
                 for t in running)
    epochs += left * sum(w * expected_epochs(0, round(mean_target), r, rate)
                         for w, r in brackets)
    overhead = _overhead(trials, epoch_s, elapsed_s, slots, epochs_done, warm)
    eta = (epochs * epoch_s + left * overhead) / slots
    if time_budget_s is not None:
        eta = min(eta, max(0.0, time_budget_s - elapsed_s))
    return eta


def _epochs(start: np.ndarray | int, target: np.ndarray, rungs: Sequence[int],
            rates: Mapping[int, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """Further epochs, one per element of ``target`` (shape ``(draws, m)``), of trials at
    epoch ``start`` that pass each rung ``start < r < target`` with their draw's rate
    (``rates[r]``: shape ``(draws,)``)."""
    start = np.broadcast_to(np.asarray(start, dtype=float), target.shape)
    out = np.zeros(target.shape)
    at = start.copy()
    alive = np.ones(target.shape, dtype=bool)
    for r in sorted(rungs):
        inside = (start < r) & (r < target)
        if not inside.any():
            continue
        out += np.where(inside & alive, r - at, 0.0)
        at = np.where(inside, r, at)
        alive &= ~inside | (rng.random(target.shape) < rates[r][:, None])
    return out + np.where(alive, np.maximum(target - at, 0.0), 0.0)


#: trials to come the Monte Carlo places on slots one by one (the rest by their mean cost)
SIMULATED = 64


def sweep_quantiles(trials: Sequence[TrialState], total: int, *, rungs: Sequence[int],
                    passed: Mapping[int, tuple[int, int]], reduction_factor: float | None,
                    epoch_s: float, elapsed_s: float, slots: int, epochs_done: int,
                    time_budget_s: float | None = None,
                    warm: tuple[float, int, int] | None = None,
                    brackets: Sequence[tuple[float, Sequence[int]]] | None = None,
                    draws: int = DRAWS, seed: int = 0,
                    level: float = LEVEL) -> tuple[float, float, float] | None:
    """``(q_lo, q_mid, q_hi)``: the ``(1 - level)/2``, 50% and ``(1 + level)/2`` quantiles
    of the seconds still to go under the model's own uncertainty (module doc: a Monte
    Carlo of ``draws`` draws from ``numpy.random.default_rng(seed)``), or None before any
    epoch was measured. Arguments as :func:`sweep_eta`'s; a trial's ``epoch_s`` is its
    own seconds per epoch (None: ``epoch_s``, the sweep's mean).

    Raises:
        ValueError: ``draws`` < 1 or ``level`` not in (0, 1).
    """
    if draws < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"draws must be >= 1 and level in (0, 1); got draws {draws}, "
                         f"level {level}")
    if epochs_done <= 0 or epoch_s <= 0 or slots <= 0:
        return None
    rng = np.random.default_rng(seed)
    brackets = [(float(w), list(r)) for w, r in brackets] if brackets else [(1.0, list(rungs))]
    prior = 1.0 / reduction_factor if reduction_factor else 1.0
    rates = {}
    for r in sorted({r for _, rs in brackets for r in rs}):
        cont, judged = passed.get(r, (0, 0))
        a, b = cont + PRIOR * prior, judged - cont + PRIOR * (1.0 - prior)
        rates[r] = rng.beta(a, b, draws) if a > 0 and b > 0 else \
            np.full(draws, 1.0 if b <= 0 else 0.0)
    # what a trial costs per epoch, and what it aims at: the pool the trials to come draw from
    pool = [(t.epoch_s, t.target) for t in trials if t.epoch_s and t.epoch_s > 0] \
        or [(epoch_s, t.target) for t in trials] or [(epoch_s, 1)]
    pool_s = np.array([p[0] for p in pool])
    pool_t = np.array([p[1] for p in pool], dtype=float)
    last = len(brackets) - 1

    ends = np.zeros((draws, max(1, slots)))
    rows = np.arange(draws)
    for t in (t for t in trials if not t.ended):
        s = (np.full(draws, t.epoch_s) if t.epoch_s and t.epoch_s > 0
             else pool_s[rng.integers(len(pool_s), size=draws)])
        e = _epochs(t.epoch, np.full((draws, 1), float(t.target)),
                    brackets[min(t.bracket, last)][1], rates, rng)[:, 0]
        i = ends.argmin(axis=1)
        ends[rows, i] += s * e
    left = max(0, total - len(trials))
    # at most SIMULATED trials to come are placed on slots one by one; the others add their
    # draw's mean cost, spread over the slots (list scheduling of many trials tends to it),
    # so a 100,000-trial sweep costs each event no more than a 64-trial one
    rest, left = max(0, left - SIMULATED), min(left, SIMULATED)
    if left:
        overhead = _overhead(trials, epoch_s, elapsed_s, slots, epochs_done, warm)
        modes = rng.integers(len(pool_s), size=(draws, SETTLE))
        src = np.take_along_axis(modes, rng.integers(SETTLE, size=(draws, left)), axis=1)
        s, target = pool_s[src], pool_t[src]
        weights = np.array([w for w, _ in brackets])
        weights = weights / weights.sum() if weights.sum() > 0 else np.full(len(brackets),
                                                                             1 / len(brackets))
        which = rng.choice(len(brackets), size=(draws, left), p=weights)
        epochs = np.zeros((draws, left))
        for k, (_, rs) in enumerate(brackets):
            if (which == k).any():
                epochs = np.where(which == k, _epochs(0, target, rs, rates, rng), epochs)
        cost = s * epochs + overhead
        if slots == 1:
            ends[:, 0] += cost.sum(axis=1)
        else:
            for j in range(left):
                i = ends.argmin(axis=1)
                ends[rows, i] += cost[:, j]
        if rest:
            ends += (rest * cost.mean(axis=1) / ends.shape[1])[:, None]
    remaining = ends.max(axis=1)
    if time_budget_s is not None:
        remaining = np.minimum(remaining, max(0.0, time_budget_s - elapsed_s))
    lo, mid, hi = np.quantile(remaining, [(1 - level) / 2, 0.5, (1 + level) / 2])
    return float(lo), float(mid), float(hi)


def calibrate(raw: tuple[float, float, float], cal: Calibration = CALIBRATION,
              cap_s: float | None = None) -> Eta:
    """The ETA shown from :func:`sweep_quantiles`' ``raw`` figures: the point ``q_mid x
    e^shift``, the range ``[q_lo e^-widen, q_hi e^widen]`` (module doc), widened to hold
    the point and capped at ``cap_s`` (what ``search.time_budget_s`` leaves)."""
    lo, mid, hi = raw
    return Eta.around(mid * math.exp(cal.shift), lo * math.exp(-cal.widen),
                      hi * math.exp(cal.widen)).capped(cap_s)


def fit_calibration(rows: Sequence[tuple[float, float, float, float]],
                    level: float = LEVEL) -> Calibration:
    """Fit :class:`Calibration` on recorded moments (conformalized quantile regression,
    Romano, Patterson & Candès 2019; module doc).

    Args:
        rows: ``(q_lo, q_mid, q_hi, real)`` per recorded moment: the raw figures
            (:func:`sweep_quantiles`) and the seconds that really remained, all > 0.
        level: the coverage aimed at.

    Returns:
        ``widen`` = the ``ceil((n + 1) level)``-th smallest score (the largest when ``n`` is
        under ``level / (1 - level)``: too few moments to promise ``level``), ``shift`` =
        the median of ``log(real / q_mid)``.

    Raises:
        ValueError: no rows, or a figure that is not > 0.
    """
    if not rows:
        raise ValueError("fit_calibration needs at least one recorded moment; got none")
    scores, logs = [], []
    for lo, mid, hi, y in rows:
        if min(lo, mid, hi, y) <= 0:
            raise ValueError(f"fit_calibration needs figures > 0; got q_lo {lo}, q_mid "
                             f"{mid}, q_hi {hi}, real {y}")
        scores.append(max(math.log(lo / y), math.log(y / hi)))
        logs.append(math.log(y / mid))
    scores.sort()
    n = len(scores)
    k = min(n, math.ceil((n + 1) * level))
    return Calibration(shift=round(float(np.median(logs)), 4), widen=round(scores[k - 1], 4),
                       n=n)
