"""7. The sweep's ETA. The digits search of ``search_spaces/resnet.yaml`` (40 trials;
quick: 4), its search stage alone (``automl.search.run_search``), once per seed (5;
quick: 1) on one local Ray instance in a fresh process. A sink records the ETA the sweep
shows (``SweepView.eta_s``, ``automl.search._eta``) at every trial event; the figure is
the ETA at the first event a third of the way through the sweep's wall time, against the
time that really remained. Goal: within 25% for every seed.

Run as ``python -m benchmarks --only eta``; the sweeps run in
``python -m benchmarks.eta sweeps`` (a fresh process, one Ray start for all).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks._common import Goal, Result, Table, run_python, tail

NAME = "eta"
TITLE = "Sweep ETA a third of the way through vs the real remaining time"
SEEDS = {True: [0], False: [0, 1, 2, 3, 4]}
TRIALS = {True: 4, False: 40}


class EtaLog:
    """A ``TrialSink`` keeping ``(elapsed_s, eta_s, done)`` of every event, and the Unix
    time of each (to find the same moment in ``trials.jsonl``)."""

    def __init__(self):
        self.points: list[tuple[float, float | None, int]] = []
        self.walls: list[float] = []

    def _add(self, sweep) -> None:
        self.points.append((sweep.elapsed_s, sweep.eta_s, sweep.done))
        self.walls.append(time.time())

    def start(self, trial, sweep) -> None:
        self._add(sweep)

    def log(self, trial, row, sweep) -> None:
        self._add(sweep)

    def finish(self, trial, sweep) -> None:
        self._add(sweep)

    def close(self, sweep) -> None:
        self._add(sweep)


def at_third(points: list[tuple[float, float | None, int]]) -> dict:
    """The ETA at the first event at or past a third of the sweep's wall time (the last
    event's elapsed) and the error against the time that really remained."""
    end = points[-1][0]
    for elapsed, eta, _ in points:
        if elapsed >= end / 3 and eta is not None:
            real = end - elapsed
            return {"wall_s": round(end, 2), "at_s": round(elapsed, 2), "eta_s": round(eta, 2),
                    "real_s": round(real, 2),
                    "error": round((eta - real) / real, 4) if real > 0 else None}
    return {"wall_s": round(end, 2), "at_s": None, "eta_s": None, "real_s": None,
            "error": None}


def eta_cold(run_dir: Path, exp, wall: float, elapsed: float) -> float | None:
    """The ETA the model gave before the overhead per trial was measured from the moment
    every slot held a trial (``warm=None``: the sweep's cold start charged to every trial
    to come), at the same moment of the same sweep, rebuilt from ``trials.jsonl``: the
    trials started, their epochs and ends, and the rung policy replayed on the reports
    up to Unix time ``wall`` (``elapsed``: the sweep's seconds at that moment).

    Returns:
        Seconds still to go, or None when no epoch was reported by then.

    Raises:
        OSError: ``run_dir`` has no readable ``trials.jsonl``.
    """
    from automl.search._eta import TrialState, sweep_eta
    from benchmarks.eta_replay import state_at

    policy, trials, rows, _ = state_at(run_dir, exp, wall)
    if not rows:
        return None
    return sweep_eta([TrialState(t["epoch"], t["target"], t["ended"], policy.bracket_of(n))
                      for n, t in trials.items()],
                     exp.search.num_samples, rungs=policy.rung_epochs(),
                     passed=policy.pass_counts(), reduction_factor=policy.reduction_factor,
                     epoch_s=sum(rows) / len(rows), elapsed_s=elapsed, slots=2,
                     epochs_done=len(rows), warm=None, brackets=policy.bracket_weights())


