"""Transfer HPO, leave one task out (issue 43): does a sweep that learns from earlier sweeps
find good configurations sooner, and does it stay as good as the no-transfer sweep when
the earlier sweeps do not fit?

Protocol (the issue's; ``--quick`` and the reduced options shrink it, and the record says
what ran):

* Problems: YAHPO LCBench (``benchmarks/_yahpo.py``, epochs 1..50, maximise
  ``val_accuracy``), leave one task out over its 34 tasks: the target is one task, the
  other 33 are sources, each with ``N_src`` random configurations (the same configurations
  on every source, drawn with the seed) and their learning curves at the rung epochs
  (1, 3, 9, 27, 50), ``N_src`` in {16, 64, 256}.
* Budgets 5, 10 and 30 full trainings (charged as ``benchmarks/_events.py`` charges:
  epochs computed), seeds paired across methods, sequential and 4 asynchronous workers on
  the simulated clock.
* Methods: ``automl`` (ours without transfer: the default sampler and rung policy);
  ``automl_transfer`` (ours with transfer: :class:`automl.search._transfer.TransferSampler`
  around the same sampler); ``warm_topk`` (today's nightly: the sources' top 3
  configurations by mean quantile enqueued first, then ours); ``rush`` (the same, with
  RUSH's thresholds from those 3 trials, :class:`automl.search._transfer.RushPolicy`);
  ``meta_tpe`` (optunahub's ``samplers/meta_learn_tpe``, Watanabe et al. 2023, loaded with
  ``optunahub.load_local_module`` from a local copy of the registry, with our rung
  policy); ``syne_boundingbox`` (Syne Tune 0.16's ``BoundingBox``, Perrone et al. 2019,
  around its ASHA); ``syne_zeroshot`` (Syne Tune's ``ZeroShotTransfer``: its greedy
  order of the source configurations run first by its ASHA; its module imports xgboost,
  which ``make bench-setup`` leaves out: ``pip install --no-deps xgboost-cpu``);
  ``random`` (random search, every trial to 50 epochs).
* Metrics: normalised regret ``(reference - best) / (reference - floor)`` (reference: the
  best of 4,000 random configurations at 50 epochs and of everything found; floor: their
  worst), its average rank (among all methods, and among the transfer methods), the
  speed-up over random (the budget at which random reaches its best at 30 full trainings,
  divided by the budget the method needs for that value; geometric mean over tasks), and
  the negative-transfer rate (the share of tasks where ``automl_transfer``'s mean regret
  at 30 full trainings is above ``automl``'s).

The ordered variant (nightly retuning, Hellan et al. 2023): rbv2_xgboost with
``trainsize`` as the night's data size in 20 ordered steps, 25 evaluations a night
(``benchmarks/_transfer_ordered.py``; ``--ordered-steps N``, 0 skips it).

``python -m benchmarks --only transfer [--quick] [--seeds N] [--problems lcbench:ID,...]
[--workers 1,4] [--n-src 16,64] [--methods m,...] [--time-limit S] [--ordered-steps N]``.
Finished leave-one-task-out cells are cached in ``<out>/transfer_cells/`` and read back:
an interrupted run continues (the ordered variant runs again).
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import time
import warnings
from pathlib import Path

from benchmarks import _sqstats as st
from benchmarks._common import RESULTS, Goal, Result, Table
from benchmarks._peers import SyneTuneRunner

NAME = "transfer"
TITLE = "Transfer HPO, leave one task out (YAHPO LCBench)"
BUDGET_FULL = 30
MARKS = (5, 10, 30)
N_SRC = (16, 64, 256)
TOP_K = 3
#: the ordered variant's evaluations per night (Hellan et al.: 25)
ORDERED_EVALS = 25
METHODS = ("automl", "automl_transfer", "warm_topk", "rush", "meta_tpe", "syne_zeroshot",
           "syne_boundingbox", "random")
TRANSFER = ("automl_transfer", "warm_topk", "rush", "meta_tpe", "syne_zeroshot",
            "syne_boundingbox")
QUICK_METHODS = ("automl", "automl_transfer", "warm_topk", "random")
QUICK_TASKS = ("189866", "168331")
#: the reduced run's tasks: every LCBench task but the saturated ones (random search leaves
#: under one point on 3945, 167185 and 34539: ``../shared/benchmarks/yahpo/README.md``)
SATURATED = ("3945", "167185", "34539")
EPOCHS = (1, 3, 9, 27, 50)
#: where ``optunahub-registry``'s ``package/`` folder lies (a local copy; see the README)
REGISTRY_ENV = "OPTUNAHUB_REGISTRY"


# -- sources ---------------------------------------------------------------------------------
@functools.cache
def _configs(n_src: int, seed: int) -> tuple[tuple[dict, ...], dict]:
    """``n_src`` random LCBench configurations (Optuna's ``RandomSampler`` on the problem's
    define-by-run space, seed ``10_000 + seed``) and their distributions."""
    import optuna

    from benchmarks._problems import load

    p = load(f"lcbench:{QUICK_TASKS[0]}")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=10_000 + seed))
    out, dists = [], {}
    for _ in range(n_src):
        trial = study.ask()
        p.space(trial)
        out.append(dict(trial.params))
        dists.update(trial.distributions)
        study.tell(trial, 0.0)
    return tuple(out), dists


@functools.cache
def _curves(n_src: int, seed: int) -> dict[str, list[dict[int, float]]]:
    """Per LCBench task: each source configuration's ``{epoch: val_accuracy}`` at
    :data:`EPOCHS` (one batched surrogate query)."""
    from benchmarks._yahpo import LCBench

    bench = LCBench(QUICK_TASKS[0])
    tasks = sorted(bench.instances, key=int)
    configs, _ = _configs(n_src, seed)
    points = [{**c, "OpenML_task_id": t, "epoch": e} for t in tasks for c in configs
              for e in EPOCHS]
    out = bench._bench.objective_function(points)
    values = iter(float(o["val_accuracy"]) for o in out)
    return {t: [{e: next(values) for e in EPOCHS} for _ in configs] for t in tasks}


def sources(target: str, n_src: int, seed: int):
    """The :class:`SourceStudy` of every LCBench task but ``target``."""
    from automl.search._transfer import SourceStudy

    configs, dists = _configs(n_src, seed)
    return [SourceStudy(f"lcbench:{t}", configs, tuple(curves), "max", dists)
            for t, curves in _curves(n_src, seed).items() if t != target]


def top_configs(target: str, n_src: int, seed: int, k: int = TOP_K) -> list[dict]:
    """The ``k`` source configurations with the best mean quantile at 50 epochs across the
    sources (today's warm start: the earlier studies' top configurations)."""
    import numpy as np
    from scipy.stats import rankdata

    configs, _ = _configs(n_src, seed)
    ranks = [rankdata([-c[50] for c in curves]) for t, curves in _curves(n_src, seed).items()
             if t != target]
    order = np.argsort(np.mean(ranks, axis=0), kind="stable")
    return [dict(configs[i]) for i in order[:k]]


# -- runners ---------------------------------------------------------------------------------
class _Runner:
    """Our search core (``StudySearch`` + a rung policy) with a given sampler, enqueued
    configurations and policy; the interface of :class:`benchmarks._peers.CoreRunner`."""

    def __init__(self, problem, exp, sampler, policy, enqueue=()):
        import optuna

        from automl.search import StudySearch
        from benchmarks._events import checkpoints

        self.max_t, self.policy = problem.max_t, policy
        self.search = StudySearch(problem.space, optuna.storages.InMemoryStorage(), "tr",
                                  sampler, "max", 10**6, seed=exp.search.seed)
        for params in enqueue:
            self.search.study.enqueue_trial(params)
        self.points = checkpoints(self.max_t) if policy is not None else [self.max_t]

    def ask(self):
        from benchmarks._events import Job

        s = self.search.ask()
        return None if s is None else Job(s.number, s.config, list(self.points))

    def tell(self, job, t: int, score: float, cost_s: float) -> bool:
        from automl.search import STOP

        self.search.report(job.trial, t, score)
        if self.policy is not None and self.policy.on_report(job.trial, t, score) == STOP:
            return False
        return t < self.max_t

    def finish(self, job, t: int, score: float) -> None:
        from automl.search import end_state

        self.search.end(job.trial, end_state(t, self.max_t), t, score)


def _syne_evals(task: str, n_src: int, seed: int, space: dict):
    """The sources as Syne Tune ``TransferLearningTaskEvaluations`` (one seed, the rung
    epochs as fidelities, metric ``score``)."""
    import numpy as np
    import pandas as pd
    from syne_tune.optimizer.schedulers.transfer_learning.transfer_learning_task_evaluation import (  # noqa: E501
        TransferLearningTaskEvaluations,
    )

    configs, _ = _configs(n_src, seed)
    frame = pd.DataFrame([{k: c[k] for k in space} for c in configs])
    return {t: TransferLearningTaskEvaluations(
        configuration_space=space, hyperparameters=frame, objectives_names=["score"],
        objectives_evaluations=np.asarray([[[[c[e]] for e in EPOCHS]] for c in curves],
                                          dtype=float))
        for t, curves in _curves(n_src, seed).items() if t != task}


class SyneRunner(SyneTuneRunner):
    """Syne Tune 0.16's transfer methods around its ``ASHA`` (grace 1, reduction factor 3,
    stopping); ``ask``, ``tell`` and ``finish`` are :class:`benchmarks._peers.SyneTuneRunner`'s
    (only the scheduler built here differs):

    * ``boundingbox``: ``BoundingBox`` (Perrone et al. 2019): the box of each source's best
      configuration bounds ASHA's random search (driven through the box's ``scheduler``:
      the box does not forward ``on_trial_result``);
    * ``zeroshot``: ``ZeroShotTransfer`` (Wistuba et al. 2015): its greedy average-rank
      order of the source configurations (``get_config``) is ASHA's
      ``points_to_evaluate``, random search after them.

    Raises:
        ImportError: syne-tune (or, for zeroshot, xgboost, which its module imports) is
            missing.
    """

    def __init__(self, problem, seed: int, n_src: int, kind: str):
        import contextlib
        import io

        import numpy as np

        from benchmarks._events import checkpoints
        from benchmarks._spaces import syne_tune_space

        try:
            from syne_tune.optimizer.baselines import ASHA
            if kind == "zeroshot":
                from syne_tune.optimizer.schedulers.transfer_learning.zero_shot import (
                    ZeroShotTransfer,
                )
            else:
                from syne_tune.optimizer.schedulers.transfer_learning.bounding_box import (
                    BoundingBox,
                )
        except ImportError as e:
            raise ImportError(f"Syne Tune's {kind} cannot be imported ({e}); make bench-setup"
                              + ("; ZeroShotTransfer's module imports xgboost: pip install "
                                 "--no-deps xgboost-cpu" if kind == "zeroshot" else "")
                              ) from None
        np.random.seed(seed)
        task = problem.name.split(":", 1)[1]
        self.cs = problem.config_space(seed)
        space = syne_tune_space(self.cs)
        evals = _syne_evals(task, n_src, seed, space)

        def asha(box, metric, do_minimize, random_seed, points=None):
            return ASHA(box, metric=metric, time_attr="epoch", max_t=problem.max_t,
                        do_minimize=do_minimize, random_seed=random_seed, grace_period=1,
                        reduction_factor=3, points_to_evaluate=points)

        with contextlib.redirect_stdout(io.StringIO()):  # the box is printed
            if kind == "zeroshot":
                zs = ZeroShotTransfer(space, "score", evals, do_minimize=False,
                                      sort_transfer_learning_evaluations=False,
                                      random_seed=seed)
                points = []
                while (c := zs.get_config()) is not None:
                    points.append({k: c[k].item() if hasattr(c[k], "item") else c[k]
                                   for k in space})
                self.sch = asha(space, "score", False, seed, points)
            else:
                self.sch = BoundingBox(asha, space, "score", evals, do_minimize=False,
                                       random_seed=seed).scheduler
        self.problem, self.points, self.n = problem, checkpoints(problem.max_t), 0


def _meta_tpe_class():
    """``MetaLearnTPESampler`` from the local registry copy.

    Raises:
        ImportError: optunahub or the local copy is missing (one line: how to get it).
    """
    root = os.environ.get(REGISTRY_ENV)
    how = (f"set {REGISTRY_ENV} to a local copy of optunahub-registry's package/ folder "
           "(see benchmarks/README.md)")
    if not root or not (Path(root) / "samplers" / "meta_learn_tpe").is_dir():
        raise ImportError(f"meta_learn_tpe not found: {how}")
    try:
        import optunahub
    except ImportError as e:
        raise ImportError(f"optunahub is not installed ({e}); pip install optunahub") from None
    mod = optunahub.load_local_module(package="samplers/meta_learn_tpe", registry_root=root)
    return mod.MetaLearnTPESampler


def _source_studies(target: str, n_src: int, seed: int):
    """The sources as in-memory Optuna studies of COMPLETE trials at 50 epochs."""
    import optuna

    configs, dists = _configs(n_src, seed)
    out = []
    for t, curves in _curves(n_src, seed).items():
        if t == target:
            continue
        study = optuna.create_study(direction="maximize", study_name=f"src-{t}")
        study.add_trials([optuna.trial.create_trial(
            params=c, distributions={k: dists[k] for k in c}, value=curve[50],
            intermediate_values=curve) for c, curve in zip(configs, curves, strict=True)])
        out.append(study)
    return out


def make_runner(method: str, problem, seed: int, n_src: int):
    """The runner of ``method`` on ``problem`` (``lcbench:<task>``) with ``seed``.

    Raises:
        ValueError: an unknown method. ImportError: a peer's package is missing.
    """
    from automl.search import make_policy, make_sampler
    from automl.search._transfer import RushPolicy
    from benchmarks._peers import experiment

    task = problem.name.split(":", 1)[1]
    exp = experiment(problem, seed)
    if method == "automl":
        return _Runner(problem, exp, make_sampler(exp.search), make_policy(exp))
    if method == "automl_transfer":
        return _Runner(problem, exp, make_sampler(
            exp.search, sources=sources(task, n_src, seed), max_epoch=problem.max_t),
            make_policy(exp))
    if method in ("warm_topk", "rush"):
        policy = make_policy(exp)
        if method == "rush":
            policy = RushPolicy(policy, anchors=range(TOP_K))
        return _Runner(problem, exp, make_sampler(exp.search), policy,
                       enqueue=top_configs(task, n_src, seed))
    if method == "meta_tpe":
        cls = _meta_tpe_class()
        sampler = cls(source_studies=_source_studies(task, n_src, seed),
                      n_startup_trials=exp.search.n_startup_trials, seed=seed)
        return _Runner(problem, exp, sampler, make_policy(exp))
    if method == "random":
        rnd = experiment(problem, seed, "random", asha=False)
        return _Runner(problem, rnd, make_sampler(rnd.search), None)
    if method in ("syne_boundingbox", "syne_zeroshot"):
        return SyneRunner(problem, seed, n_src, method.split("_", 1)[1])
    raise ValueError(f"--methods: unknown transfer method {method!r}; one of "
                     f"{', '.join(METHODS)}")


# -- cells -----------------------------------------------------------------------------------
def run_cell(task: str, method: str, seed: int, workers: int, n_src: int) -> dict:
    """One search: its incumbent trace (``[(units, best score at 50 epochs)]``)."""
    import optuna

    from benchmarks import _events
    from benchmarks._problems import load

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    p = load(f"lcbench:{task}")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = make_runner(method, p, seed, n_src)
        events = _events.run(p, runner, BUDGET_FULL * p.max_t, workers)
    record = getattr(getattr(runner, "search", None), "study", None)
    weights = (record.user_attrs.get("automl.transfer") if record is not None else None) or {}
    return {"task": task, "method": method, "seed": seed, "workers": workers, "n_src": n_src,
            "trace": st.trace(events), "trials": len({e.trial for e in events}),
            "wall_s": round(time.perf_counter() - t0, 3),
            "proposed_by_sources": len(weights.get("transfer", [])),
            "dropped": len(weights.get("dropped", []))}


class Cells:
    """One JSON line per finished cell in ``<folder>/cells.jsonl``, read back on start."""

    def __init__(self, folder: Path):
        self.folder, self.cells = folder, {}
        path = folder / "cells.jsonl"
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    c = json.loads(line)
                except json.JSONDecodeError:
                    continue
                self.cells[self.key(c)] = c

    @staticmethod
    def key(c: dict) -> tuple:
        return (c["task"], c["method"], c["seed"], c["workers"], c["n_src"])

    def add(self, cell: dict) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.cells[self.key(cell)] = cell
        with open(self.folder / "cells.jsonl", "a") as fh:
            fh.write(json.dumps(cell) + "\n")


def _reference(task: str, folder: Path, cells: Cells) -> tuple[float, float]:
    """``(reference, floor)`` of a task (the sample cached in ``reference.json``)."""
    from benchmarks._problems import load, reference_sample

    path = folder / "reference.json"
    cache = json.loads(path.read_text()) if path.is_file() else {}
    if task not in cache:
        cache[task] = reference_sample(load(f"lcbench:{task}"))
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1))
    found = [c["trace"][-1][1] for k, c in cells.cells.items() if k[0] == task and c["trace"]]
    return max([cache[task]["sample_best"], *found]), cache[task]["sample_worst"]


# -- the run ---------------------------------------------------------------------------------
def run(quick: bool, ctx: dict) -> Result:
    from benchmarks._yahpo import LCBench

    res = Result(NAME, TITLE)
    try:
        all_tasks = sorted(LCBench(QUICK_TASKS[0]).instances, key=int)
    except ImportError as e:
        res.status, res.reason = "unavailable", str(e).splitlines()[0]
        return res
    t_start = time.time()
    problems = ctx.get("problems")
    if problems:
        bad = [p for p in problems if not p.startswith("lcbench:")]
        if bad:
            raise ValueError(f"--problems: transfer runs on LCBench tasks only, got {bad}")
        tasks = [p.split(":", 1)[1] for p in problems]
    else:
        tasks = list(QUICK_TASKS) if quick else all_tasks
    methods = list(ctx.get("methods") or (QUICK_METHODS if quick else METHODS))
    for m in ("automl", "automl_transfer", "random"):
        if m not in methods:
            methods.append(m)
    seeds = list(range(ctx.get("seeds") or (1 if quick else 20)))
    workers_list = list(ctx.get("workers") or ([1] if quick else [1, 4]))
    n_srcs = list(ctx.get("n_src") or ([16] if quick else N_SRC))
    limit = ctx.get("time_limit_s")
    out = Path(ctx.get("out") or (RESULTS / "quick" if quick else RESULTS))
    folder = out / "transfer_cells"
    cells = Cells(folder)
    unavailable: dict[str, str] = {}
    stopped = False
    plan = [(n, w, s, t) for n in n_srcs for s in seeds for w in workers_list for t in tasks]
    for n_src, workers, seed, task in plan:
        for method in methods:
            if method in unavailable or (task, method, seed, workers, n_src) in cells.cells:
                continue
            if limit is not None and time.time() - t_start > limit:
                stopped = True
                break
            try:
                cells.add(run_cell(task, method, seed, workers, n_src))
            except ImportError as e:
                unavailable[method] = str(e).splitlines()[0]
                continue
            except Exception as e:  # a peer that breaks is recorded, ours raises
                if method in ("automl", "automl_transfer", "random"):
                    raise
                unavailable[method] = f"failed: {type(e).__name__}: {str(e).splitlines()[0]}"
                continue
            c = cells.cells[(task, method, seed, workers, n_src)]
            print(f"   lcbench:{task} {method} seed {seed} workers {workers} N_src {n_src}: "
                  f"{c['wall_s']:.1f}s", flush=True)
        if stopped:
            break
    ran = [m for m in methods if m not in unavailable]
    refs = {t: _reference(t, folder, cells) for t in tasks}
    res.settings = {"tasks": tasks, "methods": methods, "ran": ran, "seeds": seeds,
                    "workers": workers_list, "n_src": n_srcs, "budgets": list(MARKS),
                    "budget_full_trainings": BUDGET_FULL, "top_k": TOP_K,
                    "stopped_by_time_limit": stopped,
                    "wall_s": round(time.time() - t_start, 1)}
    res.seeds = {"seeds": f"{seeds[0]}..{seeds[-1]}", "paired": True}
    summarise(res, cells, refs, tasks, ran, seeds, workers_list, n_srcs)
    res.notes += [f"{m}: not run ({why})" for m, why in unavailable.items()]
    steps = ctx.get("ordered_steps")
    steps = (3 if quick else 20) if steps is None else int(steps)
    if steps >= 2:
        ordered(res, seeds, steps, 5 if quick else ORDERED_EVALS)
    else:
        res.notes.append("The ordered variant (rbv2_xgboost, trainsize in ordered steps) was "
                         "not run (--ordered-steps 0).")
    if stopped:
        res.notes.append("--time-limit stopped the run: the statistics use the cells that "
                         "finished (complete seeds only).")
    return res


def ordered(res: Result, seeds: list[int], steps: int, evals: int) -> None:
    """The ordered variant (``benchmarks/_transfer_ordered.py``): a table and a goal."""
    from benchmarks import _transfer_ordered as ot

    data = ot.run_ordered(seeds, steps, evals)
    rows, neg = ot.summary_rows(data)
    res.tables.append(Table(
        f"Ordered variant: rbv2_xgboost {ot.TASK}, {steps} nights (trainsize "
        f"{data['sizes'][0]:.2f}..{data['sizes'][-1]:.2f}), {evals} evaluations a night, "
        f"{len(seeds)} seeds: mean normalised regret from the second night on",
        ["method", *(f"regret after {b}" for b in ot.MARKS)], rows))
    res.goals.append(Goal("ordered: ours with transfer no worse than ours without, night "
                          "by night (mean over seeds, after the last evaluation)",
                          f"worse on {neg['worse']} of {neg['nights']} nights",
                          neg["worse"] <= 0.1 * neg["nights"]))
    res.data["ordered"] = {"sizes": data["sizes"], "wall_s": data["wall_s"],
                           "regrets": data["regrets"]}


def _complete(cells: Cells, tasks, methods, seeds, workers: int, n_src: int) -> list[int]:
    """Seeds for which every task has a cell of every method."""
    return [s for s in seeds if all((t, m, s, workers, n_src) in cells.cells
                                    for t in tasks for m in methods)]


def _regret(cell: dict, units: float, ref: tuple[float, float]) -> float:
    reference, floor = ref
    return st.regret_at(cell["trace"], units, reference, floor) / max(reference - floor, 1e-12)


def _reach(trace, target: float) -> float | None:
    """Full trainings of budget at which ``trace`` first scores at least ``target``."""
    for b, s in trace:
        if s >= target - 1e-12:
            return b / 50.0
    return None


def summarise(res: Result, cells: Cells, refs, tasks, methods, seeds, workers_list,
              n_srcs) -> None:
    """Tables and goals from the cells (complete seeds only)."""
    transfer = [m for m in methods if m in TRANSFER]
    goals_rank, goals_speed, goals_neg = [], [], []
    for n_src in n_srcs:
        for workers in workers_list:
            done = _complete(cells, tasks, methods, seeds, workers, n_src)
            if not done:
                continue
            label = f"N_src {n_src}, {workers} worker{'s' if workers > 1 else ''}"

            def cell(t, m, s, n_src=n_src, workers=workers):
                return cells.cells[(t, m, s, workers, n_src)]

            rows = []
            for m in methods:
                row = [m]
                for b in MARKS:
                    vals = [_regret(cell(t, m, s), b * 50, refs[t]) for t in tasks for s in done]
                    row.append(statistics.mean(vals))
                rows.append(row)
            ranks_all, ranks_tr = {}, {}
            for b in MARKS:
                table = {t: {m: [_regret(cell(t, m, s), b * 50, refs[t]) for s in done]
                             for m in methods} for t in tasks}
                ranks_all[b] = st.average_ranks(table)
                ranks_tr[b] = st.average_ranks({t: {m: v for m, v in by.items()
                                                    if m in transfer}
                                                for t, by in table.items()})
            speed = {}
            for m in methods:
                per_task = []
                for t in tasks:
                    ups = []
                    for s in done:
                        target = st.best_at(cell(t, "random", s)["trace"], BUDGET_FULL * 50)
                        if target is None:
                            continue
                        got = _reach(cell(t, m, s)["trace"], target)
                        base = _reach(cell(t, "random", s)["trace"], target)
                        ups.append(base / got if got else base / BUDGET_FULL)
                    if ups:
                        per_task.append(statistics.median(ups))
                speed[m] = math.exp(statistics.mean(math.log(max(u, 1e-9)) for u in per_task)) \
                    if per_task else None
            neg = []
            for t in tasks:
                a = statistics.mean(_regret(cell(t, "automl_transfer", s), 1500, refs[t])
                                    for s in done)
                b = statistics.mean(_regret(cell(t, "automl", s), 1500, refs[t]) for s in done)
                neg.append(a > b + 1e-9)
            rate = sum(neg) / len(neg)
            res.tables.append(Table(
                f"{label}: mean normalised regret, average rank (all methods | transfer "
                f"methods) at B = 5, 10, 30, speed-up over random ({len(done)} seeds x "
                f"{len(tasks)} tasks)",
                ["method", *(f"regret B={b}" for b in MARKS), *(f"rank B={b}" for b in MARKS),
                 *(f"transfer rank B={b}" for b in MARKS), "speed-up"],
                [[*row, *(ranks_all[b].get(row[0]) for b in MARKS),
                  *(ranks_tr[b].get(row[0]) for b in MARKS), speed[row[0]]] for row in rows]))
            best = {b: min(ranks_tr[b], key=ranks_tr[b].get) for b in (5, 10) if ranks_tr[b]}
            goals_rank.append(f"{label}: B=5 {best.get(5)}, B=10 {best.get(10)}")
            goals_rank_met = all(v == "automl_transfer" for v in best.values())
            goals_speed.append((label, speed.get("automl_transfer")))
            goals_neg.append((label, rate, sum(neg), len(neg)))
            res.data[label] = {"negative_tasks": [t for t, n in zip(tasks, neg, strict=True)
                                                  if n],
                               "speed_up": speed, "seeds": done,
                               "ranks_transfer": {str(b): r for b, r in ranks_tr.items()}}
            res.goals.append(Goal(f"{label}: best average rank among transfer methods at "
                                  "B=5 and B=10 is ours with transfer",
                                  f"B=5 {best.get(5)}, B=10 {best.get(10)}", goals_rank_met))
    for label, sp in goals_speed:
        res.goals.append(Goal(f"{label}: geometric-mean speed-up over random >= 5x",
                              "-" if sp is None else f"{sp:.2f}x",
                              None if sp is None else sp >= 5))
    for label, rate, k, n in goals_neg:
        res.goals.append(Goal(f"{label}: negative-transfer rate at B=30 <= 10% of tasks",
                              f"{rate:.0%} ({k} of {n} tasks)", rate <= 0.10))
