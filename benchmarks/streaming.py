"""Streaming against in-memory data (issue 42): ``python -m benchmarks --only streaming``.

One synthetic set of labelled RGB 32x32 PNG images in Parquet shards
(:mod:`benchmarks._images`), at 1x and 4x its size, searched by ``automl search`` with 2
concurrent trials and ``memory_per_worker_mb: 768``: at 1x by both paths (``data.streaming:
false`` and ``true``), at 4x by streaming, and by the in-memory path only where it fits
(its driver decodes every image, puts them in the object store, and each trial copies
them). The model is a small ResNet (width 8, 2 stages), 3 epochs, batch 256. Every run is
its own ``automl search`` process; a sampler reads the resident and
unique memory (RSS twice a second, USS every 5 s) of the driver and of every Ray worker process.

Per run it records: peak memory of the driver and of each kind of Ray process (trials,
CV folds and refit, Ray Data tasks), failed trials and out-of-memory kills, bytes spilled
(Ray's own log line), the first batch's latency and the ingest throughput (training rows
per second of training step, same model and epochs on both paths), the cache's build and
the CV winner. Full: 1x = 50,000 images (614 MB as float32), 4x = 200,000 (2.46 GB), or
``--stream-rows N``; quick: 1x = 1,200 images of 16x16. Full mode also runs the 1x pair
with one trial at a time (:data:`ONE_SLOT`): with 2 trials on 2 cores the CPU streaming
keeps back for Ray Data (``resources.num_cpus`` one above the trials') is not a real core,
with one trial it is.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks._common import Goal, ProcessCPU, Result, Table, ray_title

NAME, TITLE = "streaming", "Streaming through Ray Data against in-memory data (issue 42)"
#: full mode's 1x pair run again with one trial at a time: name, streaming
ONE_SLOT = (("x1_streaming_1slot", True), ("x1_in_memory_1slot", False))
REPO = Path(__file__).resolve().parent.parent

SPEC = """
name: {name}
data: {{source: parquet, kind: image, path: {path}, target: label, streaming: {streaming},
        seed: 0}}
model: {{family: resnet, resnet: {{depth: 1, width: 8, stages: 2}}}}
training: {{optimizer: adam, lr: {{type: float, low: 1e-3, high: 1e-2, log: true}},
            batch_size: 256, epochs: {epochs}}}
search: {{seed: 0, num_samples: {trials}, metric: val_accuracy, sampler: random}}
scheduler: {{type: none}}
selection: {{top_k: 2, cv_folds: 2, fold_halving: false}}
compression: {{enabled: false}}
resources: {{num_cpus: {cpus}, cpus_per_worker: 1, concurrent_trials: {slots},
             memory_per_worker_mb: 768, object_store_mb: {store}}}
