"""The whole job against an earlier commit, in alternating pairs on one machine.

``python -m benchmarks.job_pair --base REV [--pairs 4]`` checks ``REV`` out into a
temporary git worktree and runs ``automl search search_spaces/resnet.yaml`` (each
checkout's own spec, W&B offline, a registry of its own) from it and from this checkout,
``--pairs`` times each, alternating which goes first. Both use this checkout's venv.
Reported per run and as medians: the sweep's wall (Tune's ``fit``), the job's wall
(``summary.json``), the job after the sweep (cross-validation, refit, compression,
publishing, Ray's start and stop), the job / sweep ratio, and the load average. The
sweep itself is asynchronous (2 trials at a time), so its length varies from run to run
by +-15%; the job after the sweep is the figure a change to the later stages moves.

Writes ``benchmarks/results/job_pair.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO, RESULTS, Goal, Result, Table, machine, write

KEYS = ("job_s", "sweep_s", "after_sweep_s", "ratio", "cv", "refit", "compression",
        "process_s")


def _one(tree: Path, label: str, work: Path) -> dict:
    import yaml

    doc = yaml.safe_load((tree / "search_spaces" / "resnet.yaml").read_text())
    doc.setdefault("registry", {})["dir"] = str(work / "registry")
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(tree), "RAY_USAGE_STATS_ENABLED": "0",
           "WANDB_MODE": "offline"}
    env.pop("RAY_ADDRESS", None)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(work / "log", "w") as log:
        code = subprocess.call([sys.executable, "-m", "automl", "search", str(spec),
                                "--output", str(work / "runs"), "--name", "r",
                                "--dashboard-port", "0"], cwd=tree, env=env, stdout=log,
                               stderr=subprocess.STDOUT, timeout=1800)
    wall = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{label}: automl search exited with {code}; see {work / 'log'}")
    s = json.loads((work / "runs" / "r" / "summary.json").read_text())
    sweep = s["search"]["wall_time_s"]
    rungs = s["search"].get("rungs") or {}
    return {"label": label, "process_s": round(wall, 1), "job_s": s["wall_time_s"],
            "sweep_s": sweep, "after_sweep_s": round(s["wall_time_s"] - sweep, 2),
            "ratio": round(s["wall_time_s"] / sweep, 3), **s["stages_wall_s"],
            "load_start": round(load, 2), "trials": s["trials"],
            "best_val": (s.get("best") or {}).get("val", {}).get("val_accuracy"),
            "test_accuracy": (s.get("test") or {}).get("accuracy"),
            "start_epoch": rungs.get("start_epoch"), "narrowed": rungs.get("narrowed")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.job_pair")
    ap.add_argument("--base", required=True, help="the earlier commit to pair against")
    ap.add_argument("--pairs", type=int, default=4)
    args = ap.parse_args(argv)
    started, info = time.time(), machine()
    base = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, check=True,
                          capture_output=True, text=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="job-pair-"))
    old = tmp / "base"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), base], cwd=REPO,
                   check=True)
    trees = {f"base {base}": old, f"this checkout ({head}+)": REPO}
    rows: list[dict] = []
    try:
        for i in range(args.pairs):
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]
            for label in order:
                work = Path(tempfile.mkdtemp(prefix="run-", dir=tmp))
                rows.append({"pair": i + 1, **_one(trees[label], label, work)})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO)
    med = {label: {k: statistics.median(r[k] for r in rows if r["label"] == label)
                   for k in KEYS} for label in trees}
    (b, n) = (med[label] for label in trees)
    res = Result("job_pair", "The whole job against an earlier commit (alternating pairs)",
                 settings={"base": base, "head": head, "pairs": args.pairs,
                           "spec": "search_spaces/resnet.yaml (each checkout's own)"})
    res.tables.append(Table("every run", ["pair", "checkout", "sweep s", "job s",
                                          "after the sweep s", "job / sweep", "cv s",
                                          "refit s", "compression s", "load at start"],
                            [[r["pair"], r["label"], r["sweep_s"], r["job_s"],
                              r["after_sweep_s"], r["ratio"], r["cv"], r["refit"],
                              r["compression"], r["load_start"]] for r in rows]))
    res.tables.append(Table("what each sweep found", [
        "pair", "checkout", "best val accuracy", "test accuracy", "trials completed",
        "stopped early", "brackets start at epoch", "one bracket"],
        [[r["pair"], r["label"], r["best_val"], r["test_accuracy"],
          r["trials"].get("completed"), r["trials"].get("stopped_early"), r["start_epoch"],
          r.get("narrowed")]
         for r in rows]))
    res.tables.append(Table("medians", ["checkout", *KEYS],
                            [[label, *(med[label][k] for k in KEYS)] for label in trees]))
    res.goals.append(Goal("whole job <= 1.6x its sweep wall (median of the runs)",
                          f"{n['ratio']:.2f}x (base {b['ratio']:.2f}x); after the sweep "
                          f"{n['after_sweep_s']:.1f} s against {b['after_sweep_s']:.1f} s "
                          f"({n['after_sweep_s'] / b['after_sweep_s']:.2f}x)",
                          n["ratio"] <= 1.6))
    res.notes.append("Both checkouts run with this checkout's venv and the same machine, in "
                     "alternating order; nothing else should run meanwhile (load averages "
                     "per run above).")
    res.data = {"rows": rows, "medians": med}
    write(res, RESULTS, quick=False, started=started, machine_info=info)
    print(json.dumps(med, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
