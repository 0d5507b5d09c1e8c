"""8. The whole job, stage by stage: ``automl search search_spaces/resnet.yaml`` as a
user runs it (a fresh process, local Ray, W&B offline, registry), once as the spec says
once with ``budget_s: 240`` and once with a budget tight enough to bind, ``budget_s: 90``
(quick: 4 trials, 120 s and 60 s). Reported: the
wall time of each stage (``summary.json``'s ``stages_wall_s``), the whole job against
its sweep, the budget record, the CV winner and its test accuracy.

Goals: the whole job within 1.6x its sweep wall; with ``budget_s: 240``, within 240 s
plus 10%.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO, SPEC, Goal, Result, Table, run_python, tail

NAME = "job"
TITLE = "The whole job: stage times, and the job budget"
BUDGET = {True: 120.0, False: 240.0}
#: a budget tight enough that the sweep must end early and the later stages shrink
TIGHT = {True: 60.0, False: 90.0}


def _run(work: Path, label: str, quick: bool, budget: float | None) -> dict:
    import yaml

    extra = ["--num-samples", "4"] if quick else []
    doc = yaml.safe_load(SPEC.read_text())
    doc.setdefault("registry", {})["dir"] = str(work / "registry")  # not the user's
    if budget is not None:
        doc["budget_s"] = budget
    spec = work / f"{label}.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    log = work / f"{label}.log"
    code, wall = run_python(["-m", "automl", "search", str(spec), "--output",
                             str(work / "runs"), "--name", label, "--dashboard-port", "0",
                             *extra], log, 1800)
    if code != 0:
        raise RuntimeError(f"{label}: automl search exited with {code}: {tail(log)}")
    s = json.loads((work / "runs" / label / "summary.json").read_text())
    w = s["stages_wall_s"]
    return {"label": label, "process_wall_s": round(wall, 1), "job_wall_s": s["wall_time_s"],
            "stages_wall_s": w, "sweep_wall_s": s["search"]["wall_time_s"],
            "trials": s["trials"], "budget": s.get("budget"),
            "cv": (s.get("winner") or {}).get("cv", {}).get("accuracy"),
            "test_accuracy": s["test"]["accuracy"], "winner": s["winner"]["trial_id"],
            "cv_fold_trainings": (s.get("cv") or {}).get("compute", {}).get("fold_trainings"),
            "log_tail": tail(log, 3)}


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE, settings={"spec": str(SPEC.relative_to(REPO)),
                                        "budget_s": BUDGET[quick],
                                        "trials": 4 if quick else "spec (40)"})
    work = Path(tempfile.mkdtemp(prefix="bench-job-"))
    runs = [_run(work, "as_specified", quick, None), _run(work, "budget", quick, BUDGET[quick]),
            _run(work, "tight_budget", quick, TIGHT[quick])]
    rows = []
    for r in runs:
        w = r["stages_wall_s"]
        rows.append([r["label"], r["trials"]["total"], w.get("search"), w.get("cv"),
                     w.get("refit"), w.get("compression"), w.get("publish"), r["job_wall_s"],
                     round(r["job_wall_s"] / r["sweep_wall_s"], 2) if r["sweep_wall_s"] else None,
                     r["cv_fold_trainings"], (r["cv"] or {}).get("mean"), r["test_accuracy"]])
    res.tables.append(Table("stage wall times (s)", [
        "run", "trials", "search", "cv", "refit", "compression", "publish", "whole job",
        "job / sweep", "CV fold trainings", "CV accuracy", "test accuracy"], rows))
    plain, budget, tight = runs
    ratio = plain["job_wall_s"] / plain["sweep_wall_s"]
    res.goals.append(Goal("whole job <= 1.6x its sweep wall", f"{ratio:.2f}x "
                          f"({plain['job_wall_s']:.0f} s vs {plain['sweep_wall_s']:.0f} s)",
                          None if quick else ratio <= 1.6))
    limit = BUDGET[quick] * 1.1
    res.goals.append(Goal(f"budget_s {BUDGET[quick]:.0f}: whole job within it + 10%",
                          f"{budget['job_wall_s']:.0f} s", budget["job_wall_s"] <= limit))
    res.goals.append(Goal(f"budget_s {TIGHT[quick]:.0f} (tight): whole job within it + 10%",
                          f"{tight['job_wall_s']:.0f} s", tight["job_wall_s"] <= TIGHT[quick] * 1.1))
    for r in (budget, tight):
        b = r["budget"] or {}
        res.notes.append(f"{r['label']} run (budget_s {b.get('budget_s')}): search stopped at "
                         f"{b.get('search_stopped_at_s')} s; estimates of the later stages "
                         f"{b.get('estimates_s')}; shrunk: {b.get('shrunk') or 'nothing'}")
    res.data = {"runs": runs, "finished_at": time.time()}
    return res
