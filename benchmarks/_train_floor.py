"""Ray Train V2's own start-up floor on this machine (issue 42): data-parallel trials run
the way the project runs them (a Tune function trainable of 0.01 CPU that runs a
``TorchTrainer`` with ``TuneReportCallback``, the trial actor reused, Ray Train's settings
from :data:`automl.cluster.TRAIN_ENV`), but with a training loop that holds none of the
project's code:

* ``empty``: the loop reports once;
* ``torch``: the loop imports torch, wraps a ``Linear(8, 2)`` in
  ``DistributedDataParallel`` (gloo), makes an Adam optimizer (torch imports
  ``torch._dynamo`` with it), takes one step and reports: the least any torch DDP loop
  pays.

Started by :mod:`benchmarks._orch_tools` (``automl_sweeps``, a sweep with a ``floor``
key) on its Ray instance; each trial reports the seconds from its trial function's start
to the loop's start (``to_loop_s``) and to the report (``to_report_s``), on one clock
(one machine).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

#: the loops, each with the name the scaling record gives it
KINDS = {"empty": "empty (reports once)", "torch": "torch: DDP of Linear(8, 2), Adam, one step"}


def _loop(config: dict) -> None:
    t_loop = time.time()
    import ray.train

    if config["kind"] == "torch":
        import torch
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(torch.nn.Linear(8, 2))  # Train made the group
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    ray.train.report({"to_loop_s": t_loop - config["t_trial"],
                      "to_report_s": time.time() - config["t_trial"]})


def _trial(config: dict) -> None:
    t_trial = time.time()
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    TorchTrainer(
        _loop, train_loop_config={"kind": config["kind"], "t_trial": t_trial},
        scaling_config=ScalingConfig(num_workers=config["workers"],
                                     resources_per_worker={"CPU": config["cpus"]}),
        run_config=RunConfig(name=f"floor_{config['kind']}_{config['i']}",
                             storage_path=config["storage"],
                             callbacks=[TuneReportCallback()]),
    ).fit()


def run_floor(kind: str, trials: int, tmp: Path, workers: int = 2,
              cpus_per_worker: float = 0.5) -> dict:
    """``trials`` trials of the ``kind`` loop, one at a time, on the connected Ray.

    Returns ``{"trials", "sweep_wall_s", "startup_per_trial_s" (sweep wall / trials: the
    loop takes no time), "to_loop_s", "to_report_s" (medians), "per_trial"}``.

    Raises:
        ValueError: an unknown ``kind``.
        RuntimeError: a trial failed (its error).
    """
    from ray import tune

    from automl.cluster import DRIVER  # importing automl.cluster sets TRAIN_ENV's defaults

    if kind not in KINDS:
        raise ValueError(f"floor kind {kind!r}: one of {', '.join(KINDS)}")
    storage = str(Path(tmp) / f"floor_{kind}")
    tuner = tune.Tuner(
        tune.with_resources(_trial, {k.lower(): v for k, v in DRIVER.items()}),
        param_space={"i": tune.grid_search(list(range(trials))), "kind": kind,
                     "workers": workers, "cpus": cpus_per_worker, "storage": storage},
        tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=True),
        run_config=tune.RunConfig(name="tune", storage_path=storage, verbose=0),
    )
    t0 = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - t0
    per = []
    for r in results:
        if r.error is not None:
            raise RuntimeError(f"floor trial ({kind}) failed: {r.error}")
        per.append({k: round(float(r.metrics[k]), 3) for k in ("to_loop_s", "to_report_s")})
    return {"trials": len(per), "sweep_wall_s": round(wall, 3),
            "startup_per_trial_s": round(wall / max(1, len(per)), 3),
            **{k: round(statistics.median(p[k] for p in per), 3)
               for k in ("to_loop_s", "to_report_s")},
            "per_trial": per}
