"""The simulated backend of the search-quality benchmark: sequential or ``K``
asynchronous workers on a simulated clock, with one charging rule for every method
(Syne Tune's simulator idea: all clock access sits here, nothing sleeps).

A method is a :class:`Runner`: ``ask`` hands out a :class:`Job` (a configuration and the
fidelities at which it reports, in order), ``tell`` receives each report and answers
whether the job goes on to its next fidelity, ``finish`` closes the job. A method that
restarts a configuration at a higher fidelity (DEHB, SMAC) hands out a new one-fidelity
job from scratch each time.

Charging (budget units; ``max_t`` units = one full training): a step from fidelity
``prev`` to ``t`` of one job costs ``t - prev`` units on a resumable problem (a stopped
trial is charged the epochs it computed; ``prev`` is 0 for a new job, so a restart pays
its whole fidelity again) and ``t`` units on a non-resumable one (rbv2's ``trainsize``:
every evaluation is a new fit). Simulated time advances the same way with the problem's
cost (``cost(t) - cost(prev)``, or ``cost(t)``).

The clock: each worker runs one step at a time; the step that ends first (ties: the one
started first) is reported next, then its worker goes on or asks for a new job. The run
ends when a step would take the charged total past the budget (that step is not seen),
or when no worker has a job.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Job:
    """One unit of work a method hands out: ``config`` reported at each of ``fidelities``
    (ascending) while ``tell`` says go on. ``state`` is the method's own handle."""

    trial: Hashable
    config: dict[str, Any]
    fidelities: list[int]
    state: Any = None


@dataclass(frozen=True)
class Event:
    """One report: ``trial`` at ``fidelity`` scored ``score``; ``budget`` is the charged
    total (units) once it was computed, ``time`` the simulated clock (s), ``full``
    whether it is a full-fidelity result (the only ones regret counts)."""

    trial: Hashable
    fidelity: int
    score: float
    budget: float
    full: bool
    time: float


class Runner(Protocol):
    """A search method as the driver sees it."""

    def ask(self) -> Job | None: ...

    def tell(self, job: Job, fidelity: int, score: float, cost_s: float) -> bool: ...

    def finish(self, job: Job, fidelity: int, score: float) -> None: ...


@dataclass(order=True)
class _Step:
    ends: float
    seq: int
    job: Job = field(compare=False)
    index: int = field(compare=False)  # position in job.fidelities
    units: float = field(compare=False)
    score: float = field(compare=False)
    cost_s: float = field(compare=False)


def run(problem, runner: Runner, budget_units: float, workers: int = 1) -> list[Event]:
    """Drive ``runner`` on ``problem`` until ``budget_units`` are charged (see the module
    docstring); the reports in the order they were seen.

    Raises:
        ValueError: ``workers`` < 1, or a job with no or non-ascending fidelities.
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    events: list[Event] = []
    heap: list[_Step] = []
    seq = itertools.count()
    spent, clock = 0.0, 0.0
    prev_cost: dict[int, float] = {}  # id(job) -> cost of the fidelity it reached

    def schedule(job: Job, index: int) -> None:
        t = int(job.fidelities[index])
        prev = int(job.fidelities[index - 1]) if index else 0
        if t <= prev or t > problem.max_t:
            raise ValueError(f"job {job.trial}: fidelities must ascend within 1.."
                             f"{problem.max_t}, got {job.fidelities}")
        score, cost = problem.evaluate(job.config, t)
        if problem.resumable:
            units, dt = t - prev, cost - prev_cost.get(id(job), 0.0)
        else:
            units, dt = t, cost
        prev_cost[id(job)] = cost
        heapq.heappush(heap, _Step(clock + max(dt, 0.0), next(seq), job, index, units, score,
                                   cost))

    def start() -> None:
        job = runner.ask()
        if job is None:
            return
        if not job.fidelities:
            raise ValueError(f"job {job.trial}: no fidelity to report at")
        schedule(job, 0)

    for _ in range(workers):
        start()
    while heap:
        step = heapq.heappop(heap)
        if spent + step.units > budget_units + 1e-9:
            break
        spent += step.units
        clock = step.ends
        job, t = step.job, int(step.job.fidelities[step.index])
        events.append(Event(job.trial, t, step.score, spent, t == problem.max_t, clock))
        go_on = runner.tell(job, t, step.score, step.cost_s)
        if go_on and step.index + 1 < len(job.fidelities):
            schedule(job, step.index + 1)
        else:
            prev_cost.pop(id(job), None)
            runner.finish(job, t, step.score)
            start()
    return events


def checkpoints(max_t: int, rf: int = 3) -> list[int]:
    """The fidelities a trial of a rung-based method reports at: every ``rf**k`` below
    ``max_t`` (the rungs of ASHA / Hyperband with grace period 1 in every bracket, ours,
    Optuna's and Syne Tune's alike) and ``max_t``. No rung-based decision reads any other
    epoch, and the charge (epochs computed) is the same."""
    out, level = [], 1
    while level < max_t:
        out.append(level)
        level *= rf
    return [*out, max_t]
