"""What a sweep optimises: one metric or several (a Pareto search), and the constraints a
trial must keep. Pure: reads Tune result dicts and Optuna trials, imports neither Ray nor
torch.

The conventions are Optuna's: a constraint value ``<= 0`` is satisfied, a positive one is
by how much it is broken (``Trial.set_constraint``, read by ``TPESampler`` and
``NSGAIISampler`` as in Deb et al. 2002's constrained domination); the total violation of
a trial is the sum of its positive constraint values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from automl.spec import SearchSpec

#: Relative differences a measured objective must exceed to count on a Pareto front:
#: two trials of the same model measure latencies that differ by noise (benchmarks/results/
#: latency_stability.md), and a model must not join the front for being 2% faster by chance.
TOLERANCE = {"latency_ms": 0.10}


@dataclass(frozen=True)
class Objectives:
    """The sweep's objectives and constraints.

    Attributes:
        metrics: the objective metrics, in the spec's order (one entry: a plain search).
        modes: ``"max"`` or ``"min"`` per metric.
        constraints: ``(metric, low, high)`` per constraint (either bound may be None).
    """

    metrics: tuple[str, ...]
    modes: tuple[str, ...]
    constraints: tuple[tuple[str, float | None, float | None], ...] = ()

    @classmethod
    def of(cls, search: SearchSpec) -> Objectives:
        """From the spec's ``search`` section (``objectives`` or ``metric``/``mode``, and
        ``constraints``)."""
        pairs = search.objective_list()
        return cls(tuple(m for m, _ in pairs), tuple(d for _, d in pairs),
                   tuple((c.metric, c.min, c.max) for c in search.constraints))

    def pairs(self) -> list[tuple[str, str]]:
        """``[(metric, mode)]`` in order (``summary.json``'s ``objectives``)."""
        return list(zip(self.metrics, self.modes, strict=True))

    def minimised(self, result: Mapping[str, Any]) -> list[float] | None:
        """The objective values of ``result`` turned so every one is minimised (maximised
        ones negated), as :mod:`automl.search._pareto` takes them; None when one is
        missing."""
        v = self.value(result)
        if v is None:
            return None
        vals = v if isinstance(v, tuple) else (v,)
        return [-s * x for s, x in zip(self.signs, vals, strict=True)]

    def tolerances(self) -> list[float]:
        """Relative tolerance per objective (:data:`TOLERANCE`; 0 for exact metrics)."""
        return [TOLERANCE.get(m, 0.0) for m in self.metrics]

    @property
    def multi(self) -> bool:
        """True for two or three objectives."""
        return len(self.metrics) > 1

    @property
    def mode(self) -> str | tuple[str, ...]:
        """What :class:`~automl.search.RungPolicy` and :class:`StudySearch` take: the one
        mode, or the tuple of modes."""
        return self.modes if self.multi else self.modes[0]

    @property
    def signs(self) -> tuple[float, ...]:
        """``+1`` for a maximised objective, ``-1`` for a minimised one."""
        return tuple(1.0 if m == "max" else -1.0 for m in self.modes)

    def value(self, result: Mapping[str, Any]) -> float | tuple[float, ...] | None:
        """The objective value(s) in ``result``: a float (one objective) or a tuple in
        :attr:`metrics` order; None when one is missing or NaN (the report is not judged)."""
        out = []
        for m in self.metrics:
            v = result.get(m)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                return None
            out.append(float(v))
        return tuple(out) if self.multi else out[0]

    def constraint_values(self, result: Mapping[str, Any]) -> list[float]:
        """One value per constraint in Optuna's convention (``<= 0`` satisfied): ``value -
        high`` for a ``max``, ``low - value`` for a ``min``, the larger of both when both
        are given. A metric ``result`` lacks counts as satisfied (0.0)."""
        out = []
        for metric, low, high in self.constraints:
            v = result.get(metric)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                out.append(0.0)
                continue
            parts = ([float(v) - high] if high is not None else []) + (
                [low - float(v)] if low is not None else [])
            out.append(max(parts))
        return out

    def violation(self, result: Mapping[str, Any]) -> float:
        """Total violation: the sum of the positive constraint values (0.0 = feasible)."""
        return float(sum(c for c in self.constraint_values(result) if c > 0))

    def feasible(self, result: Mapping[str, Any]) -> bool:
        """Whether ``result`` keeps every constraint."""
        return self.violation(result) == 0.0

    def constraint_names(self) -> list[str]:
        """One name per constraint, as the study stores it: ``latency_ms<=0.8``,
        ``params>=1000``, ``params in [1000, 5000]``."""
        out = []
        for metric, low, high in self.constraints:
            if low is not None and high is not None:
                out.append(f"{metric} in [{low:g}, {high:g}]")
            else:
                out.append(f"{metric}<={high:g}" if high is not None else f"{metric}>={low:g}")
        return out

    def constraint_map(self, result: Mapping[str, Any]) -> dict[str, float]:
        """``{name: value}`` of :meth:`constraint_values` (what ``Trial.set_constraint``
        takes); empty without constraints."""
        return dict(zip(self.constraint_names(), self.constraint_values(result), strict=True))