output: {{dir: {out}}}
tracking: {{backend: none}}
"""


class Sampler:
    """Peak RSS and USS (bytes) of the driver ``pid`` and of Ray's worker processes, by
    their process title (``ray::ImplicitFunc`` is a trial, ``ray::fit_predict`` a fold...),
    sampled on a thread until :meth:`stop`: RSS every ``every`` seconds (``/proc/PID/statm``,
    cheap), USS every ``uss_every`` (``smaps``: reading it for every process twice a second
    took half a core here, slowing the runs it measured). It also sums the CPU seconds
    (user + system) of every process under the driver (its Ray instance's included) by
    :meth:`cpu_kind` (:class:`~benchmarks._common.ProcessCPU`)."""

    def __init__(self, pid: int, every: float = 0.5, uss_every: float = 5.0):
        self.pid, self.every, self.uss_every = pid, every, uss_every
        self.peaks: dict[str, dict[str, int]] = {}
        # a worker counts as the weightiest kind of work it was seen doing
        self.cpu = ProcessCPU(self.cpu_kind, pid,
                              rank=("ray", "idle", "data", "folds", "trials", "driver"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _kind(self, p) -> str | None:
        if p.pid == self.pid:
            return "driver"
        try:
            cmd = " ".join(p.cmdline()[:1])
        except Exception:  # noqa: BLE001 - gone
            return None
        if cmd.startswith("ray::"):
            title = cmd.split()[0]
            if title.startswith("ray::IDLE"):
                return None
            return title
        return None

    def cpu_kind(self, p) -> str:
        """``driver``, ``trials`` (Tune's trial processes), ``folds`` (CV and refit tasks),
        ``data`` (Ray Data's tasks and actors, the read workers' warm-up, other tasks),
        ``idle`` (Ray workers seen idle only) or ``ray`` (raylet, GCS, dashboard, agents,
        workers not yet titled)."""
        if p.pid == self.pid:
            return "driver"
        title = ray_title(p)
        if title is None:
            return "ray"
        if title in ("ImplicitFunc", "run_trial"):
            return "trials"
        if title == "fit_predict" or "refit" in title.lower():
            return "folds"
        return "idle" if title == "IDLE" else "data"

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds by :meth:`cpu_kind` over the run (processes seen by the sampler)."""
        return {k: v["cpu_s"] for k, v in self.cpu.totals().items()}

    def _run(self) -> None:
        import psutil

        last_uss = 0.0
        while not self._stop.wait(self.every):
            self.cpu.sample()
            uss = time.monotonic() - last_uss >= self.uss_every
            last_uss = time.monotonic() if uss else last_uss
            for p in psutil.process_iter():
                kind = self._kind(p)
                if kind is None:
                    continue
                try:
                    m = p.memory_full_info() if uss else p.memory_info()
                except Exception:  # noqa: BLE001 - gone, or not ours to read
                    continue
                peak = self.peaks.setdefault(kind, {"rss": 0, "uss": 0, "private": 0,
                                                    "processes": set()})
                peak["rss"] = max(peak["rss"], int(m.rss))
                # resident less file-backed and shared pages (shared libraries, Ray's
                # object store): the heap, arrays and tensors the process holds itself
                peak["private"] = max(peak["private"], int(m.rss - getattr(m, "shared", 0)))
                peak["uss"] = max(peak["uss"], int(getattr(m, "uss", 0)))
                peak["processes"].add(p.pid)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=10)
        return {k: {"rss_mb": v["rss"] / 2**20, "uss_mb": v["uss"] / 2**20,
                    "private_mb": v["private"] / 2**20,
                    "processes": len(v["processes"])} for k, v in self.peaks.items()}


def _spilled_bytes(since: float) -> int:
    """Bytes Ray spilled in the local sessions started after ``since``
    (:func:`automl.cluster.spilled_bytes` of each)."""
    from automl.cluster import spilled_bytes

    return sum(spilled_bytes(str(s)) for s in Path("/tmp/ray").glob("session_2*")
               if s.stat().st_mtime >= since)


def _one(name: str, path: Path, streaming: bool, work: Path, trials: int, epochs: int,
         store_mb: int, slots: int = 2) -> dict:
    """One ``automl search`` run of ``slots`` concurrent trials (``resources.num_cpus``
    one more: the CPU streaming keeps back for Ray Data), sampled; its figures."""
    spec = work / f"{name}.yaml"
    out = work / "runs"
    spec.write_text(SPEC.format(name=name, path=path, streaming=str(streaming).lower(),
                                trials=trials, epochs=epochs, store=store_mb, out=out,
                                slots=slots, cpus=slots + 1))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "automl", "search", str(spec),
                             "--dashboard-port", "0"], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = Sampler(proc.pid)
    try:
        text, _ = proc.communicate(timeout=3600)
    finally:
        peaks = sampler.stop()
    wall = time.time() - t0
    run_dir = out / name
    rec: dict = {"name": name, "streaming": streaming, "rc": proc.returncode, "wall_s": wall,
                 "memory": peaks, "cpu_s": sampler.cpu_by_kind(),
                 "spilled_bytes": _spilled_bytes(t0),  # (summary's below)
                 "oom_kills": len(re.findall(r"OutOfMemoryError|killed due to memory|"
                                              r"memory pressure", text))}
    if proc.returncode != 0:
        rec["tail"] = text[-2000:]
        return rec
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()
            if line.strip()]
    firsts = [r["first_batch_s"] for r in rows if r.get("epoch") == 1 and "first_batch_s" in r]
    setups = [r["setup_s"] for r in rows if r.get("epoch") == 1 and "setup_s" in r]
    n_train = summary["data"]["split"]["train"]
    rates = [n_train / r["train_time_s"] for r in rows
             if r.get("train_time_s") and "first_batch_s" in r]
    later = [n_train / r["train_time_s"] for r in rows
             if r.get("train_time_s") and "first_batch_s" in r and r.get("epoch", 1) > 1]
    waits = [r["data_wait_s"] / r["train_time_s"] for r in rows
             if r.get("train_time_s") and "data_wait_s" in r]
    cv = json.loads((run_dir / "cv.json").read_text())
    if "spilled_bytes" in summary["data"]:  # the run's own figure (streaming runs)
        rec["spilled_bytes"] = max(rec["spilled_bytes"], summary["data"]["spilled_bytes"])
    rec.update({
        "data": summary["data"], "trials": summary["trials"],
        "first_batch_s": float(np.median(firsts)) if firsts else None,
        "setup_s": float(np.median(setups)) if setups else None,
        "rows_per_s": float(np.median(rates)) if rates else None,
        "rows_per_s_later": float(np.median(later)) if later else None,
        "data_wait_share": float(np.median(waits)) if waits else None,
        "winner": summary["winner"]["trial_id"],
        "winner_config": summary["winner"]["config"],
        "cv_winner": cv.get("winner"),
        "test_accuracy": summary["test"].get("accuracy"),
        "console_data_lines": [ln for ln in text.splitlines() if ln.startswith("data ")],
    })
    return rec


