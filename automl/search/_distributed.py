"""Data-parallel trials: the Tune trial runs a Ray Train ``TorchTrainer`` (Train V2:
the trainer lives inside the Tune function; ``TuneReportCallback`` forwards rank 0's
reports). Each worker runs the same ``automl.train.fit`` loop on its own shard.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from automl.space import TrialConfig
from automl.spec import Experiment
from automl.train import Shard, TrainState, fit, set_threads, to_tensors


def worker_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``: one data-parallel rank of a trial.

    Every rank reports once per epoch (so the group stays in step); rank 0 attaches
    the checkpoint. After a worker failure, Train restarts the group and each rank
    resumes from the last checkpoint (``ray.train.get_checkpoint``), not from epoch 0.
    """
    import ray.train
    import ray.train.torch

    t_start = time.perf_counter()
    exp: Experiment = loop_config["exp"]
    ctx = ray.train.get_context()
    device = ray.train.torch.get_device()
    shard = Shard(ctx.get_world_rank(), ctx.get_world_size(), str(device),
                  exp.resources.precision)
    set_threads(exp.resources.cpus_per_worker)
    data = ray.get(loop_config["data"].ref)
    train = tuple(t.to(device) for t in to_tensors(data.X_train, data.y_train))
    val = tuple(t.to(device) for t in to_tensors(data.X_val, data.y_val))
    cfg = TrialConfig.from_flat(loop_config["params"], exp, seed=exp.search.seed)
    state = TrainState.create(
        cfg, data.input_shape, data.num_classes, len(train[1]),
        wrap=lambda m: ray.train.torch.prepare_model(m, parallel_strategy=exp.resources.strategy),
    )
    if getattr(data, "init", None) is not None:  # nightly.transfer, same weights on every rank
        from automl.nightly import init_from_champion
        from automl.train import unwrap

        init_from_champion(unwrap(state.model), cfg.arch, data.init)
    resume = ray.train.get_checkpoint()
    if resume is not None:
        with resume.as_directory() as d:
            state.restore_dir(d, device)
    # where the ranks run (reported, so a multi-node placement is visible in the results)
    import torch.distributed as dist

    nodes: list = [None] * shard.world
    dist.all_gather_object(nodes, ray.get_runtime_context().get_node_id())
    setup_s = time.perf_counter() - t_start

    def report(st: TrainState, metrics: dict) -> None:
        metrics = {**metrics, "setup_s": setup_s, "world_size": shard.world,
                   "worker_nodes": len(set(nodes)), "restored_from_epoch": resume_epoch}
        if shard.rank != 0:
            ray.train.report(metrics)
            return
        with tempfile.TemporaryDirectory() as d:
            st.save_dir(d, metrics)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))

    resume_epoch = state.epoch
    from automl.search._trainable import guard_of

    fit(state, train, val, on_epoch=report, shard=shard, guard=guard_of(exp))


def run_distributed_trial(params: dict, data_holder: Any, exp: Experiment, storage: str) -> None:
    """Run one trial as a ``TorchTrainer`` with ``resources.workers_per_trial`` workers.

    Train's own checkpoints go to ``<storage>/train/trial_<id>``; a killed worker makes
    Train restart the group from the last checkpoint, up to ``resources.max_failures``
    times (Train's ``FailureConfig``).
    """
    from ray import tune
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    res = exp.resources
    from automl.search._resources import trial_bundles

    worker = trial_bundles(res)[1]  # CPU, memory (and GPU) of one worker
    trial_id = tune.get_context().get_trial_id()
    trainer = TorchTrainer(
        train_loop_per_worker=worker_loop,
        train_loop_config={"params": params, "exp": exp, "data": data_holder},
        scaling_config=ScalingConfig(
            num_workers=res.workers_per_trial, use_gpu=bool(res.gpus_per_worker),
            resources_per_worker=worker, placement_strategy="PACK",
        ),
        run_config=RunConfig(
            name=f"trial_{trial_id}",
            storage_path=storage.rstrip("/") + "/train",
            failure_config=FailureConfig(max_failures=res.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()
