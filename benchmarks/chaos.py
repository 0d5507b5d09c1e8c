"""Chaos: the main job's driver SIGKILLed (its whole process group) again and again,
resumed from its run directory after each kill, as a user would (``automl search SPEC
--resume``). The benchmark only kills and resumes; it never cleans up after the product.

Run 1: ``search_spaces/resnet.yaml`` with 12 trials (quick: 4), tracking on (W&B
offline, TensorBoard). The driver is killed at a random time 8 to 70 s (quick: 8 to 30
s) after each start (seeded) until ``kills`` kills (quick: 2) have landed; a kill that
lands before the run directory exists makes the next start a fresh one. The whole job
takes about a minute here, so a resumed job often ends before its next kill time: that
round is then run to its end and checked, and a new round starts on a fresh run
directory (at most 6 rounds). Checked at the end of every round: the requested trials
all finished, none lost or run twice (study numbers 0..n-1 once each), every history is
epochs 1..n exactly once, ``study.db`` holds that many finished trials, one W&B run id
per trial, and no process of any killed driver's Ray instance is left.

Run 2: the same spec with 4 trials, killed once during cross-validation (after its first
fold training is logged) and once during compression; each resume must keep the stages
that finished and the folds already scored.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO, SPEC, Goal, Result, Table

NAME = "chaos"
TITLE = "Chaos: a sweep killed again and again, resumed from its run directory"


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    f = open(log, "a")  # noqa: SIM115 - handed to the child; closed when it ends
    return subprocess.Popen([sys.executable, "-m", "automl", *args], cwd=REPO, env=env,
                            stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(60)


def _wait(proc: subprocess.Popen, until, timeout_s: float) -> bool:
    """Poll ``until()`` every 0.2 s while ``proc`` runs; True when it held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if until():
            return True
        time.sleep(0.2)
    return False


def _sessions(run_dir: Path) -> list[str]:
    try:
        return [json.loads((run_dir / "ray.json").read_text())["session_dir"]]
    except (OSError, ValueError, KeyError):
        return []


def _alive_in(sessions: set[str]) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(
                s in a for s in sessions for a in (p.info["cmdline"] or [])):
            out.append(p.pid)
    return out


def check_run(run_dir: Path, trials: int) -> dict:
    """What the finished run directory holds, against what a loss-free resume must give."""
    import optuna

    summary = json.loads((run_dir / "summary.json").read_text())
    records = json.loads((run_dir / "trials.json").read_text())
    numbers = sorted(int(t["trial_id"]) for t in records)
    whole = all([h["epoch"] for h in t["history"]] == list(range(1, t["epochs_run"] + 1))
                for t in records)
    study = optuna.load_study(study_name=summary["name"],
                              storage=f"sqlite:///{run_dir / 'study.db'}")
    finished = [t for t in study.trials if t.state.is_finished()
                and "automl.duplicate_of" not in t.user_attrs]
    ids: dict[str, int] = {}
    for d in (run_dir / "wandb").glob("offline-run-*"):
        rid = d.name.rsplit("-", 1)[-1]
        ids[rid] = ids.get(rid, 0) + 1
    return {"trials": len(records), "numbers_once": numbers == list(range(trials)),
            "histories_whole": whole, "study_finished": len(finished),
            "wandb_run_ids": len(ids), "wandb_folders": sum(ids.values()),
            "test_accuracy": summary["test"]["accuracy"], "counts": summary["trials"]}


def run_kills(work: Path, trials: int, kills: int, window: tuple[float, float], seed: int,
              timeout_s: float, rounds: int = 6) -> dict:
    """Run 1 (module doc), in rounds until ``kills`` kills have landed (at most
    ``rounds``): a job that ends by itself before its next kill time is checked and a
    new round starts on a fresh run directory. Returns each round's kill log, final
    check and wall time, and the kills that landed in all."""
    rng = random.Random(seed)
    out, landed = [], 0
    t_all = time.perf_counter()
    for r in range(rounds):
        one = _kill_round(work / f"round{r + 1}", trials, kills - landed, window, rng,
                          timeout_s)
        landed += one["landed"]
        out.append(one)
        if landed >= kills or one["exit"] != 0:
            break
    return {"rounds": out, "landed": landed, "wall_s": round(time.perf_counter() - t_all, 1)}