def sweeps(quick: bool, out: Path, keep: Path | None = None,
           seeds: list[int] | None = None) -> None:
    """In this process: one sweep per seed (``seeds``, default :data:`SEEDS`), the ETA
    series of each to ``out``; with ``keep``, each seed's run directory and its series
    with the Unix time of each event go to ``keep/seed<N>/`` (``run/``, ``points.json``),
    what :mod:`benchmarks.eta_replay` reads."""
    from rich.console import Console

    from automl import cluster
    from automl.search import run_search
    from automl.search._trainable import TrialData
    from benchmarks._orch_tools import load_arrays, make_experiment

    handle = cluster.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    figures = {}
    try:
        for seed in seeds or SEEDS[quick]:
            work = keep / f"seed{seed}" if keep else Path(tempfile.mkdtemp(
                prefix=f"bench-eta-{seed}-"))
            exp = make_experiment(TRIALS[quick], quick, str(work / "runs"), 2,
                                  {"search.seed": seed})
            (X_tr, y_tr), (X_val, y_val), shape, classes = load_arrays(exp)
            (work / "run").mkdir(parents=True)
            log = EtaLog()
            result = run_search(exp, TrialData(X_tr, y_tr, X_val, y_val, shape, classes),
                                work / "run", cluster.admit_trials(exp.resources),
                                Console(quiet=True), sinks=[log])
            third = at_third(log.points)
            if keep:
                (work / "points.json").write_text(json.dumps({"points": log.points,
                                                              "walls": log.walls}))
            fig = {**third, "trials": len(result.trials), "points": log.points}
            if third["at_s"] is not None:  # the old overhead measure, same moment, same sweep
                end = log.points[-1][0]
                i = next(i for i, (el, eta, _) in enumerate(log.points)
                         if el >= end / 3 and eta is not None)  # at_third's moment
                cold = eta_cold(work / "run", exp, log.walls[i], log.points[i][0])
                fig["eta_cold_s"] = None if cold is None else round(cold, 2)
                fig["error_cold"] = (None if cold is None or not third["real_s"] else
                                     round((cold - third["real_s"]) / third["real_s"], 4))
            figures[str(seed)] = fig
    finally:
        cluster.shutdown(handle)
    out.write_text(json.dumps(figures))


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE, settings={"trials": TRIALS[quick], "spec": "resnet.yaml",
                                        "slots": 2},
                 seeds={"search.seed": SEEDS[quick]})
    work = Path(tempfile.mkdtemp(prefix="bench-eta-"))
    out, log = work / "eta.json", work / "eta.log"
    code, wall = run_python(["-m", "benchmarks.eta", "sweeps", "--out", str(out)]
                            + (["--quick"] if quick else []), log, 900 if quick else 3600)
    if code != 0 or not out.exists():
        raise RuntimeError(f"the sweeps exited with {code}: {tail(log)}")
    figs = json.loads(out.read_text())
    rows, errors = [], []
    for seed, f in figs.items():
        rows.append([seed, f["trials"], f["wall_s"], f["at_s"], f["eta_s"], f["real_s"],
                     f["error"], f.get("eta_cold_s"), f.get("error_cold")])
        if f["error"] is not None:
            errors.append(f["error"])
    res.tables.append(Table("per seed", ["seed", "trials", "sweep wall (s)", "at (s)",
                                         "ETA (s)", "real remaining (s)", "error",
                                         "ETA, cold start charged per trial (s)",
                                         "its error"], rows))
    ok = bool(errors) and len(errors) == len(figs) and all(abs(e) <= 0.25 for e in errors)
    res.goals.append(Goal(
        f"ETA at 1/3 within 25% of the real remaining time, {len(figs)} seed(s)",
        ", ".join(f"{e:+.0%}" for e in errors) + (
            f" (median |error| {statistics.median(abs(e) for e in errors):.0%})"
            if errors else ""), None if quick else ok))
    res.data = {"per_seed": {s: {k: v for k, v in f.items() if k != "points"}
                             for s, f in figs.items()},
                "series": {s: f["points"] for s, f in figs.items()},
                "process_wall_s": round(wall, 2)}
    res.notes.append("ETA model: automl.search._eta (measured seconds per epoch, slot time "
                     "outside epochs per trial measured from the moment every slot held a "
                     "trial, each rung's measured continue rate with a 1/reduction_factor "
                     "prior worth 3 trials). The 'cold start charged per trial' columns are "
                     "the previous overhead measure (from the sweep's start), rebuilt from "
                     "trials.jsonl at the same moment of the same sweep "
                     "(benchmarks.eta.eta_cold).")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("sweeps",))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep each seed's run directory and series here (benchmarks.eta_replay)")
    ap.add_argument("--seeds", default=None, help="comma-separated search.seed values")
    args = ap.parse_args()
    sweeps(args.quick, args.out, args.keep,
           [int(x) for x in args.seeds.split(",")] if args.seeds else None)


if __name__ == "__main__":
    main()
