"""The ordered variant of the transfer benchmark (issue 43; Hellan et al. 2023, "Obeying the
Order: Introducing Ordered Transfer Hyperparameter Optimisation", Syne Tune's
``benchmarking/nursery/othpo``): nightly retuning as the data grows.

One YAHPO rbv2_xgboost task; night ``k`` of ``steps`` trains on ``trainsize`` = the k-th of
``steps`` evenly spaced shares from 0.05 to 1 (the night's data size), and a sweep of
``evals`` full evaluations (no early stopping: the fidelity is the night's data) runs each
night. Methods, each night: ``automl`` (ours without transfer, a fresh study), ``automl_
transfer`` (ours with every earlier night's study as a source), ``warm_topk`` (the simple
ordered baseline, today's nightly: the previous night's top 3 configurations run first)
and ``random``. Regret per night is normalised by the best and worst of 1,000 random
configurations at that night's ``trainsize``.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

TASK = "1590"
TOP_K = 3
METHODS = ("automl", "automl_transfer", "warm_topk", "random")
MARKS = (5, 10, 25)


def _night(bench, cs, trainsize: float, method: str, seed: int, evals: int,
           history: list[tuple[list[dict], list[float], dict]]) -> tuple[list[dict], list[float],
                                                                          dict]:
    """One night's sweep: ``(params, values, distributions)`` of its ``evals`` trials."""
    import optuna

    from automl.search import StudySearch, make_sampler
    from automl.search._transfer import SourceStudy
    from benchmarks._peers import experiment
    from benchmarks._problems import load
    from benchmarks._spaces import active

    problem = load(f"rbv2_xgboost:{TASK}")
    exp = experiment(problem, seed, "random" if method == "random" else "auto", asha=False)
    sources = ()
    if method == "automl_transfer":
        sources = [SourceStudy(f"night {i}", tuple(p), tuple({1: v} for v in vals), "max", d)
                   for i, (p, vals, d) in enumerate(history)]
    sampler = make_sampler(exp.search, sources=sources, max_epoch=1)
    search = StudySearch(problem.space, optuna.storages.InMemoryStorage(), "night", sampler,
                         "max", evals, seed=seed)
    if method == "warm_topk" and history:
        params, values, _ = history[-1]
        for j in np.argsort(values, kind="stable")[::-1][:TOP_K]:
            search.study.enqueue_trial(params[j])
    out_p, out_v, dists = [], [], {}
    for _ in range(evals):
        s = search.ask()
        if s is None:
            break
        value = float(bench.query(active(cs, s.config), trainsize)["acc"])
        search.report(s.number, 1, value)
        search.end(s.number, "completed", 1, value)
        out_p.append(dict(s.params))
        out_v.append(value)
    for t in search.study.trials:
        dists.update(t.distributions)
    return out_p, out_v, dists


def run_ordered(seeds: list[int], steps: int, evals: int) -> dict:
    """Every method over ``steps`` nights for each seed. Returns per method the normalised
    regret at :data:`MARKS` evaluations, per night from the second on, per seed."""
    from benchmarks._spaces import active
    from benchmarks._yahpo import RBv2XGBoost

    bench = RBv2XGBoost(TASK)
    cs = bench.config_space()
    sizes = [float(x) for x in np.linspace(0.05, 1.0, steps)]
    sample = [dict(c) for c in cs.sample_configuration(1000)]
    refs = []
    for ts in sizes:
        pts = [{**active(cs, c), "task_id": TASK, "trainsize": ts, "repl": 10} for c in sample]
        accs = [float(o["acc"]) for o in bench._bench.objective_function(pts)]
        refs.append((max(accs), min(accs)))
    t0 = time.perf_counter()
    regrets: dict[str, dict[int, list[list[float]]]] = {m: {b: [] for b in MARKS}
                                                        for m in METHODS}
    for seed in seeds:
        for m in METHODS:
            history: list = []
            per_mark: dict[int, list[float]] = {b: [] for b in MARKS}
            for k, ts in enumerate(sizes):
                params, values, dists = _night(bench, cs, ts, m, seed * 1000 + k, evals,
                                               history)
                history.append((params, values, dists))
                if k == 0:
                    continue  # no earlier night to learn from
                best, worst = refs[k]
                best = max(best, *values)
                for b in MARKS:
                    got = max(values[:b]) if values[:b] else worst
                    per_mark[b].append(max(0.0, best - got) / max(best - worst, 1e-12))
            for b in MARKS:
                regrets[m][b].append(per_mark[b])
    return {"regrets": regrets, "sizes": sizes, "wall_s": round(time.perf_counter() - t0, 1)}


def summary_rows(data: dict) -> tuple[list[list], dict]:
    """Rows ``[method, mean regret at each mark, share of (night, seed) pairs where it beats
    ours without transfer at 25]`` and the negative-transfer rate over nights."""
    reg = data["regrets"]
    rows = []
    for m in METHODS:
        row = [m]
        for b in MARKS:
            row.append(statistics.mean(v for per_seed in reg[m][b] for v in per_seed))
        rows.append(row)
    mine, base = reg["automl_transfer"][MARKS[-1]], reg["automl"][MARKS[-1]]
    nights = len(mine[0]) if mine else 0
    worse = sum(statistics.mean(s[k] for s in mine) > statistics.mean(s[k] for s in base) + 1e-9
                for k in range(nights))
    return rows, {"nights": nights, "worse": worse}
