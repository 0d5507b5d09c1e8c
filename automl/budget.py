"""One budget for the whole job (``budget_s``): the search gets what remains after an
estimate of cross-validation, refit and compression, and those stages shrink to fit when
the estimate was wrong.

The estimate comes from the sweep's own measurements: each trial's seconds per training
row per epoch (its ``train_time_s`` over the rows it trained on, plus validation), so a
stage's cost is ``epochs x rows x that rate``, plus a fixed cost per training task, over
the slots that run at once. The likely CV candidates are the sweep's current top
``selection.top_k``. Each estimate carries its 80% range,
:data:`automl._progress.PRIOR_RANGE` times it (the same range each stage's progress line
shows before its first steps), and the budget plans with the range's upper end
(:data:`HIGH` x the estimate): a budget is overrun less often than with the point. When
the upper end ended the sweep while the point would have let it go on, the one-line
message says about how many trials that cost (from the sweep's pace so far).

Shrinking, in this order, each said in one line: fewer CV candidates (down to 2), then
fewer folds (down to 2), then one candidate (its folds still score the winner); fewer
distillation and fine-tuning epochs (down to 1), and no compression at all when what is
left would not hold even the chain's fixed cost (``automl compress RUN_DIR`` runs it
later).
``search.time_budget_s`` still bounds the sweep alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from automl._progress import PRIOR_RANGE, Eta
from automl.spec import Experiment

#: the upper end of an estimate's range, as a factor of it: what the budget plans with
HIGH = PRIOR_RANGE[1]
#: seconds a training task costs besides its epochs (start, preprocessing, scoring;
#: measured 0.5 s a fold on 2 idle cores)
TASK_S = 0.6
#: after a distillation stage, the chain trains the student: taken to cost this share of
#: the teacher's seconds per epoch (measured on digits, a 19.7k-parameter student of a
#: 170k-parameter teacher: about 0.3; small models do not get cheaper in proportion)
STUDENT_SHARE = 0.3
#: seconds the compression chain spends per stage besides training (exports, ONNX,
#: latency measurements), and publishing the run (registry, W&B, summary)
STAGE_S, PUBLISH_S = 2.0, 3.0


@dataclass(frozen=True)
class Candidate:
    """What a stage estimate needs of one trial: its ``epochs`` (target) and measured
    ``s_per_row_epoch`` (seconds per training row per epoch, validation included)."""

    epochs: int
    s_per_row_epoch: float


def candidate_of(rows: Sequence[dict], target: int, train_rows: int) -> Candidate | None:
    """A trial's :class:`Candidate` from its epoch rows (``train_time_s``,
    ``eval_time_s``), or None before it reported."""
    if not rows or train_rows <= 0:
        return None
    per_epoch = sum(r.get("train_time_s", 0.0) + r.get("eval_time_s", 0.0)
                    for r in rows) / len(rows)
    return Candidate(int(target or rows[-1]["epoch"]), per_epoch / train_rows)


@dataclass
class JobBudget:
    """The job's clock and its estimates (module doc).

    Args:
        exp: the experiment (``budget_s``, ``selection``, ``compression``, resources).
        rows: training rows of the search (``train``), of cross-validation and the refit
            (``pool``: train + validation).
        slots: trainings that run at once.
        clock: seconds, monotonic; ``t0`` is when the job started.
    """

    exp: Experiment
    train_rows: int
    pool_rows: int
    slots: int
    t0: float
    clock: Callable[[], float] = time.monotonic
    notes: list[str] = field(default_factory=list)
    estimates: dict = field(default_factory=dict)
    search_stopped_at_s: float | None = None
    #: when the sweep was ended: ``(the later stages' estimate, seconds the point estimate
    #: would have left the sweep, trials that would have ended in them)``
    stop: tuple[Eta, float, int] | None = None

    @property
    def budget_s(self) -> float | None:
        return self.exp.budget_s

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.t0

    @property
    def left_s(self) -> float:
        return (self.budget_s or math.inf) - self.elapsed_s

    # -- estimates ------------------------------------------------------------------------
    def cv_s(self, cands: Sequence[Candidate], folds: int | None = None,
             top_k: int | None = None) -> float:
        sel = self.exp.selection
        k = folds or sel.cv_folds
        cands = list(cands)[: top_k or sel.top_k]
        rows = self.pool_rows * (k - 1) / k
        jobs = [c.epochs * rows * c.s_per_row_epoch + TASK_S
                for c in cands for _ in range(k * sel.cv_repeats)]
        return _parallel(jobs, self.slots)

    def refit_s(self, winner: Candidate) -> float:
        """The refit on the pool rows (when the compression teacher must be trained, it
        trains beside the refit on fewer rows, in another slot)."""
        return winner.epochs * self.pool_rows * winner.s_per_row_epoch + TASK_S

    def compression_s(self, winner: Candidate, comp=None) -> float:
        """The chain after the teacher (which trains beside the refit): each stage's
        training epochs at the teacher's rate (:data:`STUDENT_SHARE` of it from a
        distillation stage on), plus :data:`STAGE_S` per stage and for the teacher's and
        the winner's exports and measurements."""
        comp = comp or self.exp.compression
        if not comp.enabled or not comp.stages:
            return 0.0
        epochs, share = 0.0, 1.0
        for st in comp.stages:
            if st.stage == "distill":
                share = STUDENT_SHARE
            epochs += _stage_epochs(st) * share
        return (epochs * self.train_rows * winner.s_per_row_epoch
                + STAGE_S * (len(comp.stages) + 2))

    @property
    def refit_beside_compression(self) -> bool:
        """Whether the main job runs the refit beside the compression chain (one slot each;
        ``automl.pipeline.run_main_job``): compression on, two slots, not data-parallel.
        It also needs the winner's own trial as the teacher, which the sweep's top trials
        almost always are (they ran all their epochs); when not, the chain follows the
        refit and shrinks to what is left (:meth:`fit_compression`)."""
        comp = self.exp.compression
        return (comp.enabled and bool(comp.stages) and self.slots >= 2
                and not self.exp.resources.distributed)

    def after_cv_s(self, winner: Candidate) -> float:
        """The refit and the compression: the longer of the two when they run side by
        side, else their sum (the point, no range)."""
        refit, comp = self.refit_s(winner), self.compression_s(winner)
        return max(refit, comp) if self.refit_beside_compression else refit + comp

    def later(self, cands: Sequence[Candidate]) -> Eta:
        """Seconds of everything after the sweep, with the range the budget plans with
        (:data:`automl._progress.PRIOR_RANGE`); each stage's goes to :attr:`estimates`."""
        if not cands:
            return Eta(0.0, 0.0, 0.0)
        w = cands[0]
        parts = {"cv": self.cv_s(cands), "refit": self.refit_s(w),
                 "compression": self.compression_s(w), "publish": PUBLISH_S}
        self.estimates = {k: Eta.of(v).to_dict() for k, v in parts.items()}
        return Eta.of(parts["cv"] + self.after_cv_s(w) + PUBLISH_S)

    def later_s(self, cands: Sequence[Candidate]) -> float:
        """The upper end of :meth:`later`: what the budget plans with, seconds."""
        return self.later(cands).high

    def search_over(self, cands: Sequence[Candidate],
                    pace: tuple[int, int, float] | None = None) -> bool:
        """Whether the sweep must end now for the later stages to fit the budget, planning
        with the upper end of their estimate.

        Args:
            cands: the sweep's current top trials (the likely CV candidates).
            pace: ``(trials ended, trials not ended, sweep seconds)`` so far: how many
                trials the upper end cost, when it ends the sweep before the point would
                have (:meth:`stop_line`).
        """
        if self.budget_s is None or self.search_stopped_at_s is not None:
            return self.search_stopped_at_s is not None
        later = self.later(cands)
        if self.elapsed_s + later.high < self.budget_s:
            return False
        self.search_stopped_at_s = round(self.elapsed_s, 1)
        slack = max(0.0, self.budget_s - self.elapsed_s - later.s)
        cost = 0
        if slack > 0 and pace is not None and pace[2] > 0:
            ended, not_ended, sweep_s = pace
            cost = min(not_ended, math.floor(slack * ended / sweep_s))
        self.stop = (later, slack, cost)
        return True

    def stop_line(self) -> str | None:
        """The one line saying when and why the sweep was ended, or None (it was not)."""
        if self.search_stopped_at_s is None or self.stop is None:
            return None
        later, slack, cost = self.stop
        parts = ", ".join(f"{k} {v['eta_s']:.0f}" for k, v in self.estimates.items())
        line = (f"budget search ended at {self.search_stopped_at_s:.0f} s of budget_s "
                f"{self.budget_s:.0f}: the later stages are estimated at {later.s:.0f} s "
                f"({later.low:.0f}-{later.high:.0f} s; {parts}), planned with the upper end")
        if cost >= 1:
            line += (f"; the point estimate would have let the sweep run {slack:.0f} s more: "
                     f"about {cost} more trial{'s' if cost > 1 else ''} ended")
        return line

    # -- shrinking ------------------------------------------------------------------------
    def fit_cv(self, cands: Sequence[Candidate]) -> tuple[int, int]:
        """``(top_k, cv_folds)`` that fit what is left after the refit and compression;
        the spec's own when they fit or there is no budget. Says so when it shrinks."""
        sel = self.exp.selection
        top_k, folds = min(sel.top_k, len(cands)), sel.cv_folds
        if self.budget_s is None or not cands:
            return top_k, folds
        rest = (self.after_cv_s(cands[0]) + PUBLISH_S) * HIGH
        room = self.left_s - rest
        before = (top_k, folds)
        while self.cv_s(cands, folds, top_k) * HIGH > room and (top_k > 1 or folds > 2):
            if top_k > 2 or (top_k == 2 and folds == 2):
                top_k -= 1
            else:
                folds -= 1
        if (top_k, folds) != before:
            self.notes.append(
                f"budget cv shrunk from {before[0]} candidates x {before[1]} folds to {top_k} "
                f"x {folds} to fit budget_s {self.budget_s:.0f} (upper end of its estimate "
                f"{self.cv_s(cands, folds, top_k) * HIGH:.0f} s, {max(room, 0):.0f} s left "
                "for it)")
        return top_k, folds

    def fit_compression(self, winner: Candidate):
        """The compression section with its training epochs scaled down (at least 1) to fit
        what is left, or the spec's own. Says so when it shrinks."""
        comp = self.exp.compression
        if self.budget_s is None or not comp.enabled or not comp.stages:
            return comp
        room = self.left_s - PUBLISH_S * HIGH
        need = self.compression_s(winner) * HIGH
        if need <= room:
            return comp
        fixed = STAGE_S * (len(comp.stages) + 2) * HIGH
        if room <= fixed:  # not even one epoch a stage fits: the chain is left for later
            self.notes.append(
                f"budget compression skipped to fit budget_s {self.budget_s:.0f} (upper end "
                f"of its estimate {need:.0f} s, {max(room, 0):.0f} s left); run it later: "
                "automl compress RUN_DIR")
            return comp.model_copy(update={"enabled": False})
        scale = max(0.0, (room - fixed) / max(need - fixed, 1e-9))
        stages = [_scaled(s, scale) for s in comp.stages]
        shrunk = comp.model_copy(update={"stages": stages})
        self.notes.append(
            f"budget compression training epochs scaled by {scale:.2f} (at least 1 each) to "
            f"fit budget_s {self.budget_s:.0f} (upper end of its estimate {need:.0f} s, "
            f"{max(room, 0):.0f} s left)")
        return shrunk

    def record(self, wall_s: float | None = None) -> dict:
        """The ``budget`` section of ``summary.json``: ``estimates_s`` holds each later
        stage's last estimate with its range (``{"eta_s", "low_s", "high_s"}``),
        ``search_stop`` the line said when the sweep was ended (or None)."""
        wall = self.elapsed_s if wall_s is None else wall_s
        return {"budget_s": self.budget_s, "wall_time_s": round(wall, 1),
                "within": None if self.budget_s is None else wall <= self.budget_s,
                "search_stopped_at_s": self.search_stopped_at_s,
                "search_stop": self.stop_line(),
                "trials_cost_by_upper_end": self.stop[2] if self.stop else 0,
                "estimates_s": self.estimates, "shrunk": list(self.notes)}


def _parallel(jobs: list[float], slots: int) -> float:
    """Wall seconds of ``jobs`` run longest first on ``slots`` (list scheduling)."""
    ends = [0.0] * max(1, slots)
    for j in sorted(jobs, reverse=True):
        i = ends.index(min(ends))
        ends[i] += j
    return max(ends)


def _stage_epochs(s) -> int:
    return int(getattr(s, "epochs", 0) or getattr(s, "fine_tune_epochs", 0) or 0)


def _scaled(s, scale: float):
    for key in ("epochs", "fine_tune_epochs"):
        n = getattr(s, key, None)
        if n:
            return s.model_copy(update={key: max(1, int(n * scale))})
    return s
