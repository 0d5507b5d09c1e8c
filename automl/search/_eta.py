"""The sweep's ETA: the wall seconds still to go, from measured epoch times and the epochs
the rung policy is still expected to grant.

Pure: no Ray, no clock of its own. Model (a trial's slot time is its epochs plus a fixed
cost per trial):

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
  bracket with the policy's probability of assigning it there;
* ETA = (expected epochs x ``s`` + trials not yet started x ``o``) / slots, capped by
  what ``search.time_budget_s`` leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: weight, in trials, of the 1/reduction_factor prior on a rung's continue rate
PRIOR = 3.0


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
    has ``ended``, and its Hyperband ``bracket`` (an index into ``sweep_eta``'s
    ``brackets``; 0 with plain ASHA)."""

    epoch: int
    target: int
    ended: bool
    bracket: int = 0


def sweep_eta(trials: Sequence[TrialState], total: int, *, rungs: Sequence[int],
              passed: Mapping[int, tuple[int, int]], reduction_factor: float | None,
              epoch_s: float, elapsed_s: float, slots: int, epochs_done: int,
              time_budget_s: float | None = None,
              warm: tuple[float, int, int] | None = None,
              brackets: Sequence[tuple[float, Sequence[int]]] | None = None) -> float | None:
    """Seconds still to go of a sweep of ``total`` trials (module doc), or None before
    any epoch was measured.

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
    overhead = max(0.0, elapsed_s * slots - epochs_done * epoch_s) / max(started, 1)
    if warm is not None and started > warm[2]:
        w_elapsed, w_epochs, w_started = warm
        overhead = max(0.0, (elapsed_s - w_elapsed) * slots
                       - (epochs_done - w_epochs) * epoch_s) / (started - w_started)
    eta = (epochs * epoch_s + left * overhead) / slots
    if time_budget_s is not None:
        eta = min(eta, max(0.0, time_budget_s - elapsed_s))
    return eta
