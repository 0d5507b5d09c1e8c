"""What every benchmark shares: the machine and versions it ran on, the result record,
and writing it as ``<out>/<name>.json`` plus a markdown table ``<out>/<name>.md``.

A benchmark's ``run(quick, ctx)`` returns a :class:`Result`. ``status`` is ``ok``,
``not landed`` (the feature it measures is not in ``automl`` yet; no figures),
``unavailable`` (an optional package is missing; the reason says which) or ``failed``
(it raised; the reason holds the error). Figures are never invented for a section
that did not run.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
SPEC = REPO / "search_spaces" / "resnet.yaml"
PACKAGES = ("torch", "ray", "optuna", "scikit-learn", "numpy", "mf-prior-bench", "ConfigSpace")


@dataclass
class Table:
    """One markdown table: ``rows`` are lists aligned with ``columns``."""

    title: str
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Goal:
    """A target from the issue, what was measured, and whether it holds."""

    goal: str
    measured: str
    met: bool | None  # None: not measurable in this run


@dataclass
class Result:
    """One benchmark's record (see the module docstring for ``status``)."""

    name: str
    title: str
    status: str = "ok"
    reason: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, Any] = field(default_factory=dict)
    tables: list[Table] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


def machine() -> dict[str, Any]:
    """Cores (logical, and usable by this process), memory (GiB), CPU model, GPU (via
    ``torch.cuda``), OS, and the 1-minute load average (others' work on a shared machine)."""
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem = float("nan")
    gpus: list[str] = []
    try:
        import torch

        if torch.cuda.is_available():
            gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": round(mem, 1),
        "cpu": cpu_model or platform.processor(),
        "gpu": gpus or "none",
        "os": platform.platform(),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def versions() -> dict[str, str]:
    """Python, the measured libraries (``missing`` when not installed) and the git commit."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, text=True,
                               capture_output=True, timeout=10).stdout.strip()
        out["automl_commit"] = head + ("+uncommitted" if dirty else "") if head else "unknown"
    except (OSError, subprocess.SubprocessError):
        out["automl_commit"] = "unknown"
    return out


def fmt(value: Any) -> str:
    """A table cell: floats to 4 significant digits, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.4g}"
    return str(value)


def markdown(record: dict[str, Any]) -> str:
    """The markdown report of one benchmark record (as written to JSON)."""
    m, v = record["machine"], record["versions"]
    lines = [f"# {record['title']}", ""]
    mode = "quick" if record["quick"] else "full"
    lines.append(f"Status: **{record['status']}**"
                 + (f" ({record['reason']})" if record.get("reason") else "")
                 + f". Mode: {mode}. Took {record['duration_s']:.0f} s, "
                 f"finished {record['finished_at']}.")
    lines.append("")
    lines.append(f"Machine: {m['cores']} cores ({m['usable_cores']} usable), "
                 f"{m['memory_gib']} GiB, {m['cpu']}, GPU {m['gpu']}; load average "
                 f"{m['load_avg_1m']} at start, {record.get('load_avg_1m_end')} at end.")
    lines.append("Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".")
    if record.get("seeds"):
        lines.append("Seeds: " + ", ".join(f"{k} {val}" for k, val in record["seeds"].items())
                     + ".")
    lines.append("")
    for t in record["tables"]:
        lines += [f"## {t['title']}", "", "| " + " | ".join(t["columns"]) + " |",
                  "|" + "---|" * len(t["columns"])]
        lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in t["rows"]]
        lines.append("")
    if record["goals"]:
        lines += ["## Goals", "", "| goal | measured | met |", "|---|---|---|"]
        lines += [f"| {g['goal']} | {g['measured']} | {fmt(g['met'])} |"
                  for g in record["goals"]]
        lines.append("")
    if record["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in record["notes"]] + [""]
    return "\n".join(lines)


def write(result: Result, out_dir: Path, *, quick: bool, started: float,
          machine_info: dict[str, Any]) -> dict[str, Any]:
    """Write ``<out_dir>/<name>.json`` and ``.md`` atomically; returns the record."""
    record = {
        "name": result.name,
        "title": result.title,
        "status": result.status,
        "reason": result.reason,
        "quick": quick,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "duration_s": round(time.time() - started, 1),
        "machine": machine_info,
        "load_avg_1m_end": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "versions": versions(),
        "command": " ".join([Path(sys.executable).name, "-m", "benchmarks", *sys.argv[1:]]),
        **{k: v for k, v in asdict(result).items() if k not in ("name", "title", "status",
                                                                   "reason")},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps(record, indent=1, default=str) + "\n"),
                         (".md", markdown(record))):
        path = out_dir / f"{result.name}{suffix}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return record


