"""How stable is a trial's ``latency_ms`` on this machine? The cost metric of
:func:`automl.models.cost.model_costs` (median batch-1 forward time after warm-up, CPU,
1 thread, the product's default repeats and warm-up) is measured in N fresh calls on
one digits ResNet, and the spread of those N figures is reported: median, IQR, min and
max, each as % of the median. Two more models of another size show whether the figure
orders models of different cost reliably (the share of paired calls in which the larger
model measured slower).

``python -m benchmarks --only latency_stability`` (N = 200; quick: 20). The figures move
with the machine's load: the record gives the load average at start and end.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from benchmarks._common import Result, Table

#: (label, arch) of the digits models measured; the first is "the one model"
MODELS = (
    ("resnet depth 2 width 16", {"family": "resnet", "depth": 2, "width": 16}),
    ("resnet depth 1 width 8", {"family": "resnet", "depth": 1, "width": 8}),
    ("resnet depth 3 width 32", {"family": "resnet", "depth": 3, "width": 32}),
)


def stability(samples) -> dict[str, float]:
    """Median, IQR and min/max (ms and % of the median) of a list of latency figures."""
    s = np.asarray(samples, dtype=float)
    med = float(np.median(s))
    q1, q3 = (float(v) for v in np.percentile(s, [25, 75]))
    return {"n": len(s), "median_ms": med, "iqr_ms": q3 - q1, "iqr_pct": 100 * (q3 - q1) / med,
            "min_pct": 100 * float(s.min()) / med, "max_pct": 100 * float(s.max()) / med,
            "cv_pct": 100 * float(s.std(ddof=1)) / med if len(s) > 1 else 0.0}


def measure(n: int, threads: int = 1) -> dict[str, list[float]]:
    """``n`` rounds; each round measures every model of :data:`MODELS` once (fresh calls
    of ``model_costs``, interleaved so that load changes hit every model alike)."""
    from automl.models import build_model
    from automl.models.cost import model_costs

    torch.manual_seed(0)
    x = torch.rand(1, 1, 8, 8)
    models = [(label, build_model(arch, (1, 8, 8), 10)) for label, arch in MODELS]
    out: dict[str, list[float]] = {label: [] for label, _ in models}
    for _ in range(n):
        for label, model in models:
            out[label].append(model_costs(model, x, threads=threads)["latency_ms"])
    return out


def run(quick: bool, ctx: dict) -> Result:
    n = 20 if quick else 200
    t0 = time.perf_counter()
    samples = measure(n)
    wall = time.perf_counter() - t0
    rows, stats = [], {}
    for label, s in samples.items():
        st = stability(s)
        stats[label] = st
        rows.append([label, st["n"], st["median_ms"], st["iqr_ms"], st["iqr_pct"], st["min_pct"],
                     st["max_pct"], st["cv_pct"]])
    labels = list(samples)
    small, mid, big = (np.asarray(samples[k]) for k in (labels[1], labels[0], labels[2]))
    order_rows = [[f"{labels[1]} < {labels[0]}", float(np.mean(small < mid))],
                  [f"{labels[0]} < {labels[2]}", float(np.mean(mid < big))]]
    first = stats[labels[0]]
    return Result(
        "latency_stability", "Stability of the batch-1 CPU latency figure (issue 15)",
        settings={"calls_per_model": n, "threads": 1, "batch": 1, "input": "(1, 1, 8, 8)",
                  "model_costs": "defaults: repeats 20, warmup 5", "wall_s": round(wall, 1)},
        tables=[Table("latency_ms of N fresh model_costs calls (1 thread)",
                      ["model", "N", "median ms", "IQR ms", "IQR % of median",
                       "min % of median", "max % of median", "CV %"], rows),
                Table("Do the figures order models by cost? (share of paired rounds)",
                      ["pair (smaller first)", "share measured faster"], order_rows)],
        notes=[f"One model ({labels[0]}): median {first['median_ms']:.4g} ms, IQR "
               f"{first['iqr_pct']:.1f} % of the median, min {first['min_pct']:.0f} % and "
               f"max {first['max_pct']:.0f} % of it, over {n} fresh calls.",
               "Each call is model_costs(model, x, threads=1): 5 warm-up and 20 timed "
               "forwards, median; the spread is across calls, i.e. what two trials with the "
               "same model would see. The machine is shared (see the load averages)."],
        data={"samples_ms": samples, "stats": stats})
