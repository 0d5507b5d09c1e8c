"""Node loss: worker nodes of a real multi-node Ray cluster SIGKILLed during a sweep.

The cluster is ``ray start`` processes on this machine: a head of 1 CPU (the dashboard
on, as data-parallel trials need its State API; it is never killed) and two worker nodes
of ``NODE_CPUS`` CPU each, each node in its own temp dir and process group. Killing a node
is SIGKILL to its whole process group (raylet, object store, its workers); a replacement
node then joins, as an autoscaler or KubeRay would start one. The sweep is ``automl search
SPEC --address <head>`` as a user runs it against a cluster, with checkpoints and the run
directory on ``output.storage_uri`` (a folder every node sees).

Run 1: ``search_spaces/resnet.yaml`` with 40 trials (quick: 8), 3 in-process trials at
once (one per node), ``resources.max_failures: 3``. A worker node is killed each
time the ledger has seen a further 1/4 of the trials' epoch reports (3 kills; quick: 1).
Checked: 40 of 40 trials finished, none failed, lost or left RUNNING in ``study.db``,
every trial's history is epochs 1..n exactly once, and the job exits 0.

Run 2: one data-parallel trial of 2 workers (``workers_per_trial: 2``, DDP; 1-CPU nodes
place them on two nodes), 12 epochs, a checkpoint every 2; a worker node running one of
its ranks is killed after its third epoch report. Checked:
the trial finishes, from its checkpoint (its history says where it was restored), and
the job exits 0.

Run as ``python -m benchmarks --only node_loss``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import REPO, SPEC, Goal, Result, Table

NAME = "node_loss"
TITLE = "Node loss: worker nodes SIGKILLed mid-sweep on a multi-node Ray cluster"
NODE_CPUS = 1
_NODES = 0  # worker nodes started by this process (each gets its own worker ports)


def start_node(head, log: Path):
    """A worker node of ``NODE_CPUS`` CPUs joining ``head`` (``tests/_rayhead.start_worker``:
    its own temp dir and process group, free ports), its worker processes on ports of a
    range of its own (several nodes share this machine)."""
    if str(REPO) not in sys.path:  # tests/ is not installed; run() puts the repo first too
        sys.path.insert(0, str(REPO))
    from tests._rayhead import start_worker

    global _NODES
    _NODES += 1
    # below the ephemeral ports free_port hands out, above the head's default 10002-19999
    low = 20000 + 250 * (_NODES % 50)
    return start_worker(head, NODE_CPUS, log=log, worker_ports=(low, low + 200))


def _spec(work: Path, data_parallel: bool, trials: int) -> Path:
    import yaml

    spec = yaml.safe_load(SPEC.read_text())
    spec["name"] = "node-loss-ddp" if data_parallel else "node-loss"
    spec["search"]["num_samples"] = trials
    spec["search"]["time_budget_s"] = 1800
    spec["selection"].update({"top_k": 2, "cv_folds": 2})
    spec["compression"] = {"enabled": False}
    spec["tracking"] = {"backend": "none", "tensorboard": False}
    spec["registry"] = {"dir": str(work / "registry")}
    spec["output"] = {"dir": str(work / "runs"), "storage_uri": (work / "storage").as_uri()}
    spec["resources"] = {"max_failures": 3, "cpus_per_worker": NODE_CPUS,
                         "memory_per_worker_mb": 512}
    if data_parallel:
        spec["resources"].update({"workers_per_trial": 2, "max_failures": 2})
        spec["training"]["epochs"] = 12
        spec["training"]["checkpoint_every"] = 2
        spec["scheduler"] = {"type": "none"}
        spec["selection"].update({"top_k": 1, "cv_folds": 2})
    path = work / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _reports(run_dir: Path) -> list[dict]:
    path = run_dir / "trials.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:  # a line being written
            continue
        if "event" not in rec:
            out.append(rec)
    return out


def _holds(node, name: str) -> bool:
    """Whether a process named ``name`` (e.g. ``RayTrainWorker``) runs on ``node``: Ray's
    worker processes stay in their raylet's process group, the node's."""
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(name in a for a in p.info["cmdline"] or []) \
                    and os.getpgid(p.pid) == node.proc.pid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def _sweep(work: Path, head, spec: Path, name: str, kill_at: list[int], log: Path,
           timeout_s: float, holding: str | None = None) -> dict:
    """Run the sweep; kill a worker node whenever the epoch reports reach each of
    ``kill_at`` (one running a process named ``holding`` when one does), then start a
    replacement. Returns what happened."""
    nodes = [start_node(head, work / f"node{i}.log") for i in range(2)]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "automl", "search", str(spec),
                                 "--address", head.gcs_address], cwd=REPO, env=env,
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    run_dir = work / "runs" / name
    kills: list[dict] = []
    deadline = time.monotonic() + timeout_s
    try:
        for at in kill_at:
            while proc.poll() is None and time.monotonic() < deadline \
                    and len(_reports(run_dir)) < at:
                time.sleep(0.2)
            if proc.poll() is not None or time.monotonic() >= deadline:
                break
            i = next((k for k, n in enumerate(nodes) if _holds(n, holding)), 0) \
                if holding else 0
            victim = nodes.pop(i)
            held = _holds(victim, holding) if holding else None
            gone_s = victim.kill()
            kills.append({"after_reports": len(_reports(run_dir)),
                          "at_s": round(time.monotonic() - t0, 1), "gone_in_s": gone_s,
                          "held": held})
            nodes.append(start_node(head, work / f"node{len(kills) + 1}.log"))
        rc = proc.wait(max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rc = None
    finally:
        for n in nodes:
            n.kill()
    return {"exit": rc, "wall_s": round(time.monotonic() - t0, 1), "kills": kills,
            "run_dir": run_dir}


def check(run_dir: Path, trials: int) -> dict:
    """What the run directory holds against a sweep that lost nothing."""
    import optuna

    out: dict = {"summary": (run_dir / "summary.json").exists()}
    if not out["summary"]:
        return out
    summary = json.loads((run_dir / "summary.json").read_text())
    records = json.loads((run_dir / "trials.json").read_text())
    study = optuna.load_study(study_name=summary["name"],
                              storage=f"sqlite:///{run_dir / 'study.db'}")
    states: dict[str, int] = {}
    for t in study.trials:
        if "automl.duplicate_of" not in t.user_attrs:
            states[t.state.name] = states.get(t.state.name, 0) + 1
    restored = [t for t in records if any("restored_from_epoch" in h for h in t["history"])]
    last: dict = {}
    again = 0  # reports of an epoch a trial had already reported: it was restarted
    for rec in _reports(run_dir):
        n, e = rec.get("trial_id", rec.get("number")), rec.get("epoch")
        if e is not None and n in last and e <= last[n]:
            again += 1
        last[n] = e if e is not None else last.get(n)
    out.update({
        "counts": summary["trials"], "records": len(records),
        "numbers_once": sorted(int(t["trial_id"]) for t in records) == list(range(trials)),
        "histories_whole": all([h["epoch"] for h in t["history"]]
                               == list(range(1, t["epochs_run"] + 1)) for t in records),
        "study_states": states, "restored_trials": len(restored), "re_reports": again,
        "worker_nodes": sorted({h.get("worker_nodes") for t in records for h in t["history"]
                                if h.get("worker_nodes") is not None}),
        "test_accuracy": (summary.get("test") or {}).get("accuracy"),
    })
    return out


def run(quick: bool, ctx: dict) -> Result:
    sys.path.insert(0, str(REPO))
    from tests._rayhead import start_head

    trials = 8 if quick else 40
    res = Result(NAME, TITLE)
    res.settings = {"spec": str(SPEC.relative_to(REPO)), "trials": trials,
                    "worker nodes": f"2 x {NODE_CPUS} CPU (a replacement joins after each "
                                    "kill)", "head": "1 CPU, dashboard on (never killed)",
                    "resources.max_failures": "3 (run 2: 2)"}
    with tempfile.TemporaryDirectory(prefix="automl-nodeloss-") as d:
        work = Path(d)
        head = start_head(1, object_store_mb=300)
        try:
            (work / "one").mkdir()
            one = _sweep(work / "one", head, _spec(work / "one", False, trials), "node-loss",
                         [1] if quick else [20, 50, 90], work / "one.log", 2400)
            one["check"] = check(one.pop("run_dir"), trials)
            (work / "two").mkdir()
            two = _sweep(work / "two", head, _spec(work / "two", True, 1), "node-loss-ddp",
                         [3], work / "two.log", 1200, holding="RayTrainWorker")
            two["check"] = check(two.pop("run_dir"), 1)
            logs = {k: (work / f"{k}.log").read_text(errors="replace")[-3000:]
                    for k in ("one", "two")}
        finally:
            head.stop()
    res.data = {"run1": one, "run2": two, "log_tails": logs}
    c1, c2 = one["check"], two["check"]
    res.tables.append(Table("kills", ["run", "kill", "after epoch reports", "at s",
                                      "node gone in s"],
                            [[run, i + 1, k["after_reports"], k["at_s"], k["gone_in_s"]]
                             for run, r in (("1: 40 trials", one), ("2: DDP trial", two))
                             for i, k in enumerate(r["kills"])]))
    res.tables.append(Table("runs", ["run", "exit", "wall s", "trials", "study states",
                                     "trials restored from a checkpoint", "worker nodes"],
                            [[run, r["exit"], r["wall_s"], c.get("counts"),
                              c.get("study_states"), c.get("restored_trials"),
                              c.get("worker_nodes")]
                             for run, r, c in (("1", one, c1), ("2", two, c2))]))
    counts = c1.get("counts") or {}
    want = 1 if quick else 3
    res.goals = [
        Goal(f"{want} worker-node kills landed in the sweep", str(len(one["kills"])),
             len(one["kills"]) >= want),
        Goal(f"{trials} of {trials} trials finished, none failed, lost or left RUNNING",
             f"exit {one['exit']}; {counts}; study {c1.get('study_states')}; numbers once "
             f"{c1.get('numbers_once')}; histories whole {c1.get('histories_whole')}",
             one["exit"] == 0 and counts.get("failed", 0) == 0
             and c1.get("records") == trials and bool(c1.get("numbers_once"))
             and not set(c1.get("study_states") or {}) - {"COMPLETE", "PRUNED"}
             and sum((c1.get("study_states") or {}).values()) == trials
             and bool(c1.get("histories_whole"))),
        Goal("a DDP trial across 2 nodes survives the loss of one of them",
             f"exit {two['exit']}; kills {len(two['kills'])} (a RayTrainWorker process "
             f"seen in the killed node's process group: {[k['held'] for k in two['kills']]}"
             f"); {c2.get('counts')}; epochs reported "
             f"again after the restart {c2.get('re_reports')}; restored from a checkpoint "
             f"{c2.get('restored_trials')}; worker nodes {c2.get('worker_nodes')}",
             # the kill hit the trial: it restarted (an epoch reported again) and resumed
             # from its checkpoint (the process-group look-up may miss a rank's process)
             two["exit"] == 0 and len(two["kills"]) == 1
             and (c2.get("counts") or {}).get("failed", 1) == 0
             and (c2.get("re_reports") or 0) >= 1 and c2.get("restored_trials") == 1),
    ]
    res.notes.append("Figures here are counts, not timings: the machine's load does not "
                     "change them, only how long each run takes.")
    return res
