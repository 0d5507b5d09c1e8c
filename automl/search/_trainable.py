"""The Tune function trial: train one configuration, report once per epoch.

Data are put in the object store once per sweep and read zero-copy on each node,
and the trial process is reused between trials (``reuse_actors``), so a trial's
start-up is building its model, not importing torch or loading data.
"""

from __future__ import annotations

import time

import ray
import torch
from ray import tune

from automl.models import load_matching_weights
from automl.models.cost import model_costs
from automl.search._checkpoints import TrialCheckpoints
from automl.search._trial import TRIAL_KEY, DataRef, TrialData, checkpoint_epochs, guard_of
from automl.space import TrialConfig
from automl.spec import COST_METRICS, Experiment
from automl.train import Shard, TrainState, TrialDiverged, example_input, fit, set_threads, to_tensors

COST_KEYS = tuple(COST_METRICS)
__all__ = ["DataRef", "TrialData", "checkpoint_epochs", "guard_of", "run_trial"]


def run_trial(config: dict, *, data: DataRef, exp: Experiment, storage: str) -> None:
    """Ray Tune function trainable for one configuration (trial ``config[TRIAL_KEY]``).

    Reports ``epoch``, ``train_loss``, ``val_loss``, ``val_accuracy``, ``val_f1``,
    ``train_time_s``, ``eval_time_s`` and ``setup_s`` after every epoch, and with each the
    model's costs, measured once before training (:func:`automl.models.cost.model_costs`:
    ``params``, ``macs``, ``model_bytes``, ``latency_ms`` at batch 1 on the trial's device
    with its own CPU threads). At the epochs of
    :func:`checkpoint_epochs` it first saves the trial's checkpoint
    (:class:`~automl.search._checkpoints.TrialCheckpoints` under ``storage``). A trial that
    finds a checkpoint of its own (Tune retrying it, or a resumed sweep) restores it and
    reports that epoch again (``restored_from_epoch``), so the scheduler sees the trial
    where it stands, then trains on. Two or more workers: the trial runs a Ray Train
    worker group (:func:`run_distributed_trial`) with the same loop.

    Raises:
        TrialDiverged: the divergence guard tripped, now or in an earlier attempt.
    """
    if exp.resources.distributed:
        from automl.search._distributed import run_distributed_trial

        run_distributed_trial(config, data, exp, storage)
        return
    number = config[TRIAL_KEY]
    store = TrialCheckpoints(storage)
    # A diverged trial stays diverged: when Tune retries it (resources.max_failures, meant
    # for killed processes), fail again at once instead of re-training.
    marked = store.diverged(number)
    if marked is not None:
        raise TrialDiverged(*marked)
    t_start = time.perf_counter()
    threads = set_threads(exp.resources.cpus_per_worker)
    device = "cuda" if exp.resources.gpus_per_worker and torch.cuda.is_available() else "cpu"
    shard = Shard(device=device, precision=exp.resources.precision)
    arrays = ray.get(data.ref)
    train = tuple(t.to(device) for t in to_tensors(arrays.X_train, arrays.y_train))
    val = tuple(t.to(device) for t in to_tensors(arrays.X_val, arrays.y_val))
    cfg = TrialConfig.from_flat(config, exp, seed=exp.search.seed)
    state = TrainState.create(cfg, arrays.input_shape, arrays.num_classes, len(train[1]),
                              wrap=lambda m: m.to(device))
    load_matching_weights(state.model, cfg.arch, arrays.init)
    resumed = store.latest(number, device)
    if resumed is not None:
        state.restore(resumed)
    saved = resumed["metrics"] if resumed is not None else {}  # measured before the kill
    costs = ({k: saved[k] for k in COST_KEYS if k in saved} if "latency_ms" in saved
             else model_costs(state.model, example_input(train[0]), threads=threads))
    setup_s = time.perf_counter() - t_start
    keep = checkpoint_epochs(exp, cfg.epochs)
    if resumed is not None:  # where the trial stands, judged again (the same answer)
        tune.report({**resumed["metrics"], "setup_s": setup_s,
                     "restored_from_epoch": state.epoch})

    def report(st: TrainState, metrics: dict) -> None:
        metrics = {**metrics, **costs, "setup_s": setup_s if st.epoch == 1 else 0.0}
        if st.epoch in keep:
            store.save(number, st.checkpoint(metrics))
        tune.report(metrics)

    try:
        fit(state, train, val, on_epoch=report, shard=shard, guard=guard_of(exp))
    except TrialDiverged as e:
        store.mark_diverged(number, e.epoch, e.reason)
        raise
