"""7. The sweep's ETA and its 80% range, and the job budget that plans with its upper end.

Sweeps: the digits search of ``search_spaces/resnet.yaml`` (40 trials; quick: 4), its
search stage alone (``automl.search.run_search``), once per seed (0-19; quick: 0 and 1)
on one local Ray instance in a fresh process. A sink records the ETA the sweep shows
(``SweepView.eta``) at every trial event. Each sweep is kept, small files only, in
``<out>/eta_sweeps/seed<N>/`` (:func:`keep`): ``trials.jsonl``, ``points.json`` (the
series shown and the Unix time of each event), ``experiment.json`` (the resolved spec)
and ``study.db.gz``; any ETA model can be replayed on them (:mod:`benchmarks.eta_replay`).

Judging (:func:`judge`, from the kept sweeps alone): at the first event at or past 1/4,
1/3 and 1/2 of each sweep's wall time, the product's Monte Carlo is replayed on the sweep
as it stood (a ledger fed ``trials.jsonl`` up to that moment: the product's own
``automl.search._tuner.eta_of``, raw), against the time that really remained. The
calibration is fitted on seeds 0-9 (quick: 0) and judged on the others. Goals: the 80%
range covers the real remaining time in at least 75% of the 60 (seed, moment) pairs and
of the 30 held-out ones; its median width is at most 1x the real remaining time; the
point's median error is at most 15%.

``budget_s`` runs: ``automl search search_spaces/resnet.yaml`` as a user runs it with
``budget_s: 60`` (tight enough that the sweep is ended early), seeds 0-9 (quick: 0, 4
trials). Goal: the job ends within its budget (``summary.json``'s ``budget.within``) in
10 of 10.

Run as ``python -m benchmarks --only eta``; the sweeps run in ``python -m benchmarks.eta
sweeps`` (a fresh process, one Ray start for all); ``python -m benchmarks.eta judge
[--kept DIR]`` re-judges kept sweeps with the current code, no new sweep.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO, RESULTS, SPEC, Goal, Result, Table, run_python, tail

NAME = "eta"
TITLE = "Sweep ETA: its 80% range and point at 1/4, 1/3 and 1/2 of the sweep; budget_s"
SEEDS = {True: [0, 1], False: list(range(20))}
#: the seeds the calibration is fitted on; the others judge it
FIT = {True: [0], False: list(range(10))}
TRIALS = {True: 4, False: 40}
SLOTS = 2
FRACTIONS = (1 / 4, 1 / 3, 1 / 2)
KEPT = "eta_sweeps"
BUDGET_SEEDS = {True: [0], False: list(range(10))}
#: the job's budget, seconds: the sweep as specified takes about 37 s of a 59 s job
#: (benchmarks/results/job.md), so the later stages' upper end (about 40 s) ends it early
BUDGET_S = 60.0


class EtaLog:
    """A ``TrialSink`` keeping ``[elapsed_s, eta_s, done, low_s, high_s]`` of every event,
    and the Unix time of each (to find the same moment in ``trials.jsonl``)."""

    def __init__(self):
        self.points: list[list] = []
        self.walls: list[float] = []

    def _add(self, sweep) -> None:
        e = sweep.eta
        self.points.append([round(sweep.elapsed_s, 4), None if e is None else round(e.s, 4),
                            sweep.done, None if e is None else round(e.low, 4),
                            None if e is None else round(e.high, 4)])
        self.walls.append(time.time())  # full precision: the replay compares it with trials.jsonl

    def start(self, trial, sweep) -> None:
        self._add(sweep)

    def log(self, trial, row, sweep) -> None:
        self._add(sweep)

    def finish(self, trial, sweep) -> None:
        self._add(sweep)

    def close(self, sweep) -> None:
        self._add(sweep)


def keep(run: Path, dst: Path, exp, log: EtaLog) -> None:
    """What a replay needs of one sweep, small files only: ``trials.jsonl``,
    ``points.json``, ``experiment.json``, ``study.db.gz`` (the ``sampler`` model of
    :mod:`benchmarks.eta_replay` reads the study)."""
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(run / "trials.jsonl", dst / "trials.jsonl")
    (dst / "points.json").write_text(json.dumps({"points": log.points, "walls": log.walls}))
    (dst / "experiment.json").write_text(json.dumps(exp.model_dump(mode="json")))
    if (run / "study.db").exists():
        with open(run / "study.db", "rb") as f, gzip.open(dst / "study.db.gz", "wb") as g:
            shutil.copyfileobj(f, g)


def sweeps(quick: bool, keep_dir: Path, seeds: list[int] | None = None) -> None:
    """In this process: one sweep per seed (``seeds``, default :data:`SEEDS`), each kept in
    ``keep_dir/seed<N>/`` (:func:`keep`); the run directories are removed."""
    from rich.console import Console

    from automl import cluster
    from automl.search import run_search
    from automl.search._trainable import TrialData
    from benchmarks._orch_tools import load_arrays, make_experiment

    handle = cluster.connect(num_cpus=2, object_store_mb=200, dashboard_port=0)
    try:
        for seed in seeds or SEEDS[quick]:
            work = Path(tempfile.mkdtemp(prefix=f"bench-eta-{seed}-"))
            exp = make_experiment(TRIALS[quick], quick, str(work / "runs"), SLOTS,
                                  {"search.seed": seed})
            (X_tr, y_tr), (X_val, y_val), shape, classes = load_arrays(exp)
            (work / "run").mkdir(parents=True)
            log = EtaLog()
            run_search(exp, TrialData(X_tr, y_tr, X_val, y_val, shape, classes),
                       work / "run", cluster.admit_trials(exp.resources),
                       Console(quiet=True), sinks=[log])
            keep(work / "run", keep_dir / f"seed{seed}", exp, log)
            shutil.rmtree(work, ignore_errors=True)
    finally:
        cluster.shutdown(handle)


def kept_seeds(root: Path) -> list[int]:
    return sorted(int(d.name[4:]) for d in root.glob("seed*") if (d / "points.json").exists())


def moments(root: Path, seed: int) -> list[dict]:
    """The moments judged in one kept sweep: at the first event at or past each of
    :data:`FRACTIONS` of its wall time with an ETA shown; the ETA the sweep showed then
    and the product's raw Monte Carlo replayed on the sweep as it stood (:func:`raw_at`),
    against the seconds that really remained."""
    from automl.spec import Experiment
    from benchmarks.eta_replay import estimate, state_at

    d = root / f"seed{seed}"
    kept = json.loads((d / "points.json").read_text())
    points, walls = kept["points"], kept["walls"]
    exp = Experiment.model_validate(json.loads((d / "experiment.json").read_text()))
    t0, end = walls[0] - points[0][0], points[-1][0]
    out = []
    for f in FRACTIONS:
        i = next(i for i, p in enumerate(points) if p[0] >= end * f and p[1] is not None)
        real = end - points[i][0]
        if real <= 0:  # no ETA before the sweep's end (a tiny sweep)
            continue
        q = raw_at(d, exp, t0, walls[i])
        analytic = estimate("current", state_at(d, exp, walls[i]), exp, t0, walls[i],
                            exp.search.num_samples, SLOTS)
        out.append({"seed": seed, "fraction": round(f, 4), "at_s": round(points[i][0], 2),
                    "wall_s": round(end, 2), "real_s": round(real, 3),
                    "q_lo": q[0], "q_mid": q[1], "q_hi": q[2], "analytic_s": analytic,
                    "shown": points[i][1:2] + points[i][3:5]})
    return out


def raw_at(d: Path, exp, t0: float, wall: float) -> tuple[float, float, float]:
    """The product's raw ``(q_lo, q_mid, q_hi)`` at Unix time ``wall`` of the kept sweep
    ``d`` (started at Unix ``t0``): a ledger (its clock set to each event's time) and the
    rung policy fed ``trials.jsonl`` up to then, asked by
    ``automl.search._tuner.eta_of(..., raw=True)``, as the sweep asked it."""
    from automl.search import Objectives, make_policy
    from automl.search._adapters import judge
    from automl.search._ledger import Ledger
    from automl.search._tuner import epochs_of, eta_of

    policy, objectives = make_policy(exp), Objectives.of(exp.search)
    now = [0.0]
    with tempfile.TemporaryDirectory() as tmp:
        led = Ledger(Path(tmp), exp.search.metric, exp.search.mode, exp.search.num_samples,
                     epochs_of(exp), clock=lambda: now[0])
        for line in (d / "trials.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["time"] > wall:
                break
            now[0] = r["time"] - t0
            n, event = int(r["trial_id"]), r.get("event")
            if event == "start":
                led.start(n, r.get("config") or {})
            elif event == "end":
                led.end(n, state=r["state"])
            elif "epoch" in r:
                if policy is not None:
                    judge(policy, objectives, n, r)
                led.report(n, r)
        now[0] = wall - t0
        q = eta_of(policy, SLOTS, exp.search.time_budget_s, raw=True)(led)
        led.close()
    return q


def score(rows: list[dict], cal) -> list[dict]:
    """Each moment with the ETA ``cal`` makes of it: covered, width and error over the
    real remaining time."""
    from automl.search._eta import calibrate

    out = []
    for r in rows:
        e = calibrate((r["q_lo"], r["q_mid"], r["q_hi"]), cal)
        y = r["real_s"]
        out.append({**r, "eta_s": round(e.s, 2), "low_s": round(e.low, 2),
                    "high_s": round(e.high, 2), "covered": e.low <= y <= e.high,
                    "width": round((e.high - e.low) / y, 3), "error": round((e.s - y) / y, 4),
                    "analytic_error": None if r["analytic_s"] is None
                    else round((r["analytic_s"] - y) / y, 4)})
    return out


def stats(scored: list[dict]) -> dict:
    if not scored:
        return {"n": 0}
    covered = sum(r["covered"] for r in scored)
    analytic = [abs(r["analytic_error"]) for r in scored if r["analytic_error"] is not None]
    return {"n": len(scored), "covered": covered, "coverage": round(covered / len(scored), 3),
            "median_width": round(statistics.median(r["width"] for r in scored), 3),
            "median_abs_error": round(statistics.median(abs(r["error"]) for r in scored), 4),
            "analytic_median_abs_error": round(statistics.median(analytic), 4)
            if analytic else None}


def judge(root: Path, fit_seeds: list[int]) -> dict:
    """Replay every kept sweep under ``root`` (``scores.json`` there: the raw figures per
    moment, what the calibration is fitted on), fit the calibration on ``fit_seeds`` and
    judge it on the others; also the constants in code
    (``automl.search._eta.CALIBRATION``) on every moment."""
    from automl.search._eta import CALIBRATION, fit_calibration

    rows = [m for s in kept_seeds(root) for m in moments(root, s)]
    (root / "scores.json").write_text(json.dumps(rows, indent=1))
    fitted = fit_calibration([(r["q_lo"], r["q_mid"], r["q_hi"], r["real_s"])
                              for r in rows if r["seed"] in fit_seeds])
    scored = score(rows, fitted)
    held = [r for r in scored if r["seed"] not in fit_seeds]
    return {"calibration": fitted, "in_code": CALIBRATION, "scored": scored,
            "all": stats(scored), "held_out": stats(held),
            "fit": stats([r for r in scored if r["seed"] in fit_seeds]),
            "in_code_all": stats(score(rows, CALIBRATION)), "fit_seeds": fit_seeds}


def fidelity(scored: list[dict]) -> float | None:
    """The largest relative gap between the ETA the sweep showed and the replay's
    (both with the constants in code when the sweep ran: equal when they were the same)."""
    from automl.search._eta import CALIBRATION, calibrate

    gaps = [abs(calibrate((r["q_lo"], r["q_mid"], r["q_hi"]), CALIBRATION).s - r["shown"][0])
            / r["shown"][0] for r in scored if r["shown"][0]]
    return round(max(gaps), 4) if gaps else None


def budget_run(work: Path, seed: int, quick: bool) -> dict:
    """``automl search`` as a user runs it (a fresh process) with ``budget_s``
    :data:`BUDGET_S` and ``search.seed`` ``seed``; its budget record."""
    import yaml

    doc = yaml.safe_load(SPEC.read_text())
    doc.setdefault("registry", {})["dir"] = str(work / "registry")  # not the user's
    doc["budget_s"] = BUDGET_S
    doc.setdefault("search", {})["seed"] = seed
    label = f"budget_seed{seed}"
    spec = work / f"{label}.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    log = work / f"{label}.log"
    code, wall = run_python(["-m", "automl", "search", str(spec), "--output", str(work / "runs"),
                             "--name", label, "--dashboard-port", "0",
                             *(["--num-samples", str(TRIALS[True])] if quick else [])],
                            log, 1800)
    if code != 0:
        raise RuntimeError(f"{label}: automl search exited with {code}: {tail(log)}")
    s = json.loads((work / "runs" / label / "summary.json").read_text())
    b = s.get("budget") or {}
    return {"seed": seed, "budget_s": b.get("budget_s"), "wall_time_s": b.get("wall_time_s"),
            "within": b.get("within"), "search_stopped_at_s": b.get("search_stopped_at_s"),
            "trials": s["trials"], "search_stop": b.get("search_stop"),
            "trials_cost_by_upper_end": b.get("trials_cost_by_upper_end"),
            "process_wall_s": round(wall, 1), "shrunk": b.get("shrunk")}


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE, settings={"trials": TRIALS[quick], "spec": "resnet.yaml",
                                        "slots": SLOTS, "fractions": "1/4, 1/3, 1/2",
                                        "fit_seeds": FIT[quick], "budget_s": BUDGET_S},
                 seeds={"search.seed": SEEDS[quick], "budget runs": BUDGET_SEEDS[quick]})
    root = Path(ctx.get("out") or RESULTS) / KEPT
    shutil.rmtree(root, ignore_errors=True)  # a fresh record
    work = Path(tempfile.mkdtemp(prefix="bench-eta-"))
    log = work / "eta.log"
    code, wall = run_python(["-m", "benchmarks.eta", "sweeps", "--keep", str(root)]
                            + (["--quick"] if quick else []), log, 900 if quick else 3600)
    if code != 0 or not kept_seeds(root):
        raise RuntimeError(f"the sweeps exited with {code}: {tail(log)}")
    j = judge(root, FIT[quick])
    res.tables.append(Table("per seed and moment (calibration fitted on the fit seeds)", [
        "seed", "set", "at", "sweep wall (s)", "real remaining (s)", "ETA (s)", "low (s)",
        "high (s)", "covered", "width / real", "error", "analytic point's error"],
        [[r["seed"], "fit" if r["seed"] in FIT[quick] else "judge",
          f"{r['fraction']:.2f}", r["wall_s"], r["real_s"], r["eta_s"], r["low_s"],
          r["high_s"], "yes" if r["covered"] else "no", r["width"], r["error"],
          r["analytic_error"]] for r in j["scored"]]))
    res.tables.append(Table("summary", [
        "moments", "n", "covered", "coverage", "median width / real", "median |error|",
        "analytic point's median |error|"],
        [[name, s["n"], s.get("covered"), s.get("coverage"), s.get("median_width"),
          s.get("median_abs_error"), s.get("analytic_median_abs_error")]
         for name, s in (("all, fitted calibration", j["all"]),
                         ("held out (judge seeds)", j["held_out"]),
                         ("fit seeds", j["fit"]),
                         ("all, the constants in code", j["in_code_all"]))]))
    cal, code_cal = j["calibration"], j["in_code"]
    same = (cal.shift, cal.widen, cal.n) == (code_cal.shift, code_cal.widen, code_cal.n)
    res.tables.append(Table("calibration", ["", "shift", "widen (Q)", "n"],
                            [["fitted on the fit seeds", cal.shift, cal.widen, cal.n],
                             ["in code (automl.search._eta.CALIBRATION)", code_cal.shift,
                              code_cal.widen, code_cal.n]]))
    runs = [budget_run(work, s, quick) for s in BUDGET_SEEDS[quick]]
    res.tables.append(Table(f"budget_s {BUDGET_S:.0f} runs", [
        "seed", "job wall (s)", "within", "search stopped at (s)", "trials done",
        "trials the upper end cost", "the budget's line"],
        [[r["seed"], r["wall_time_s"], r["within"], r["search_stopped_at_s"],
          r["trials"]["total"] - r["trials"].get("failed", 0), r["trials_cost_by_upper_end"],
          r["search_stop"] or "-"] for r in runs]))
    a, h = j["all"], j["held_out"]
    goal = None if quick else True
    res.goals.append(Goal(f"80% range covers the real remaining time in >= 75% of the "
                          f"{a['n']} (seed, moment) pairs",
                          f"{a['covered']}/{a['n']} ({a['coverage']:.0%})",
                          goal and a["coverage"] >= 0.75))
    res.goals.append(Goal(f"... and of the {h['n']} held-out pairs (calibration fitted on "
                          f"seeds {FIT[quick][0]}-{FIT[quick][-1]})",
                          f"{h.get('covered')}/{h['n']} ({h.get('coverage', 0):.0%})",
                          goal and h.get("coverage", 0) >= 0.75))
    res.goals.append(Goal("median width of the range <= 1x the real remaining time",
                          f"{a['median_width']:.2f}x (held out {h.get('median_width')}x)",
                          goal and a["median_width"] <= 1.0))
    res.goals.append(Goal("point estimate's median |error| <= 15%",
                          f"{a['median_abs_error']:.0%} (held out "
                          f"{h.get('median_abs_error', 0):.0%}; the analytic point "
                          f"{a['analytic_median_abs_error']:.0%})",
                          goal and a["median_abs_error"] <= 0.15))
    within = sum(bool(r["within"]) for r in runs)
    res.goals.append(Goal(f"budget_s {BUDGET_S:.0f}: the job ends within it in every seed",
                          f"{within}/{len(runs)} (job wall "
                          + ", ".join(f"{r['wall_time_s']:.0f}" for r in runs) + " s)",
                          goal and within == len(runs)))
    res.notes.append(
        "ETA: automl.search._eta: a Monte Carlo of the model's own uncertainty (each rung's "
        "continue rate from its Beta posterior, running trials at their own seconds per "
        "epoch, the trials to come spread over SETTLE of the trials seen, on the slots "
        "that free first), its 10/50/90% quantiles calibrated by conformalized quantile "
        "regression (Romano et al. 2019). The analytic point is sweep_eta, the model's "
        "expectation (the ETA shown before this issue).")
    res.notes.append(
        f"The sweeps are kept in {root.relative_to(REPO) if root.is_relative_to(REPO) else root}"
        " (trials.jsonl, points.json, experiment.json, study.db.gz per seed); scores.json there "
        "holds the raw figures per moment. Re-judge them with the current code: "
        "python -m benchmarks.eta judge --kept " + str(root.relative_to(REPO)
                                                       if root.is_relative_to(REPO) else root))
    gap = fidelity(j["scored"])
    res.notes.append(f"The replay against the ETA the sweeps showed (both with the constants "
                     f"in code): largest relative gap {gap} (the ledger's clock against the "
                     "Unix times in trials.jsonl)")
    if not same:
        res.notes.append(f"The constants in code differ from the fitted ones: set CALIBRATION "
                         f"= Calibration(shift={cal.shift}, widen={cal.widen}, n={cal.n}) in "
                         "automl/search/_eta.py")
    res.data = {"scored": j["scored"], "calibration": vars(cal), "in_code": vars(code_cal),
                "stats": {k: j[k] for k in ("all", "held_out", "fit", "in_code_all")},
                "budget_runs": runs, "kept": str(root), "sweeps_process_wall_s": round(wall, 1)}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("sweeps", "judge"))
    ap.add_argument("--keep", type=Path, default=None,
                    help="sweeps: where each seed's sweep is kept (default "
                         f"benchmarks/results/{KEPT})")
    ap.add_argument("--kept", type=Path, default=RESULTS / KEPT,
                    help="judge: the kept sweeps (default benchmarks/results/%(default)s)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", default=None, help="sweeps: comma-separated search.seed values")
    ap.add_argument("--fit-seeds", default=None,
                    help="judge: comma-separated seeds to fit on (default 0-9)")
    args = ap.parse_args()
    if args.what == "sweeps":
        sweeps(args.quick, args.keep or RESULTS / KEPT,
               [int(x) for x in args.seeds.split(",")] if args.seeds else None)
        return
    fit = [int(x) for x in args.fit_seeds.split(",")] if args.fit_seeds else FIT[False]
    j = judge(args.kept, fit)
    cal = j["calibration"]
    print(f"fitted on seeds {fit}: Calibration(shift={cal.shift}, widen={cal.widen}, "
          f"n={cal.n}); in code: {j['in_code']}")
    for name in ("all", "held_out", "fit", "in_code_all"):
        print(f"{name:12s} {j[name]}")


if __name__ == "__main__":
    main()
