"""Data-parallel trials: the Tune trial runs a Ray Train ``TorchTrainer`` (Train V2:
the trainer lives inside the Tune function; ``TuneReportCallback`` forwards rank 0's
reports). Each worker runs the same ``automl.train.fit`` loop on its own shard, its model
wrapped by :func:`automl.parallel.wrap` (DDP, or FSDP2 on CPUs and GPUs alike).

A trial's start-up is reported with its first epoch, in seconds (wall clock, rank 0):

* ``start_trial_s``: the trial function entered -> its imports done (Ray Train's);
* ``start_train_s``: -> this worker's process created (``TorchTrainer``, Train's
  controller actor, the placement group, the worker actors);
* ``start_worker_s``: -> the worker loop entered (the worker's imports, Train's worker
  set-up, the ``torch.distributed`` process group);
* ``setup_s``: -> the loop's set-up done, of which ``setup_imports_s`` (the modules the
  loop needs that the worker had not imported), ``setup_data_s`` (the arrays from the
  object store into tensors), ``setup_model_s`` (build, weights, wrap: DDP broadcasts
  rank 0's weights, FSDP shards them), ``setup_resume_s`` (the trial's checkpoint looked
  up), ``setup_place_s`` (the ranks' nodes gathered) and ``setup_costs_s`` (the model's
  costs measured).
"""

from __future__ import annotations

import os
import time
from typing import Any

from automl.search._trial import TRIAL_KEY, checkpoint_epochs, guard_of
from automl.spec import COST_METRICS, Experiment


def _process_started() -> float:
    """When this process was created (seconds since the epoch)."""
    import psutil

    return psutil.Process().create_time()


class _Laps:
    """Seconds spent in consecutive named phases (``perf_counter``)."""

    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.laps: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self.t
        self.t = now


