"""Data-parallel trials: the Tune trial runs a Ray Train ``TorchTrainer`` (Train V2:
the trainer lives inside the Tune function; ``TuneReportCallback`` forwards rank 0's
reports). Each worker runs the same ``automl.train.fit`` loop on its own shard.
"""

from __future__ import annotations

import time
from typing import Any

from automl.models import load_matching_weights
from automl.models.cost import model_costs
from automl.search._adapters import TRIAL_KEY
from automl.search._checkpoints import TrialCheckpoints
from automl.search._trial import checkpoint_epochs, guard_of
from automl.space import TrialConfig
from automl.spec import Experiment
from automl.train import Shard, TrainState, fit, set_threads, to_tensors, unwrap


def worker_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``: one data-parallel rank of a trial.

    Every rank reports once per epoch (so the group stays in step); rank 0 saves the
    trial's checkpoint (:class:`~automl.search._checkpoints.TrialCheckpoints`, keyed by
    the trial's number) first. After a worker failure Train restarts the group, and a
    resumed sweep restarts the trial: every rank then continues from that checkpoint
    (reporting its epoch again, as in-process trials do), not from epoch 0.
    """
    import ray.train
    import ray.train.torch

    t_start = time.perf_counter()
    exp: Experiment = loop_config["exp"]
    ctx = ray.train.get_context()
    device = ray.train.torch.get_device()
    shard = Shard(ctx.get_world_rank(), ctx.get_world_size(), str(device),
                  exp.resources.precision)
    threads = set_threads(exp.resources.cpus_per_worker)
    data = ray.get(loop_config["data"].ref)
    train = tuple(t.to(device) for t in to_tensors(data.X_train, data.y_train))
    val = tuple(t.to(device) for t in to_tensors(data.X_val, data.y_val))
    cfg = TrialConfig.from_flat(loop_config["params"], exp, seed=exp.search.seed)
    state = TrainState.create(
        cfg, data.input_shape, data.num_classes, len(train[1]),
        wrap=lambda m: ray.train.torch.prepare_model(m, parallel_strategy=exp.resources.strategy),
    )
    load_matching_weights(unwrap(state.model), cfg.arch, data.init)  # same on every rank
    number = loop_config["params"][TRIAL_KEY]
    store = TrialCheckpoints(loop_config["storage"])
    resumed = store.latest(number, str(device))
    if resumed is not None:
        state.restore(resumed)
    # where the ranks run (reported, so a multi-node placement is visible in the results)
    import torch.distributed as dist

    nodes: list = [None] * shard.world
    dist.all_gather_object(nodes, ray.get_runtime_context().get_node_id())
    setup_s = time.perf_counter() - t_start

    place = {"world_size": shard.world, "worker_nodes": len(set(nodes))}
    if exp.resources.strategy == "ddp":  # the module each rank holds whole (not FSDP's shards)
        place.update(model_costs(unwrap(state.model), train[0][:1], threads=threads))
    if resumed is not None:  # where the trial stands, judged again (the same answer)
        ray.train.report({**resumed["metrics"], **place, "setup_s": setup_s,
                          "restored_from_epoch": state.epoch})
    keep = checkpoint_epochs(exp, cfg.epochs)

    def report(st: TrainState, metrics: dict) -> None:
        metrics = {**metrics, **place, "setup_s": setup_s if st.epoch == 1 else 0.0}
        if shard.rank == 0 and st.epoch in keep:
            store.save(number, st.checkpoint(metrics))
        ray.train.report(metrics)

    fit(state, train, val, on_epoch=report, shard=shard, guard=guard_of(exp))


def run_distributed_trial(params: dict, data_holder: Any, exp: Experiment, storage: str) -> None:
    """Run one trial as a ``TorchTrainer`` with ``resources.workers_per_trial`` workers.

    Rank 0 keeps the trial's checkpoint under ``storage``; a killed worker makes Train
    restart the group, which continues from it, up to ``resources.max_failures`` times
    (Train's ``FailureConfig``). Train's own run folder is ``<storage>/train/trial_<n>_<Tune
    id>``: each attempt of a resumed sweep starts a Train run of its own.
    """
    from ray import tune
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    res = exp.resources
    from automl.cluster import trial_bundles

    worker = trial_bundles(res)[1]  # CPU, memory (and GPU) of one worker
    trial_id = tune.get_context().get_trial_id()
    trainer = TorchTrainer(
        train_loop_per_worker=worker_loop,
        train_loop_config={"params": params, "exp": exp, "data": data_holder,
                           "storage": storage},
        scaling_config=ScalingConfig(
            num_workers=res.workers_per_trial, use_gpu=bool(res.gpus_per_worker),
            resources_per_worker=worker, placement_strategy="PACK",
        ),
        run_config=RunConfig(
            name=f"trial_{params[TRIAL_KEY]}_{trial_id}",
            storage_path=storage.rstrip("/") + "/train",
            failure_config=FailureConfig(max_failures=res.max_failures),
            callbacks=[TuneReportCallback()],
        ),
    )
    trainer.fit()
