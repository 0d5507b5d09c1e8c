"""Frozen, JSON-serialisable records of a finished search."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Why a trial ended.
COMPLETED, STOPPED, FAILED, DIVERGED = "completed", "stopped_early", "failed", "diverged"


def end_state(epochs: int, target: int, error: str | None = None) -> str:
    """How a trial ended, the one rule for ``trials.json`` and the progress line.

    Args:
        epochs: epochs it reported.
        target: its own ``training.epochs``.
        error: its error text, None when it did not raise.

    Returns:
        ``diverged`` (the training guard stopped it), ``failed`` (it raised),
        ``completed`` (it ran all its epochs) or ``stopped_early`` (the scheduler cut it).
    """
    if error is not None:
        return DIVERGED if "TrialDiverged" in error else FAILED
    return COMPLETED if epochs >= target else STOPPED


@dataclass(frozen=True)
class TrialRecord:
    """One trial: its sampled config, per-epoch history and how it ended.

    Attributes:
        end_state: ``completed`` (ran all its epochs), ``stopped_early`` (cut by
            ASHA at a rung), ``diverged`` (the divergence guard stopped it; ``error``
            says at which epoch and why) or ``failed`` (raised; see ``error``).
        history: one dict per epoch, as reported (``epoch``, ``val_accuracy``, ...).
        train_time_s: seconds spent inside training steps, summed over epochs.
        setup_s: seconds from the trial function's start to its first epoch.
    """

    trial_id: str
    params: dict[str, Any]
    config: dict[str, Any]
    end_state: str
    epochs_run: int
    target_epochs: int
    metrics: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    error: str | None = None
    reason: str | None = None
    checkpoint: str | None = None
    train_time_s: float = 0.0
    setup_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialRecord:
        """The record :meth:`to_dict` wrote (``trials.json`` rows)."""
        return cls(**d)


@dataclass(frozen=True)
class SearchResult:
    """Everything a later stage (selection, report) needs from the search.

    ``ranked`` holds the non-failed trials, best first, by their last reported
    ``metric`` (the value ASHA and the sampler saw); with several objectives, by
    non-dominated sorting (``automl.search._front.rank_trials``), and ``pareto`` holds the
    ids of the front's trials. ``objectives`` is ``[(metric, mode)]``, one entry for a
    plain search.
    """

    metric: str
    mode: str
    trials: list[TrialRecord]
    ranked: list[TrialRecord]
    wall_time_s: float
    max_concurrent: int
    trial_resources: dict[str, float]
    #: sampled configurations answered from an earlier trial's record instead of trained
    duplicates: int = 0
    #: the line saying the finite space ran out of untried configurations, if it did
    exhausted: str | None = None
    objectives: list[tuple[str, str]] = field(default_factory=list)
    pareto: list[str] = field(default_factory=list)
    #: the rung policy's :meth:`~automl.search.RungPolicy.summary` at the sweep's end (None:
    #: no early stopping)
    rungs: dict | None = None

    @property
    def multi_objective(self) -> bool:
        """True when the search had two or three objectives."""
        return len(self.objectives) > 1

    @property
    def front(self) -> list[TrialRecord]:
        """The Pareto front's trials (empty for one objective), in ``ranked`` order."""
        by_id = {t.trial_id: t for t in self.trials}
        return [by_id[i] for i in self.pareto if i in by_id]

    @property
    def best(self) -> TrialRecord | None:
        return self.ranked[0] if self.ranked else None

    def counts(self) -> dict[str, int]:
        out = {COMPLETED: 0, STOPPED: 0, FAILED: 0, DIVERGED: 0}
        for t in self.trials:
            out[t.end_state] += 1
        out["total"] = len(self.trials)
        return out

    def efficiency(self) -> dict[str, float]:
        """Training time / (wall time x concurrent slots), and overhead per trial (s)."""
        train = sum(t.train_time_s for t in self.trials)
        slots_wall = self.wall_time_s * self.max_concurrent
        n = max(len(self.trials), 1)
        return {
            "train_time_s": round(train, 3),
            "efficiency": round(train / slots_wall, 4) if slots_wall else 0.0,
            "overhead_per_trial_s": round((slots_wall - train) / n, 3),
            "setup_per_trial_s": round(sum(t.setup_s for t in self.trials) / n, 4),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "mode": self.mode,
            "wall_time_s": round(self.wall_time_s, 3),
            "max_concurrent": self.max_concurrent,
            "trial_resources": self.trial_resources,
            "counts": self.counts(),
            "efficiency": self.efficiency(),
            "duplicates": self.duplicates,
            "exhausted": self.exhausted,
            "objectives": [list(p) for p in self.objectives],
            "pareto": list(self.pareto),
            "rungs": self.rungs,
            "ranked": [t.trial_id for t in self.ranked],
            "trials": [t.to_dict() for t in self.trials],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SearchResult:
        """The result :meth:`to_dict` wrote (a finished stage a resumed run keeps)."""
        trials = [TrialRecord.from_dict(t) for t in d["trials"]]
        by_id = {t.trial_id: t for t in trials}
        return cls(d["metric"], d["mode"], trials, [by_id[i] for i in d["ranked"]],
                   float(d["wall_time_s"]), int(d["max_concurrent"]), dict(d["trial_resources"]),
                   int(d.get("duplicates", 0)), d.get("exhausted"),
                   [tuple(p) for p in d.get("objectives", [])], list(d.get("pareto", [])),
                   d.get("rungs"))