def worker_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``: one data-parallel rank of a trial.

    Every rank reports once per epoch (so the group stays in step); rank 0 saves the
    trial's checkpoint (:class:`~automl.search._checkpoints.TrialCheckpoints`, keyed by
    the trial's number) first: a plain model's full state dict, whatever the strategy
    (FSDP's shards are gathered, every rank taking part). After a worker failure Train
    restarts the group, and a resumed sweep restarts the trial: every rank then continues
    from that checkpoint (reporting its epoch again, as in-process trials do), not from
    epoch 0.
    """
    t_loop = time.time()
    laps = _Laps()
    import ray.train
    import torch.distributed as dist

    from automl.models import load_matching_weights
    from automl.parallel import wrap
    from automl.search._checkpoints import TrialCheckpoints
    from automl.space import TrialConfig
    from automl.train import Shard, TrainState, example_input, fit, set_threads, to_tensors, unwrap

    exp: Experiment = loop_config["exp"]
    res = exp.resources
    ctx = ray.train.get_context()
    import ray.train.torch

    device = ray.train.torch.get_device()
    shard = Shard(ctx.get_world_rank(), ctx.get_world_size(), str(device), res.precision)
    threads = set_threads(res.cpus_per_worker)
    laps("imports")
    data = ray.get(loop_config["data"].ref)
    train = tuple(t.to(device) for t in to_tensors(data.X_train, data.y_train))
    val = tuple(t.to(device) for t in to_tensors(data.X_val, data.y_val))
    laps("data")
    cfg = TrialConfig.from_flat(loop_config["params"], exp, seed=exp.search.seed)

    def place(model):  # the same starting weights on every rank, then wrapped
        load_matching_weights(model, cfg.arch, data.init)
        return wrap(model, res.strategy, device)

    state = TrainState.create(cfg, data.input_shape, data.num_classes, len(train[1]),
                              wrap=place)
    laps("model")
    number = loop_config["params"][TRIAL_KEY]
    store = TrialCheckpoints(loop_config["storage"])
    resumed = store.latest(number, str(device))
    if resumed is not None:
        state.restore(resumed)
    laps("resume")
    # where the ranks run (reported, so a multi-node placement is visible in the results)
    nodes: list = [None] * shard.world
    dist.all_gather_object(nodes, ray.get_runtime_context().get_node_id())
    info = {"world_size": shard.world, "worker_nodes": len(set(nodes))}
    laps("place")
    saved = resumed["metrics"] if resumed is not None else {}
    if res.strategy == "ddp":  # the module each rank holds whole (not FSDP's shards)
        if "latency_ms" in saved:  # measured before the restart
            info.update({k: saved[k] for k in COST_METRICS if k in saved})
        else:
            from automl.models.cost import model_costs

            info.update(model_costs(unwrap(state.model), example_input(train[0]),
                                          threads=threads))
    laps("costs")
    setup_s = sum(laps.laps.values())
    start = {"start_trial_s": loop_config["t_imported"] - loop_config["t_trial"],
             "start_train_s": _process_started() - loop_config["t_imported"],
             "start_worker_s": t_loop - _process_started(), "setup_s": setup_s,
             **{f"setup_{k}_s": v for k, v in laps.laps.items()}}
    if resumed is not None:  # where the trial stands, judged again (the same answer)
        ray.train.report({**saved, **info, **start, "restored_from_epoch": state.epoch})
    keep = checkpoint_epochs(exp, cfg.epochs)
    sharded = res.strategy == "fsdp"

    def report(st: TrainState, metrics: dict) -> None:
        metrics = {**metrics, **info, **(start if st.epoch == 1 else {"setup_s": 0.0})}
        if st.epoch in keep and (shard.rank == 0 or sharded):
            ckpt = st.checkpoint(metrics)  # FSDP: every rank gathers, rank 0 holds it
            if shard.rank == 0:
                store.save(number, ckpt)
        ray.train.report(metrics)

    fit(state, train, val, on_epoch=report, shard=shard, guard=guard_of(exp))


def run_distributed_trial(params: dict, data_holder: Any, exp: Experiment, storage: str) -> None:
    """Run one trial as a ``TorchTrainer`` with ``resources.workers_per_trial`` workers.

    Rank 0 keeps the trial's checkpoint under ``storage``; a killed worker makes Train
    restart the group, which continues from it, up to ``resources.max_failures`` times
    (Train's ``FailureConfig``). Train's own run folder is ``<storage>/train/trial_<n>_<Tune
    id>``: each attempt of a resumed sweep starts a Train run of its own.

    The trial's own Tune process is retried by Tune (``resources.max_failures``) when it
    dies, e.g. with its node, and continues from the same checkpoint.

    The worker group's start is bounded: a group whose placement group is not ready
    within ``resources.start_timeout_s`` in all (over Train's ``max_failures`` retries of a
    failed start and Tune's of the trial, ``RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S`` each)
    fails the trial.

    Raises:
        ResourceError: the workers got no resources within the bound (one line naming
            what they wait for and what the cluster has free).
    """
    t_trial = time.time()
    from ray import tune
    from ray.train import ControllerError, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    from automl.cluster import TRAIN_ENV, trial_bundles

    t_imported = time.time()

    res = exp.resources
    worker = trial_bundles(res)[1]  # CPU, memory (and GPU) of one worker
    # Train passes these on from this process to its controller and workers
    for key, value in TRAIN_ENV.items():
        os.environ.setdefault(key, value)
    # the bound holds over Train's retries of the start and Tune's retries of the trial
    attempts = (res.max_failures + 1) * (1 if exp.search.fail_fast else res.max_failures + 1)
    os.environ["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] = f"{res.start_timeout_s / attempts:g}"
    trial_id = tune.get_context().get_trial_id()
    trainer = TorchTrainer(
        train_loop_per_worker=worker_loop,
        train_loop_config={"params": params, "exp": exp, "data": data_holder,
                           "storage": storage, "t_trial": t_trial, "t_imported": t_imported},
        scaling_config=ScalingConfig(
            num_workers=res.workers_per_trial, use_gpu=bool(res.gpus_per_worker),
            resources_per_worker=worker, placement_strategy="PACK",
        ),
        run_config=RunConfig(
            name=f"trial_{params[TRIAL_KEY]}_{trial_id}",
            storage_path=storage.rstrip("/") + "/train",
            # a start that timed out counts against the same budget as a killed worker
            # (Train's default retries it forever: a silent hang)
            failure_config=FailureConfig(max_failures=res.max_failures,
                                         controller_failure_limit=res.max_failures),
            callbacks=[TuneReportCallback()],
        ),
    )
    try:
        trainer.fit()
    except ControllerError as e:
        if type(e.controller_failure).__name__ != "WorkerGroupStartupTimeoutError":
            raise
        raise _starved(params[TRIAL_KEY], res, worker) from None


def _starved(number, res, worker: dict[str, float]):
    """The one-line error of a trial whose workers got no resources in time."""
    import ray

    from automl.cluster._admission import _fmt
    from automl.errors import ResourceError

    free = ray.available_resources()
    total = ray.cluster_resources()
    keys = [k for k in worker if worker[k] > 0]
    return ResourceError(
        f"trial {number}: its {res.workers_per_trial} workers ({_fmt(worker)} each) got no "
        f"placement in {res.start_timeout_s:g}s; free: "
        f"{_fmt({k: free.get(k, 0.0) for k in keys})} of "
        f"{_fmt({k: total.get(k, 0.0) for k in keys})}",
        where="resources",
        fix="another job holds them, or a stopped trial's placement group Ray Train did "
            "not free (ray#54305): free them, or raise resources.start_timeout_s")