def _mb(rec: dict, kinds: tuple[str, ...]) -> float:
    return max((v["rss_mb"] for k, v in rec["memory"].items() if k in kinds), default=0.0)


def _trial_mb(rec: dict, key: str = "rss_mb") -> float:
    return max((v.get(key, 0.0) for k, v in rec["memory"].items()
                if k != "driver" and ("ImplicitFunc" in k or "run_trial" in k
                                      or "fit_predict" in k)), default=0.0)


def run(quick: bool, ctx: dict) -> Result:
    import psutil

    res = Result(NAME, TITLE)
    n1 = 1200 if quick else int(ctx.get("stream_rows") or 50_000)
    size = 16 if quick else 32
    trials, epochs = 2, (1 if quick else 3)
    ram = psutil.virtual_memory().total
    with tempfile.TemporaryDirectory(prefix="automl-streaming-") as d:
        work = Path(d)
        t0 = time.time()
        sets = {scale: write_set(work / f"x{scale}", n1 * scale, size) for scale in (1, 4)}
        gen_s = time.time() - t0
        decoded = {s: n1 * s * 3 * size * size * 4 for s in (1, 4)}
        # the in-memory path holds the decoded set about 4 times at once: the driver's
        # array, its object-store copy, and each of 2 trials' tensors
        fits = {s: 4 * decoded[s] < 0.6 * ram and decoded[s] / 0.6 < 768 * 2**20 * 8
                for s in (1, 4)}
        store = int(max(512, 1.5 * decoded[1] / 2**20))
        runs = [("x1_in_memory", 1, False), ("x1_streaming", 1, True), ("x4_streaming", 4, True)]
        if fits[4]:
            runs.append(("x4_in_memory", 4, False))
        recs = {name: _one(name, sets[scale], streaming, work, trials, epochs, store)
                for name, scale, streaming in runs}
        if not quick:  # one trial at a time: the CPU kept back for Ray Data is a real core
            recs.update({name: _one(name, sets[1], streaming, work, trials, epochs, store, 1)
                         for name, streaming in ONE_SLOT})
    res.settings = {"images": {"1x": n1, "4x": 4 * n1}, "shape": [3, size, size],
                    "decoded_float32_mb": {f"{s}x": decoded[s] / 2**20 for s in (1, 4)},
                    "trials": trials, "epochs": epochs, "concurrent_trials": 2,
                    "one_slot_runs": [n for n, _ in ONE_SLOT] if not quick else [],
                    "memory_per_worker_mb": 768, "object_store_mb": store,
                    "model": "resnet depth 1, width 8, 2 stages; batch 256",
                    "write_s": round(gen_s, 1)}
    rows = []
    for name, rec in recs.items():
        ok = rec["rc"] == 0
        rows.append([name, "yes" if ok else f"exit {rec['rc']}", round(rec["wall_s"]),
                     round(_mb(rec, ("driver",))), round(_trial_mb(rec)),
                     round(_trial_mb(rec, "uss_mb")), round(_trial_mb(rec, "private_mb")),
                     rec["spilled_bytes"] // 2**20, rec["oom_kills"],
                     rec.get("trials", {}).get("failed", "-"),
                     "-" if rec.get("setup_s") is None else f"{rec['setup_s']:.2f}",
                     "-" if rec.get("first_batch_s") is None else f"{rec['first_batch_s']:.2f}",
                     "-" if rec.get("rows_per_s") is None else round(rec["rows_per_s"]),
                     "-" if rec.get("rows_per_s_later") is None
                     else round(rec["rows_per_s_later"]),
                     "-" if rec.get("data_wait_share") is None
                     else f"{rec['data_wait_share']:.0%}",
                     rec.get("winner", "-")])
    res.tables.append(Table(
        "Each run: `automl search` with 2 concurrent trials, `_1slot` runs one at a time "
        "(peak memory in MB; trial processes: Tune's trials and the CV/refit tasks)",
        ["run", "finished", "wall s", "driver RSS", "trial RSS", "trial USS", "trial private",
         "spilled MB",
         "OOM kills", "failed trials", "trial setup s", "first batch s", "rows/s",
         "rows/s after epoch 1",
         "waiting for data",
         "CV winner"], rows))
    kinds = ("driver", "trials", "folds", "data", "idle", "ray")
    res.tables.append(Table(
        "CPU seconds of each run by process (user + system, sampled twice a second: a "
        "process's last half second before it exits is missed)",
        ["run", *kinds, "all"],
        [[name, *(rec.get("cpu_s", {}).get(k, 0.0) for k in kinds),
          round(sum(rec.get("cpu_s", {}).values()), 1)] for name, rec in recs.items()]))
    s1, s4, m1 = recs["x1_streaming"], recs["x4_streaming"], recs["x1_in_memory"]
    if all(r["rc"] == 0 for r in (s1, s4, m1)):
        for label, kinds in (("driver", ("driver",)),):
            g = _mb(s4, kinds) / max(_mb(s1, kinds), 1e-9) - 1
            res.goals.append(Goal(f"streaming: peak {label} memory grows at most 20% from 1x "
                                  "to 4x", f"{_mb(s1, kinds):.0f} -> {_mb(s4, kinds):.0f} MB "
                                  f"({g:+.0%})", g <= 0.2))
        g = _trial_mb(s4) / max(_trial_mb(s1), 1e-9) - 1
        res.goals.append(Goal("streaming: peak trial-process memory grows at most 20% from "
                              "1x to 4x", f"{_trial_mb(s1):.0f} -> {_trial_mb(s4):.0f} MB "
                              f"({g:+.0%})", g <= 0.2))
        p1, p4 = _trial_mb(s1, "private_mb"), _trial_mb(s4, "private_mb")
        res.notes.append(
            f"Trial processes' private memory (RSS less shared and file-backed pages), "
            f"streaming 1x -> 4x: {p1:.0f} -> {p4:.0f} MB ({p4 / max(p1, 1e-9) - 1:+.0%}). "
            "The rest of a trial's RSS is shared libraries and the pages of Ray's object "
            "store it mapped while reading: the store is one node-wide area of "
            "`object_store_mb`, and a process keeps each store page it read in its RSS "
            "after the block is freed (docs/data.md), so that part grows with how much of "
            "the store a process has read through, up to the store's size, not with the "
            "data set.")
        ratio = s1["rows_per_s"] / m1["rows_per_s"]
        if s1.get("rows_per_s_later") and m1.get("rows_per_s_later"):
            res.notes.append(
                "After epoch 1 (the stream's first Ray Data execution, its workers started): "
                f"streaming {s1['rows_per_s_later']:.0f} vs in memory "
                f"{m1['rows_per_s_later']:.0f} rows/s at 1x "
                f"({s1['rows_per_s_later'] / m1['rows_per_s_later']:.2f}x); the goal's "
                "figure is the median over every epoch.")
        res.goals.append(Goal("streaming ingest throughput >= 0.8x in-memory at 1x (same "
                              "model and epochs)", f"{s1['rows_per_s']:.0f} vs "
                              f"{m1['rows_per_s']:.0f} rows/s ({ratio:.2f}x)", ratio >= 0.8))
        s1o, m1o = (recs.get(name, {}) for name, _ in ONE_SLOT)
        cores = os.cpu_count() or 1
        if s1o.get("rows_per_s") and m1o.get("rows_per_s"):
            res.notes.append(
                f"One trial at a time (`_1slot`: `resources.num_cpus` 2 on this machine's "
                f"{cores} cores, so the CPU streaming keeps back for Ray Data is a real "
                f"core): streaming {s1o['rows_per_s']:.0f} vs in memory "
                f"{m1o['rows_per_s']:.0f} rows/s at 1x "
                f"({s1o['rows_per_s'] / m1o['rows_per_s']:.2f}x)."
                + (f" The goal's 2-trial runs declare 3 CPUs on {cores} cores: there the "
                   "kept-back CPU does not exist, and every CPU-second of Ray Data's comes "
                   "out of a trial's training." if cores < 3 else ""))
        res.goals.append(Goal("at 1x both paths pick the same CV winner",
                              f"trial {s1['winner']} (lr {s1['winner_config'].get('lr'):.4g}) "
                              f"vs trial {m1['winner']} "
                              f"(lr {m1['winner_config'].get('lr'):.4g})",
                              s1["winner_config"] == m1["winner_config"]))
    bad = sum((r.get("trials", {}).get("failed", 0) or 0) + r["oom_kills"]
              + (r["rc"] != 0) for r in recs.values())
    res.goals.append(Goal("no out-of-memory kill, failed trial or failed run", f"{bad}",
                          bad == 0))
    if not fits[4]:
        res.notes.append(f"4x in memory was not run: {4 * decoded[4] / 2**30:.1f} GiB "
                         f"(4 copies of {decoded[4] / 2**30:.2f} GiB decoded) would not fit "
                         f"this machine's {ram / 2**30:.0f} GiB, or one trial's copy its "
                         "768 MB worker memory.")
    res.notes.append("Memory is each process's peak resident set (RSS, which counts the "
                     "object-store pages a process maps) and its unique set (USS); the "
                     "driver is the `automl search` process. Throughput is training rows "
                     "per second of training step (the median over trial epochs); first "
                     "batch is the seconds until an epoch's first batch, at epoch 1; trial setup "
                     "the seconds from a trial's start to its first epoch (model, costs).")
    res.data = {k: {kk: vv for kk, vv in v.items() if kk != "tail"} for k, v in recs.items()}
    for k, v in recs.items():
        if v["rc"] != 0:
            res.notes.append(f"{k} failed (exit {v['rc']}): {v.get('tail', '')[-600:]}")
    return res


def write_set(path: Path, n: int, size: int) -> Path:
    """The synthetic set of ``n`` images (written once per folder)."""
    from benchmarks._images import write_images

    if (path / "_done").exists():
        return path
    write_images(path, n, size=size, classes=10, seed=0, shards=max(2, n // 12_500),
                 row_group=1024, noise=200, spread=8)
    (path / "_done").write_text("ok")
    return path