def _kill_round(work: Path, trials: int, kills: int, window: tuple[float, float],
                rng: random.Random, timeout_s: float) -> dict:
    """One round: at most ``kills`` kills at random times in ``window`` after each start,
    then a resume that runs to the end, then the checks."""
    out, name = work / "runs", "chaos"
    run_dir = out / name
    work.mkdir(parents=True, exist_ok=True)
    log = work / "chaos.log"
    base = ["search", str(SPEC), "--output", str(out), "--name", name, "--dashboard-port",
            "0", "--num-samples", str(trials)]
    events, sessions = [], set()
    t_all = time.perf_counter()
    for k in range(kills):
        fresh = not (run_dir / "spec.yaml").exists()
        proc = _start(base + ([] if fresh else ["--resume"]), log)
        after = rng.uniform(*window)
        t0 = time.monotonic()
        reached = _wait(proc, lambda t0=t0, after=after: time.monotonic() - t0 >= after,
                        after + 5)
        sessions.update(_sessions(run_dir))
        if not reached and proc.poll() is not None:
            events.append({"kill": k + 1, "at_s": None, "note": f"ended by itself "
                           f"(exit {proc.returncode}) before the kill"})
            break
        reports = _reports(run_dir)
        stages = sorted(p.stem for p in (run_dir / "stages").glob("*.json"))
        _kill(proc)
        events.append({"kill": k + 1, "at_s": round(after, 1), "fresh_start": fresh,
                       "reports_so_far": reports, "stages_done": stages})
    proc = _start(base + (["--resume"] if (run_dir / "spec.yaml").exists() else []), log)
    proc.wait(timeout_s)
    sessions.update(_sessions(run_dir))
    wall = time.perf_counter() - t_all
    result = {"events": events, "exit": proc.returncode, "wall_s": round(wall, 1),
              "landed": sum(e.get("at_s") is not None for e in events)}
    if proc.returncode == 0:
        result["check"] = check_run(run_dir, trials)
    # no cleanup here: whatever the product left is counted as it is
    result["leftover_ray_processes"] = len(_alive_in(sessions))
    result["sessions"] = len(sessions)
    return result


def _reports(run_dir: Path) -> int:
    path = run_dir / "trials.jsonl"
    if not path.exists():
        return 0
    return sum('"event"' not in line for line in path.read_text().splitlines())


