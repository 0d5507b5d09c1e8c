"""The search-quality suite's problems: names, parsing of ``--problems``, what one
evaluation returns and costs, and the reference optimum regret is measured against.

Every problem is a maximisation over a ``ConfigSpace`` with an integer fidelity
``t = 1..max_t``; :meth:`Problem.evaluate` returns ``(score, cost_s)``:

* ``mfh6``, ``mfh6_good``, ``mfh6_bad``, ``mfh3`` (mf-prior-bench 1.10, Mallik et al. 2023,
  after Kandasamy et al. 2017; synthetic, deterministic, no download): fidelity 1..100,
  ``score`` = -(MF-Hartmann value) (it is minimised), ``cost_s`` = mf-prior-bench's
  ``fid_cost`` at ``t`` (0.05..1, read as seconds up to ``t``). Resumable.
* ``lcbench:<task>`` (YAHPO Gym LCBench surrogate, any of its 34 OpenML task ids):
  epochs 1..50 of the surrogate's 1..52, ``score`` = ``val_accuracy`` (%), ``cost_s`` = the
  surrogate's ``time`` (cumulative seconds of training to epoch ``t``). Resumable.
* ``rbv2_xgboost:<task>`` (YAHPO rbv2_xgboost, conditional 14-parameter space): ``t`` =
  1..27 is ``trainsize = t / 27``, ``score`` = ``acc``, ``cost_s`` = ``timetrain``. Not
  resumable: a fit on a larger share is a new fit, so every evaluation at ``t`` costs ``t``
  budget units (and its ``timetrain``), for every method.

One budget unit is one fidelity step of one trial; ``max_t`` units are one full training.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from typing import Any

MFH = ("mfh6", "mfh6_good", "mfh6_bad", "mfh3")
#: the suite of the full run (issue 14)
SUITE = (*MFH, "lcbench:189866", "lcbench:168331", "lcbench:189354", "lcbench:167168",
         "rbv2_xgboost:1590")
#: problems that need no benchmark-only package (the quick path, CI)
QUICK = ("mfh6", "mfh3")
_NAME = re.compile(r"^(lcbench|rbv2_xgboost):(\d+)$")
REFERENCE_SAMPLE = 4000  # random configurations at full fidelity for a surrogate's optimum


class ProblemError(ValueError):
    """A ``--problems`` entry that names no problem (the message names the flag)."""


def parse_problems(text: str) -> list[str]:
    """``"mfh6,lcbench:189866"`` -> ``["mfh6", "lcbench:189866"]`` (syntax only; a task id
    is checked against the surrogate by :func:`load`).

    Raises:
        ProblemError: an entry is neither an MF-Hartmann name nor ``lcbench:<digits>`` /
            ``rbv2_xgboost:<digits>``.
    """
    out = []
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        if name not in MFH and not _NAME.match(name):
            raise ProblemError(
                f"--problems: {name!r} is not a problem; use {', '.join(MFH)}, "
                "lcbench:<OpenML task id> or rbv2_xgboost:<OpenML task id>")
        if name not in out:
            out.append(name)
    if not out:
        raise ProblemError("--problems: no problem named")
    return out


@dataclass
class Problem:
    """One benchmark problem (see the module docstring). ``known_optimum``: the score of the
    published optimum, when there is one (MF-Hartmann)."""

    name: str
    label: str
    max_t: int
    resumable: bool
    cs: Any  # ConfigSpace.ConfigurationSpace, no fidelity
    _query: Any = field(repr=False)
    known_optimum: float | None = None
    sample_batch: Any = field(default=None, repr=False)  # configs -> scores at max_t

    def evaluate(self, config: dict[str, Any], t: int) -> tuple[float, float]:
        """``(score, cost_s)`` of ``config`` (active parameters only) at fidelity ``t``.

        Raises:
            ValueError: ``t`` is not an integer in ``1..max_t``.
        """
        if not (int(t) == t and 1 <= t <= self.max_t):
            raise ValueError(f"{self.name}: fidelity must be an integer in 1..{self.max_t}, "
                             f"got {t}")
        return self._query(config, int(t))

    def config_space(self, seed: int):
        """A fresh copy of the space, seeded with ``seed`` (what SMAC3 and DEHB take; a
        copy per run, so one run's sampling never moves another's)."""
        cs = copy.deepcopy(self.cs)
        cs.seed(int(seed))
        return cs

    def space(self, trial) -> dict:
        """Optuna define-by-run over the space (conditional parameters only when active)."""
        from benchmarks._spaces import suggest

        return suggest(self.cs, trial)


@functools.cache
def load(name: str) -> Problem:
    """The problem ``name`` (loaded once per process).

    Raises:
        ProblemError: an unknown name or task id (the message names ``--problems``).
        ImportError: the package the problem needs is missing (the message says which).
    """
    parse_problems(name)
    if name in MFH:
        return _mfh(name)
    kind, task = _NAME.match(name).groups()
    from benchmarks import _yahpo

    cls = _yahpo.LCBench if kind == "lcbench" else _yahpo.RBv2XGBoost
    try:
        bench = cls(task)
    except ValueError as e:
        raise ProblemError(f"--problems: {name}: {e}") from None
    if kind == "lcbench":
        return _lcbench(name, bench)
    return _rbv2(name, bench)


def _mfh(name: str) -> Problem:
    try:
        import mfpbench
    except ImportError as e:
        raise ImportError("mf-prior-bench is not installed: .venv/bin/pip install --no-deps "
                          "mf-prior-bench==1.10.0 configspace==1.2.2 more-itertools==11.2.1"
                          ) from e
    bench = mfpbench.get(name, seed=0)
    max_t = int(bench.end)
    params = sorted(bench.space.keys())

    def query(config: dict, t: int) -> tuple[float, float]:
        r = bench.query(bench.Config(**{p: float(config[p]) for p in params}), at=t)
        return -float(r.value.value), float(r.fid_cost.value)

    opt = {p: getattr(bench.optimum, p) for p in params}
    return Problem(name, f"{name} (MF-Hartmann, mf-prior-bench)", max_t, True,
                   copy.deepcopy(bench.space), query, known_optimum=query(opt, max_t)[0])


def _lcbench(name: str, bench) -> Problem:
    max_t = 50

    def query(config: dict, t: int) -> tuple[float, float]:
        out = bench.query(config, t)
        return out["val_accuracy"], out["time"]

    def batch(configs: list[dict]) -> list[float]:
        pts = [{**c, "OpenML_task_id": bench.task, "epoch": max_t} for c in configs]
        return [float(o["val_accuracy"]) for o in bench._bench.objective_function(pts)]

    return Problem(name, f"LCBench {bench.task} (val_accuracy %, epochs 1..{max_t})", max_t,
                   True, bench.config_space(), query, sample_batch=batch)


def _rbv2(name: str, bench) -> Problem:
    from benchmarks._spaces import active

    max_t = 27
    cs = bench.config_space()

    def query(config: dict, t: int) -> tuple[float, float]:
        out = bench.query(active(cs, config), t / max_t)
        return out["acc"], out["timetrain"]

    def batch(configs: list[dict]) -> list[float]:
        pts = [{**active(cs, c), "task_id": bench.task, "trainsize": 1.0, "repl": 10}
               for c in configs]
        return [float(o["acc"]) for o in bench._bench.objective_function(pts)]

    return Problem(name, f"rbv2_xgboost {bench.task} (acc, trainsize = t/{max_t})", max_t,
                   False, cs, query, sample_batch=batch)


def reference_sample(problem: Problem, n: int = REFERENCE_SAMPLE) -> dict[str, float]:
    """The best and the worst score of ``n`` configurations drawn at random (space seeded
    12345) and evaluated at full fidelity; for MF-Hartmann also its known optimum. The
    reference optimum is the best of these and of everything any method found."""
    cs = problem.config_space(12345)
    configs = [dict(c) for c in cs.sample_configuration(n)]
    if problem.sample_batch is not None:
        scores = []
        for i in range(0, n, 500):
            scores += problem.sample_batch(configs[i:i + 500])
    else:
        scores = [problem.evaluate(c, problem.max_t)[0] for c in configs]
    out = {"sample_best": max(scores), "sample_worst": min(scores), "sample_n": n}
    if problem.known_optimum is not None:
        out["known_optimum"] = problem.known_optimum
    return out
