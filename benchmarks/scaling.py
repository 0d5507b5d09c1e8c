"""4. Scaling on 2 cores.

* Trials per minute of the project's digits search (``search_spaces/resnet.yaml``, same
  trials and seeds) with 1 vs 2 concurrent trial slots of 1 CPU each. Epochs per minute
  is shown too: ASHA stops different trials when the sampler sees results in a different
  order, so the work per trial differs a little between the two runs.
* Data-parallel trials (``resources.workers_per_trial``): the same fixed model and
  epochs, one trial at a time, with 1 worker (in-process trial, 1 CPU) and 2 Ray Train
  workers (DDP over gloo, 0.5 logical CPU each, as ``search_spaces/resnet_ddp.yaml`` runs
  on 2 cores). Epoch time = median gap between a trial's consecutive epoch reports
  (``trials.jsonl``: training, evaluation and reporting); start-up per trial = gap from
  one trial's last report to the next one's first, minus one epoch time.
"""

from __future__ import annotations

import itertools
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks._common import Goal, Result, Table
from benchmarks.orchestration import run_tool

NAME = "scaling"
TITLE = "Scaling: trial slots and data-parallel workers on 2 cores"
#: after the sweep: the smallest cross-validation, no compression (they are not measured)
SMALL_CV = {"selection.top_k": 1, "selection.cv_folds": 2, "compression.enabled": False}
FIXED = {"model.resnet.depth": 1, "model.resnet.width": 16, "model.resnet.stages": 2,
         "training.batch_size": 64, "training.epochs": 4, "scheduler.type": "none",
         "scheduler.max_epochs": 4, "scheduler.grace_period": 1, **SMALL_CV}


def report_timing(run_dir: Path) -> dict:
    """Epoch time and per-trial start-up from ``trials.jsonl`` of a one-at-a-time sweep."""
    rows = [json.loads(x) for x in (run_dir / "trials.jsonl").read_text().splitlines() if x]
    by_trial: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["time"]):
        by_trial.setdefault(r["trial_id"], []).append(r)
    trials = sorted(by_trial.values(), key=lambda rs: rs[0]["time"])
    gaps = [b["time"] - a["time"] for rs in trials for a, b in itertools.pairwise(rs)]
    epoch = statistics.median(gaps) if gaps else float("nan")
    starts = [b[0]["time"] - a[-1]["time"] - epoch for a, b in itertools.pairwise(trials)]
    return {"trials": len(trials), "epoch_wall_s": round(epoch, 4),
            "epoch_train_s": round(statistics.median(r["train_time_s"] for r in rows), 4),
            "startup_per_trial_s": round(statistics.median(starts), 3) if starts else None,
            "startups_s": [round(s, 3) for s in starts]}


def _ddp_landed() -> bool:
    from automl.spec import ResourcesSpec

    return "workers_per_trial" in ResourcesSpec.model_fields


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE)
    work = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    trials = 4 if quick else 10
    timeout = 900 if quick else 2400
    slots, rows = {}, []
    for c in (1, 2):
        try:
            slots[c] = r = run_tool("automl", trials, quick, work, timeout, concurrency=c,
                                    overrides=SMALL_CV, tag=f"_slots{c}")
        except RuntimeError as e:  # recorded; the other figures stand
            res.notes.append(f"{c} slot(s) failed: {e}")
            continue
        rows.append([c, r["n_trials"], r["epochs"], r["sweep_wall_s"],
                     round(60 * r["n_trials"] / r["sweep_wall_s"], 2),
                     round(60 * r["epochs"] / r["sweep_wall_s"], 1), r["efficiency"],
                     r["best_val_accuracy"]])
    res.tables.append(Table(f"Trial slots, {trials} trials of search_spaces/resnet.yaml",
                            ["slots", "trials", "epochs", "sweep wall s", "trials per minute",
                             "epochs per minute", "efficiency", "best val accuracy"], rows))
    if len(rows) == 2:
        speed = rows[1][4] / rows[0][4]
        res.goals.append(Goal("trials per minute, 2 slots vs 1, >= 1.8x",
                              f"{speed:.2f}x (epochs per minute {rows[1][5] / rows[0][5]:.2f}x)",
                              speed >= 1.8))
    res.settings = {"slots_trials": trials, "cpus_per_trial": 1, "cv": SMALL_CV,
                    "ddp_fixed": FIXED, "work_dir": str(work)}
    res.seeds = {"sampler": 0, "training": 0, "data split": 0}
    res.data["slots"] = slots
    if not _ddp_landed():
        res.notes.append("Data-parallel trials: not landed (no resources.workers_per_trial "
                         "in automl.spec); no figures.")
        return res
    ddp_rows, ddp = [], {}
    n = 3
    for workers, cpus in ((1, 1.0), (2, 0.5)):
        over = {**FIXED, "resources.workers_per_trial": workers,
                "resources.cpus_per_worker": cpus}
        try:
            r = run_tool("automl", n, quick, work, timeout, concurrency=1, overrides=over,
                         tag=f"_workers{workers}")
        except RuntimeError as e:
            res.notes.append(f"{workers} worker(s) per trial failed: {e}")
            continue
        t = report_timing(Path(r["run_dir"]))
        ddp[workers] = {**t, "sweep_wall_s": r["sweep_wall_s"], "run": r}
        ddp_rows.append([workers, cpus, t["trials"], t["epoch_wall_s"], t["epoch_train_s"],
                         t["startup_per_trial_s"], r["sweep_wall_s"], r["best_val_accuracy"]])
    res.tables.append(Table(
        f"Workers per trial, {n} trials of a fixed ResNet (width 16, 2 stages, batch 64, "
        "4 epochs), one at a time",
        ["workers", "CPUs per worker", "trials", "epoch time s", "training step s per epoch",
         "start-up per trial s", "sweep wall s", "best val accuracy"], ddp_rows))
    if 1 in ddp and 2 in ddp:
        res.notes.append(
            f"2 workers vs 1: epoch time {ddp[2]['epoch_wall_s'] / ddp[1]['epoch_wall_s']:.2f}x,"
            f" start-up per trial {ddp[2]['startup_per_trial_s']:.1f} s vs "
            f"{ddp[1]['startup_per_trial_s']:.1f} s. Each worker trains with 1 torch thread, "
            "so 2 workers use both cores where 1 worker uses one; each rank trains on half "
            "of every batch and gradients are all-reduced over gloo every step.")
    res.data["workers"] = ddp
    return res