def run_stage_kills(work: Path, timeout_s: float) -> dict:
    """Run 2 (module doc): kill during cross-validation, then during compression."""
    out, name = work / "runs", "stages"
    run_dir = out / name
    log = work / "stages.log"
    base = ["search", str(SPEC), "--output", str(out), "--name", name, "--dashboard-port",
            "0", "--num-samples", "4"]
    folds = run_dir / "cv_folds.jsonl"
    proc = _start(base, log)
    in_cv = _wait(proc, lambda: folds.exists() and folds.read_text().count("\n") >= 1,
                  timeout_s)
    folds_before = folds.read_text().count("\n") if folds.exists() else 0
    _kill(proc)
    proc = _start(base + ["--resume"], log)
    in_compression = _wait(proc, lambda: (run_dir / "stages" / "refit.json").exists()
                           and (run_dir / "compression").exists(), timeout_s)
    _kill(proc)
    proc = _start(base + ["--resume"], log)
    proc.wait(timeout_s)
    text = log.read_text(errors="replace")
    return {"killed_in_cv": in_cv, "folds_logged_at_kill": folds_before,
            "killed_in_compression": in_compression, "exit": proc.returncode,
            "kept_search": text.count("resume stage search finished before"),
            "kept_cv": "resume stage cv finished before" in text,
            "kept_folds_line": next((ln.strip() for ln in text.splitlines()
                                     if "fold trainings done before the resume" in ln), None),
            "summary": (run_dir / "summary.json").exists()}


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE)
    trials, kills = (4, 2) if quick else (12, 10)
    window = (8.0, 30.0) if quick else (8.0, 70.0)
    res.settings = {"spec": str(SPEC.relative_to(REPO)), "trials": trials, "kills": kills,
                    "kill_window_s": window, "tracking": "W&B offline + TensorBoard",
                    "seed": 0}
    with tempfile.TemporaryDirectory(prefix="automl-chaos-") as d:
        work = Path(d)
        one = run_kills(work, trials, kills, window, seed=0, timeout_s=1800)
        two = None if quick else run_stage_kills(work, timeout_s=900)
    res.data = {"kills": one, "stage_kills": two}
    rounds = one["rounds"]
    res.tables.append(Table("Kills (run 1)", ["round", "kill", "after s", "fresh start",
                                              "epoch reports so far", "stages done"],
                            [[i + 1, e["kill"], e.get("at_s"), e.get("fresh_start"),
                              e.get("reports_so_far"), ", ".join(e.get("stages_done") or [])
                              or e.get("note", "-")]
                             for i, r in enumerate(rounds) for e in r["events"]]))
    checks = [r.get("check") or {} for r in rounds]
    ok_trials = all(r["exit"] == 0 and c.get("trials") == trials and c.get("numbers_once")
                    and c.get("histories_whole") for r, c in zip(rounds, checks, strict=True))
    res.goals = [
        Goal(f"{kills} kills landed (a round whose job ends before its next kill is "
             "checked, then a fresh round starts)",
             f"{one['landed']} in {len(rounds)} round(s): "
             + ", ".join(str(r["landed"]) for r in rounds), one["landed"] >= kills),
        Goal(f"every round: {trials} finished trials, none lost or run twice, histories whole",
             "; ".join(f"exit {r['exit']}, {c.get('trials')} trials, numbers once "
                       f"{c.get('numbers_once')}, histories whole {c.get('histories_whole')}"
                       for r, c in zip(rounds, checks, strict=True)), ok_trials),
        Goal(f"every round: study.db holds {trials} finished trials",
             ", ".join(str(c.get("study_finished")) for c in checks),
             all(c.get("study_finished") == trials for c in checks)),
        Goal("no duplicate W&B run (one run id per trial)",
             "; ".join(f"{c.get('wandb_run_ids')} ids in {c.get('wandb_folders')} offline "
                       "folders" for c in checks),
             all(c.get("wandb_run_ids") == trials for c in checks)),
        Goal("no leftover Ray process of any killed driver",
             ", ".join(f"{r['leftover_ray_processes']} alive of {r['sessions']} sessions' "
                       "processes" for r in rounds),
             all(r["leftover_ray_processes"] == 0 for r in rounds)),
    ]
    if two is not None:
        res.goals.append(Goal(
            "killed in cross-validation and in compression, resume continues from the stage "
            "and fold where it was",
            f"exit {two['exit']}; killed in CV: {two['killed_in_cv']} "
            f"({two['folds_logged_at_kill']} folds logged), in compression: "
            f"{two['killed_in_compression']}; search kept {two['kept_search']}x, cv kept: "
            f"{two['kept_cv']}; {two['kept_folds_line']}",
            two["exit"] == 0 and two["killed_in_cv"] and two["killed_in_compression"]
            and two["kept_search"] >= 2 and two["kept_cv"] and bool(two["kept_folds_line"])))
    res.notes.append(f"Run 1 took {one['wall_s']} s of wall in all (every round, start, kill "
                     "and resume).")
    return res
