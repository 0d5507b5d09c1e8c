"""Two of our search variants head to head on seeds a default was not chosen on.

A default is chosen by its average rank on the search-quality suite's seeds 0-19
(``benchmarks/search_quality.py``), so its lead there is partly the luck of those seeds.
This re-runs two methods on fresh seeds (20-29 by default), every suite problem, sequential
and 4 workers, and counts paired wins at 10 and 30 full trainings (the best score seen at
full fidelity, as the suite's regret). Peers are not re-run: SMAC and BOHB would take most
of an hour here. Our cells do not depend on ``PYTHONHASHSEED`` (only SMAC3's do), so unlike
``python -m benchmarks`` this does not re-execute itself with it.

``python -m benchmarks.sq_fresh_seeds [--a automl] [--b automl[sampler=tpe]]
[--first 20] [--seeds 10] [--jobs 2]`` writes ``benchmarks/results/sq_fresh_seeds.{json,md}``;
its cells are cached in ``benchmarks/results/sq_fresh_seeds_cells/``.
"""

from __future__ import annotations

import argparse
import time
from multiprocessing import get_context

from benchmarks._common import RESULTS, Result, Table, machine, write

MARKS = (10, 30)


def _cell(args: tuple) -> dict:
    from benchmarks.search_quality import run_cell

    return run_cell(*args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sq_fresh_seeds")
    ap.add_argument("--a", default="automl", help="the method counted as winning")
    ap.add_argument("--b", default="automl[sampler=tpe]", help="the method it meets")
    ap.add_argument("--first", type=int, default=20, help="the first seed")
    ap.add_argument("--seeds", type=int, default=10, help="how many seeds")
    ap.add_argument("--jobs", type=int, default=2, help="cells run at once")
    args = ap.parse_args(argv)
    from benchmarks import _sqstats as st
    from benchmarks._problems import SUITE, load
    from benchmarks.search_quality import Cells

    started = time.time()
    seeds = range(args.first, args.first + args.seeds)
    cells = Cells(RESULTS / "sq_fresh_seeds_cells", 30)
    todo = [(p, m, s, w) for w in (1, 4) for s in seeds for p in SUITE for m in (args.a, args.b)
            if not cells.get(p, m, s, w)]
    with get_context("spawn").Pool(args.jobs) as pool:
        for cell in pool.imap_unordered(_cell, todo):
            cells.add(cell)
    res = Result("sq_fresh_seeds", f"Search quality on fresh seeds: {args.a} against {args.b}",
                 settings={"a": args.a, "b": args.b, "problems": list(SUITE),
                           "budget_full_trainings": 30, "marks": list(MARKS),
                           "cells_run_now": len(todo)},
                 seeds={"seeds": list(seeds), "paired": "seed s seeds both methods' RNGs"})
    for workers in (1, 4):
        rows, totals = [], {b: [0, 0] for b in MARKS}
        for p in SUITE:
            max_t, row = load(p).max_t, [p]
            for b in MARKS:
                best = {m: [st.best_at(cells.get(p, m, s, workers)["trace"], b * max_t)
                            for s in seeds] for m in (args.a, args.b)}
                neg = {m: [-(v if v is not None else float("-inf")) for v in vs]
                       for m, vs in best.items()}
                pr = st.paired(neg[args.a], neg[args.b])
                totals[b][0] += pr["wins"]
                totals[b][1] += pr["losses"]
                row.append(f"{pr['wins']}-{pr['losses']}-{pr['ties']}")
            rows.append(row)
        rows.append(["all", *(f"{won}-{lost}" for won, lost in totals.values())])
        res.tables.append(Table(
            f"{'sequential' if workers == 1 else f'{workers} asynchronous workers'}: "
            f"{args.a} against {args.b}, paired by seed (wins-losses-ties of {args.a})",
            ["problem", *(f"B={b}" for b in MARKS)], rows))
        res.data[f"w{workers}"] = {"rows": rows}
    res.notes.append("Ties: both found the same best score. The machine's load does not "
                     "change these figures: the clock is simulated.")
    write(res, RESULTS, quick=False, started=started, machine_info=machine())
    print(f"-> {RESULTS / 'sq_fresh_seeds.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
