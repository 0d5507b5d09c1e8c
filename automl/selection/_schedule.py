"""Which fold training runs next, and which results count: fold halving without a barrier
at fold 1, and the later folds longest first. Pure (no Ray): the driver asks for a job
whenever a slot is free and hands back each result."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Key = tuple[str, int]  # (trial id, fold index); fold index 0 is "fold 1"


class AllOf:
    """A fixed set of jobs, run in the order given; every result counts (the refit)."""

    def __init__(self, keys: Iterable[Any]):
        self.keys = list(keys)
        self.results: dict = {}

    def next(self, running: set) -> Any | None:
        return next((k for k in self.keys if k not in running and k not in self.results), None)

    def record(self, key, result: dict) -> list[tuple[Any, dict]]:
        self.results[key] = result
        return [(key, result)]

    def wanted(self, key) -> bool:
        return True

    def cancel(self, key) -> None:
        raise AssertionError("every job of AllOf is wanted")

    def finished(self) -> bool:
        return all(k in self.results for k in self.keys)


class FoldSchedule:
    """The order of a cross-validation's fold trainings, and which results count.

    - Without halving, every candidate runs every fold.
    - With halving (successive halving at the fold level; Jamieson & Talwalkar 2016),
      every candidate runs fold 1 first. Once every fold 1 is scored, only the candidates
      within ``margin`` of the fold-1 leader run the rest.
    - No slot waits at that barrier. While the last fold-1 trainings run, a free slot
      starts a later fold of the candidate most likely to survive: the best fold-1 score
      so far, then the next best within ``margin`` of it. Such a speculative result is
      held until every fold 1 is in. It counts only if its candidate survives; otherwise
      it is dropped (never logged, never scored) and counted in ``wasted``.
    - The rest run longest first (LPT; Graham 1969), so the longest fold training does
      not start last and leave one slot working alone. A candidate's fold training is
      estimated from its measured training seconds per epoch times its ``epochs``; before
      any is measured, from ``epochs`` alone.

    Args:
        candidates: trial ids, best first (ties in every order go to the earlier one).
        n_folds: fold trainings per candidate (folds x repeats).
        halve: fold halving (ignored with one candidate or one fold).
        margin: how far below the fold-1 leader (in ``metric``, a fraction) a candidate may
            score and still run the other folds.
        epochs: each candidate's epochs.
        metric: the score that decides, read from ``result["scores"]``.
        done: results an earlier attempt already holds, ``{(trial id, fold): result}``;
            each result has ``scores`` and ``train_time_s``.

    Attributes:
        results: the results that count, ``{(trial id, fold): result}``.
        survivors: the candidates that run every fold (None while fold 1 is undecided).
        leader: the fold-1 leader once decided (None without halving).
        wasted: speculative fold trainings dropped with their candidate (finished, or
            stopped while running: :meth:`cancel`).
    """

    def __init__(self, candidates: Sequence[str], n_folds: int, *, halve: bool,
                 margin: float, epochs: Mapping[str, int], metric: str,
                 done: Mapping[Key, dict] | None = None, sign: int = 1):
        self.order = list(candidates)
        self.n = int(n_folds)
        self.halve = bool(halve) and self.n > 1 and len(self.order) > 1
        self.margin = float(margin)
        self.epochs = {c: max(1, int(epochs.get(c, 1))) for c in self.order}
        self.metric, self.sign = metric, sign
        self.results: dict[Key, dict] = dict(done or {})
        self.held: dict[Key, dict] = {}
        self.survivors: list[str] | None = None if self.halve else list(self.order)
        self.leader: str | None = None
        self.wasted = 0
        if self.halve and self._fold1_in():
            self._decide()

    # -- reading ----------------------------------------------------------------------
    def score1(self, c: str) -> float:
        return float(self.results[(c, 0)]["scores"][self.metric])

    def _key(self, c: str) -> float:
        """The fold-1 score, larger better (``sign`` -1: a score where smaller is)."""
        return self.sign * self.score1(c)

    def _fold1_in(self) -> bool:
        return all((c, 0) in self.results for c in self.order)

    def _likely(self) -> list[str]:
        """Candidates with a fold-1 score within ``margin`` of the best so far, best first."""
        known = [c for c in self.order if (c, 0) in self.results]
        if not known:
            return []
        best = max(self._key(c) for c in known)
        near = [c for c in known if self._key(c) >= best - self.margin - 1e-12]
        return sorted(near, key=lambda c: -self._key(c))

    def seconds(self, c: str) -> float:
        """The estimated length of one of ``c``'s fold trainings (seconds when any fold
        training has been measured, else epochs)."""
        measured = [(k[0], r) for k, r in self.results.items() if r.get("train_time_s")]
        if not measured:
            return float(self.epochs[c])
        own = [r["train_time_s"] for t, r in measured if t == c]
        if own:
            return sum(own) / len(own)
        per_epoch = sum(r["train_time_s"] / self.epochs.get(t, 1) for t, r in measured)
        return per_epoch / len(measured) * self.epochs[c]

    def wanted(self, key: Key) -> bool:
        """Whether a running job's result can still count."""
        return self.survivors is None or key[0] in self.survivors

    def finished(self) -> bool:
        return self.survivors is not None and all(
            (c, i) in self.results for c in self.survivors for i in range(self.n))

    # -- deciding ---------------------------------------------------------------------
    def next(self, running: set[Key]) -> Key | None:
        """The job a free slot should start, or None when none should; ``running``: the
        keys of the jobs in flight."""
        busy = set(running) | set(self.results) | set(self.held)
        if self.survivors is None:
            first = next(((c, 0) for c in self.order if (c, 0) not in busy), None)
            if first is not None:
                return first
            return next(((c, i) for c in self._likely() for i in range(1, self.n)
                         if (c, i) not in busy), None)
        left = [(c, i) for c in self.survivors for i in range(self.n) if (c, i) not in busy]
        if not left:
            return None
        rank = {c: r for r, c in enumerate(self.order)}
        return min(left, key=lambda k: (-self.seconds(k[0]), rank[k[0]], k[1]))

    def record(self, key: Key, result: dict) -> list[tuple[Key, dict]]:
        """Take one finished job's result; returns the results that now count, in order
        (a speculative one is held until fold 1 is decided, then counts or is dropped)."""
        if self.survivors is not None:
            if key[0] not in self.survivors:
                self.wasted += 1
                return []
            self.results[key] = result
            return [(key, result)]
        if key[1] > 0:
            self.held[key] = result
            return []
        self.results[key] = result
        out = [(key, result)]
        if self._fold1_in():
            out += self._decide()
        return out

    def cancel(self, key: Key) -> None:
        """A running job the schedule no longer wanted was stopped (counted in ``wasted``)."""
        self.wasted += 1

    def _decide(self) -> list[tuple[Key, dict]]:
        self.leader = max(self.order, key=lambda c: (self._key(c), -self.order.index(c)))
        top = self._key(self.leader)
        self.survivors = [c for c in self.order if self._key(c) >= top - self.margin - 1e-12]
        out = []
        for key in sorted(self.held, key=lambda k: (self.order.index(k[0]), k[1])):
            if key[0] in self.survivors:
                self.results[key] = self.held[key]
                out.append((key, self.held[key]))
            else:
                self.wasted += 1
        self.held.clear()
        return out