def run_python(args: list[str], log: Path, timeout_s: float,
               env: dict[str, str] | None = None) -> tuple[int, float]:
    """Run ``python -m ...args`` from the repository root in a fresh process, output to
    ``log``; returns (exit code, wall seconds, process start to exit).

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout_s`` (the process is killed).
    """
    full_env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline",
                "PYTHONUNBUFFERED": "1", **(env or {}),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                            os.environ.get("PYTHONPATH")]))}
    full_env.pop("RAY_ADDRESS", None)
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run([sys.executable, *args], cwd=REPO, stdout=fh,
                              stderr=subprocess.STDOUT, env=full_env, timeout=timeout_s)
    return proc.returncode, time.perf_counter() - t0


def trial_rows(run_dir: Path) -> list[list[dict]]:
    """The epoch rows of ``<run_dir>/trials.jsonl`` (driver wall-clock ``time`` in seconds,
    ``train_time_s``, ``eval_time_s``, ``setup_s`` ...) grouped by trial, each trial's rows
    in report order and the trials in the order they first reported."""
    rows = [json.loads(x) for x in (run_dir / "trials.jsonl").read_text().splitlines() if x]
    rows = [r for r in rows if "event" not in r]  # epoch reports, not start / end events
    by_trial: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: r["time"]):
        by_trial.setdefault(r["trial_id"], []).append(r)
    return list(by_trial.values())


def tail(path: Path, n: int = 5) -> str:
    """The last ``n`` non-empty lines of a log file, joined by `` / ``."""
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return " / ".join(lines[-n:])


class ProcessCPU:
    """CPU seconds (user + system) of processes, summed by a kind of each, read every
    ``every`` seconds on a thread (:meth:`start` .. :meth:`stop`) or by a caller's loop
    (:meth:`sample`): the processes under ``pid`` (itself included), or every process on
    the machine when ``pid`` is None. ``kind_of(process)`` names a process's kind (None:
    not counted); a process seen under several kinds counts under the one ranked highest
    in ``rank`` (later wins; kinds not listed rank lowest). A process's last ``every``
    seconds before it exits are missed. Source: psutil's ``cpu_times``."""

    def __init__(self, kind_of, pid: int | None = None, rank: tuple[str, ...] = (),
                 every: float = 0.5):
        import threading

        self.kind_of, self.pid, self.every = kind_of, pid, every
        self._rank = {k: i + 1 for i, k in enumerate(rank)}
        self._seen: dict[int, tuple[str, float]] = {}  # pid -> (kind, CPU seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _processes(self) -> list:
        import psutil

        if self.pid is None:
            return list(psutil.process_iter())
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:  # the root is gone
            return []

    def sample(self) -> None:
        """Read every process once."""
        for p in self._processes():
            try:
                kind, t = self.kind_of(p), p.cpu_times()
            except Exception:  # noqa: BLE001 - gone, or not ours to read
                continue
            prev = self._seen.get(p.pid, (None, 0.0))[0]
            if kind is None and prev is None:
                continue
            if prev is not None and self._rank.get(prev, 0) >= self._rank.get(kind, 0):
                kind = prev
            self._seen[p.pid] = (kind, t.user + t.system)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def start(self) -> ProcessCPU:
        self._thread.start()
        return self

    def stop(self) -> dict[str, dict[str, float]]:
        """Stop the thread (if started); :meth:`totals`."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        return self.totals()

    def totals(self) -> dict[str, dict[str, float]]:
        """``{kind: {"cpu_s": seconds, "processes": count}}``, by kind name."""
        out: dict[str, dict[str, float]] = {}
        for kind, seconds in self._seen.values():
            row = out.setdefault(kind, {"cpu_s": 0.0, "processes": 0})
            row["cpu_s"] = round(row["cpu_s"] + seconds, 1)
            row["processes"] += 1
        return dict(sorted(out.items()))


def ray_title(p) -> str | None:
    """A Ray worker process's class or function, from its title (``ray::TrainController.run``
    -> ``TrainController``; ``ray::IDLE`` -> ``IDLE``); None for any other process."""
    title = (p.cmdline()[:1] or [""])[0].split(" ")[0]
    if not title.startswith("ray::"):
        return None
    return title[5:].split(".")[0] or None
