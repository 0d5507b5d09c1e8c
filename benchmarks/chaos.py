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

Run 3: run 1 again with Ctrl-C instead of SIGKILL: SIGINT to the driver alone (``kill
-INT``, as a terminal's Ctrl-C reaches it), ``kills`` times at random moments, with the
same checks, plus: each interrupted job exits 130 within 15 s and publishes nothing (no
``summary.json``, no registry version) before the run that ends by itself.

Run 4: the four Ctrl-C cases of issue 45, each on a fresh run of 6 trials, then resumed
to the end: one Ctrl-C once 2 trials ended; one during cross-validation (after its first
fold training is logged); two Ctrl-Cs (the second as soon as the first is acknowledged,
which must stop at once); one before any trial ended.
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


#: seconds from the first Ctrl-C to the driver's exit that issue 45 allows
INTERRUPT_EXIT_S = 15.0


def _interrupt(proc: subprocess.Popen, log: Path | None = None, twice: bool = False) -> dict:
    """Ctrl-C to the driver alone (SIGINT, as ``kill -INT`` sends it); with ``twice``, a
    second one as soon as the driver acknowledged the first in ``log``. Returns the exit
    code and the seconds from the first (and the second) Ctrl-C to the exit."""
    t0 = time.monotonic()
    seen = log.read_text(errors="replace").count("interrupt: stopping") if log else 0
    try:
        os.kill(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    out: dict = {}
    if twice and log is not None:
        _wait(proc, lambda: log.read_text(errors="replace").count("interrupt: stopping")
              > seen, 30)
        t1 = time.monotonic()
        try:
            os.kill(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        out["second_s"] = t1
    try:
        rc = proc.wait(120)
    except subprocess.TimeoutExpired:  # counted as it is, then cleared away
        _kill(proc)
        rc = None
    t = time.monotonic()
    out.update({"exit": rc, "exit_after_s": round(t - t0, 1)})
    if "second_s" in out:
        out["exit_after_second_s"] = round(t - out.pop("second_s"), 1)
    return out


def _spec_in(out: Path) -> Path:
    """A copy of :data:`SPEC` beside ``out`` whose registry is ``out/registry`` (the spec's
    own, ``runs/registry``, is the repository's): what a job published stays countable."""
    import yaml

    spec = yaml.safe_load(SPEC.read_text())
    spec["registry"] = {**spec.get("registry", {}), "dir": str(out / "registry")}
    path = out.parent / "spec.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _published(out: Path, run_dir: Path) -> list[str]:
    """What a job published: ``summary.json`` and the registry's versions under ``out``."""
    found = [str(p.relative_to(out)) for p in (out / "registry").glob("*/[0-9]*")]
    return (["summary.json"] if (run_dir / "summary.json").exists() else []) + sorted(found)


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
              timeout_s: float, rounds: int = 6, sig: int = signal.SIGKILL) -> dict:
    """Run 1 (module doc), in rounds until ``kills`` kills have landed (at most
    ``rounds``): a job that ends by itself before its next kill time is checked and a
    new round starts on a fresh run directory. Returns each round's kill log, final
    check and wall time, and the kills that landed in all."""
    rng = random.Random(seed)
    out, landed = [], 0
    t_all = time.perf_counter()
    for r in range(rounds):
        one = _kill_round(work / f"round{r + 1}", trials, kills - landed, window, rng,
                          timeout_s, sig)
        landed += one["landed"]
        out.append(one)
        if landed >= kills or one["exit"] != 0:
            break
    return {"rounds": out, "landed": landed, "wall_s": round(time.perf_counter() - t_all, 1)}


def _kill_round(work: Path, trials: int, kills: int, window: tuple[float, float],
                rng: random.Random, timeout_s: float, sig: int = signal.SIGKILL) -> dict:
    """One round: at most ``kills`` kills (``sig``: SIGKILL of the driver's process group,
    or SIGINT to the driver, a Ctrl-C) at random times in ``window`` after each start,
    then a resume that runs to the end, then the checks."""
    out, name = work / "runs", "chaos"
    run_dir = out / name
    work.mkdir(parents=True, exist_ok=True)
    log = work / "chaos.log"
    base = ["search", str(_spec_in(out)), "--output", str(out), "--name", name, "--dashboard-port",
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
        event = {"kill": k + 1, "at_s": round(after, 1), "fresh_start": fresh,
                 "reports_so_far": reports, "stages_done": stages}
        if sig == signal.SIGINT:
            event.update(_interrupt(proc))
            event["published"] = _published(out, run_dir)
            if event["exit"] == 0:  # the job ended by itself as the Ctrl-C came
                events.append({**event, "at_s": None,
                               "note": "ended by itself (exit 0) as the Ctrl-C came"})
                break
        else:
            _kill(proc)
        events.append(event)
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
    base = ["search", str(_spec_in(out)), "--output", str(out), "--name", name, "--dashboard-port",
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


#: issue 45's Ctrl-C cases (run 4): name -> (what the driver must reach first, twice)
CASES = {
    "after 2 trials ended": ("ends2", False),
    "during cross-validation": ("fold", False),
    "twice (the second at once)": ("ends1", True),
    "before any trial ended": ("start", False),
}


def run_interrupt_cases(work: Path, trials: int, timeout_s: float) -> list[dict]:
    """Run 4 (module doc): each case on a fresh run directory, Ctrl-C'd once it reached
    its moment, then ``--resume`` to the end and the run-1 checks."""
    return [_interrupt_case(work / f"case{i + 1}", case, moment, twice, trials, timeout_s)
            for i, (case, (moment, twice)) in enumerate(CASES.items())]


def _ledger_events(path: Path, kind: str) -> int:
    return path.read_text().count(f'"event": "{kind}"') if path.exists() else 0


def _interrupt_case(work: Path, case: str, moment: str, twice: bool, trials: int,
                    timeout_s: float) -> dict:
    out, name = work / "runs", "case"
    run_dir = out / name
    log = work / "case.log"
    out.mkdir(parents=True)
    base = ["search", str(_spec_in(out)), "--output", str(out), "--name", name,
            "--dashboard-port", "0", "--num-samples", str(trials)]
    jsonl, folds = run_dir / "trials.jsonl", run_dir / "cv_folds.jsonl"
    until = {"ends2": lambda: _ledger_events(jsonl, "end") >= 2,
             "ends1": lambda: _ledger_events(jsonl, "end") >= 1,
             "start": lambda: _ledger_events(jsonl, "start") >= 1,
             "fold": lambda: folds.exists() and folds.read_text().count("\n") >= 1}[moment]
    proc = _start(base, log)
    reached = _wait(proc, until, timeout_s)
    row = {"case": case, "reached": reached, "ended_before": _ledger_events(jsonl, "end"),
           "stages_done": sorted(q.stem for q in (run_dir / "stages").glob("*.json"))}
    row.update(_interrupt(proc, log, twice=twice))
    row["published"] = _published(out, run_dir)
    text = log.read_text(errors="replace")
    row["resume_line"] = next((ln.strip() for ln in text.splitlines() if "resume with:" in ln),
                              None)
    row["tune_restore_hint"] = "Tuner.restore" in text
    proc = _start(base + ["--resume"], log)
    proc.wait(timeout_s)
    row["resume_exit"] = proc.returncode
    if proc.returncode == 0:
        row["check"] = check_run(run_dir, trials)
    return row


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE)
    trials, kills = (4, 2) if quick else (12, 10)
    window = (8.0, 30.0) if quick else (8.0, 70.0)
    res.settings = {"spec": str(SPEC.relative_to(REPO)), "trials": trials, "kills": kills,
                    "kill_window_s": window, "tracking": "W&B offline + TensorBoard",
                    "seed": 0}
    with tempfile.TemporaryDirectory(prefix="automl-chaos-") as d:
        work = Path(d)
        one = run_kills(work / "kill", trials, kills, window, seed=0, timeout_s=1800)
        two = None if quick else run_stage_kills(work, timeout_s=900)
        three = run_kills(work / "int", trials, kills, window, seed=1, timeout_s=1800,
                          sig=signal.SIGINT)
        four = None if quick else run_interrupt_cases(work / "cases", 6, timeout_s=900)
    res.data = {"kills": one, "stage_kills": two, "interrupts": three, "interrupt_cases": four}
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
    _interrupt_record(res, three, four, trials, kills)
    res.notes.append(f"Run 1 took {one['wall_s']} s of wall in all (every round, start, kill "
                     f"and resume); run 3 (Ctrl-C) {three['wall_s']} s.")
    return res


def _interrupt_record(res: Result, three: dict, four: list[dict] | None, trials: int,
                      kills: int) -> None:
    """Run 3's and run 4's tables and goals (module doc)."""
    rounds = three["rounds"]
    res.tables.append(Table(
        "Ctrl-C (run 3)", ["round", "Ctrl-C", "after s", "fresh start", "epoch reports so far",
                           "stages done", "exit", "exit after s", "published"],
        [[i + 1, e["kill"], e.get("at_s"), e.get("fresh_start"), e.get("reports_so_far"),
          ", ".join(e.get("stages_done") or []) or e.get("note", "-"), e.get("exit", "-"),
          e.get("exit_after_s", "-"), ", ".join(e.get("published") or []) or "nothing"]
         for i, r in enumerate(rounds) for e in r["events"]]))
    landed = [e for r in rounds for e in r["events"] if e.get("at_s") is not None]
    checks = [r.get("check") or {} for r in rounds]
    res.goals += [
        Goal(f"{kills} Ctrl-Cs landed at random moments",
             f"{three['landed']} in {len(rounds)} round(s)", three["landed"] >= kills),
        Goal(f"every Ctrl-C: exit 130 within {INTERRUPT_EXIT_S:.0f} s, nothing published",
             f"exits {sorted({e.get('exit') for e in landed}, key=str)}, slowest "
             f"{max((e.get('exit_after_s') or 0 for e in landed), default=0):.1f} s, "
             f"published {sum(bool(e.get('published')) for e in landed)} times",
             all(e.get("exit") == 130 and e["exit_after_s"] <= INTERRUPT_EXIT_S
                 and not e.get("published") for e in landed)),
        Goal(f"every Ctrl-C round: {trials} finished trials, none lost or run twice, histories "
             "whole, study.db and W&B agree",
             "; ".join(f"exit {r['exit']}, {c.get('trials')} trials, numbers once "
                       f"{c.get('numbers_once')}, histories whole {c.get('histories_whole')}, "
                       f"study {c.get('study_finished')}, W&B ids {c.get('wandb_run_ids')}"
                       for r, c in zip(rounds, checks, strict=True)),
             all(r["exit"] == 0 and c.get("trials") == trials and c.get("numbers_once")
                 and c.get("histories_whole") and c.get("study_finished") == trials
                 and c.get("wandb_run_ids") == trials
                 for r, c in zip(rounds, checks, strict=True))),
        Goal("no leftover Ray process after any Ctrl-C",
             ", ".join(str(r["leftover_ray_processes"]) for r in rounds),
             all(r["leftover_ray_processes"] == 0 for r in rounds)),
    ]
    if four is None:
        return
    res.tables.append(Table(
        "The Ctrl-C cases (run 4): 6 trials each, then --resume",
        ["case", "trials ended before", "exit", "exit after s (after the 2nd)", "published",
         "says how to resume", "Tuner.restore hint", "resume exit", "trials after resume"],
        [[r["case"], r["ended_before"], r["exit"],
          f"{r['exit_after_s']}" + (f" ({r['exit_after_second_s']})"
                                     if "exit_after_second_s" in r else ""),
          ", ".join(r["published"]) or "nothing", bool(r["resume_line"]),
          r["tune_restore_hint"], r["resume_exit"], (r.get("check") or {}).get("trials")]
         for r in four]))
    res.goals.append(Goal(
        "each Ctrl-C case: exit 130 within 15 s (a second Ctrl-C: within 3 s), nothing "
        "published, one line says how to resume; --resume ends with every trial, exit 0",
        "; ".join(f"{r['case']}: exit {r['exit']} after {r['exit_after_s']} s, resume exit "
                  f"{r['resume_exit']} with {(r.get('check') or {}).get('trials')} trials"
                  for r in four),
        all(r["reached"] and r["exit"] == 130 and r["exit_after_s"] <= INTERRUPT_EXIT_S
            and r.get("exit_after_second_s", 0) <= 3.0 and not r["published"]
            and r["resume_line"] and not r["tune_restore_hint"] and r["resume_exit"] == 0
            and (r.get("check") or {}).get("trials") == 6
            and (r.get("check") or {}).get("numbers_once") for r in four)))
