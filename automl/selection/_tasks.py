"""The unit of work of cross-validation and the final refit: train one configuration
on some rows, score it on others.

A Ray task runs :func:`fit_predict` (training and predictions only) and the driver adds
the scores (:func:`with_scores`, scikit-learn's metrics): a new worker then imports
neither scikit-learn nor SciPy (about 1 s of its start on a 2-core machine), only torch
and the training code. :func:`fit_and_score` is both in one call, in this process.
"""

from __future__ import annotations

import time

import numpy as np

from automl.data import Dataset


def fit_and_score(data: Dataset, config: dict, train_idx: np.ndarray, eval_idx: np.ndarray,
                  **options) -> dict:
    """Fit preprocessing and a model on rows ``train_idx`` only, then score rows ``eval_idx``:
    :func:`fit_predict` (``options`` are its keyword arguments), then :func:`with_scores`,
    in this process.

    Returns:
        ``scores`` (:func:`classification_scores`), ``loss`` (cross-entropy), ``epochs``,
        ``train_time_s`` (seconds in training steps), ``n_params``, ``n_train``,
        ``n_eval``; with ``keep_model`` also ``checkpoint`` (tensors on the CPU; its
        ``metrics`` are the scores and the loss), ``y_pred`` (list of int),
        ``preprocessor`` (the ``ColumnTransformer`` fitted on ``train_idx``; None for
        image data) and ``environment`` (``automl.determinism.environment``: packages,
        flags, threads, device).
    """
    out = fit_predict(data, config, train_idx, eval_idx, **options)
    return with_scores(out, data.y[eval_idx], data.num_classes,
                       keep_pred=bool(options.get("keep_model")), task=data.task)


def fit_predict(
    data: Dataset,
    config: dict,
    train_idx: np.ndarray,
    eval_idx: np.ndarray,
    *,
    impute=None,
    cpus: float = 1.0,
    gpus: float = 0.0,
    precision: str = "fp32",
    keep_model: bool = False,
) -> dict:
    """Fit preprocessing and a model on rows ``train_idx`` only and predict rows
    ``eval_idx``: what a cross-validation or refit Ray task runs (the driver scores the
    predictions, :func:`with_scores`).

    Args:
        config: a ``TrialConfig.to_dict()``; trains for its full ``epochs``.
        impute: ``SimpleImputer`` strategies (``automl.spec.ImputeSpec``) for tabular data.
        cpus: torch intra-op threads.
        gpus: when > 0 and CUDA is available, trains on the GPU Ray assigned, with
            ``precision`` autocast (``fp32``, ``bf16``, ``fp16``).
        keep_model: also return the checkpoint dict, the fitted preprocessor and the
            environment it trained in.

    Trains under ``automl.determinism.deterministic()``: on the CPU, the same config,
    rows, thread count and package versions give the same weights bit for bit (what
    ``automl reproduce`` checks).

    Returns:
        ``y_pred`` (list: the predicted class (int) of each of ``eval_idx``, or its
        predicted value (float) for regression), ``proba`` (two classes only: the second
        class's probability per row, for ROC AUC and PR AUC), ``loss`` (the task's
        validation loss: cross-entropy, or MSE), ``epochs``, ``train_time_s`` (seconds in training steps),
        ``n_params``, ``n_train``, ``n_eval``; with ``keep_model`` also ``checkpoint``
        (tensors on the CPU; its ``metrics`` hold the loss only until :func:`with_scores`
        adds the scores), ``preprocessor`` and ``environment``.
    """
    import torch

    from automl.data import fit_apply
    from automl.determinism import deterministic, environment
    from automl.models import count_parameters
    from automl.space import TrialConfig
    from automl.task import task_of
    from automl.train import Shard, TrainState, fit, predict, set_threads, to_tensors

    set_threads(cpus)
    device = "cuda" if gpus and torch.cuda.is_available() else "cpu"
    pre, ((X_tr, y_tr), (X_ev, y_ev)) = fit_apply(data, train_idx, eval_idx, impute=impute)
    cfg = TrialConfig.from_dict(config)
    with deterministic():
        state = TrainState.create(cfg, tuple(X_tr.shape[1:]), data.output_size, len(y_tr),
                                  wrap=lambda m: m.to(device))
        t0 = time.perf_counter()
        train = tuple(t.to(device) for t in to_tensors(X_tr, y_tr))
        fit(state, train, None, shard=Shard(device=device, precision=precision))
        train_time = time.perf_counter() - t0
        env = environment(device) if keep_model else None
    task = task_of(cfg.task)
    X_t, y_t = to_tensors(X_ev, y_ev)
    outputs = predict(state.model, X_t.to(device)).float().cpu()  # (n_eval, outputs)
    out = {
        "y_pred": task.predictions(outputs).tolist(),
        "loss": task.epoch_metrics(outputs, y_t)["loss"],
        "epochs": cfg.epochs,
        "train_time_s": round(train_time, 3),
        "n_params": count_parameters(state.model),
        "n_train": int(len(y_tr)),
        "n_eval": int(len(y_ev)),
    }
    if outputs.shape[1] == 2:  # binary: the second class's probability (ROC AUC, PR AUC)
        out["proba"] = torch.softmax(outputs, dim=1)[:, 1].tolist()
    if keep_model:
        out["checkpoint"] = _to_cpu(state.checkpoint({"loss": out["loss"]}))
        out["preprocessor"] = pre
        out["environment"] = env
    return out


def with_scores(result: dict, y_true: np.ndarray, num_classes: int, *,
                keep_pred: bool = False, task: str = "classification") -> dict:
    """A :func:`fit_predict` result as :func:`fit_and_score` returns it: ``scores`` (the
    task's fold scores, :meth:`automl.task.Task.scores`, of ``y_true`` ``(n_eval,)``
    against ``y_pred``) first, for classification ``predicted_classes`` (how many distinct
    classes it predicted), the checkpoint's ``metrics`` the scores and the loss, and
    ``y_pred`` and ``proba`` dropped unless ``keep_pred``."""
    from automl.task import task_of

    pred = np.asarray(result["y_pred"])
    proba = result.get("proba")
    proba = None if proba is None else np.stack([1 - np.asarray(proba), np.asarray(proba)], 1)
    scores = task_of(task).scores(np.asarray(y_true), pred, num_classes, proba=proba)
    counted = ({"predicted_classes": int(len(np.unique(pred)))}
               if task == "classification" else {})
    out = {"scores": scores, **counted, **{k: v for k, v in result.items()
                                           if k not in ("y_pred", "proba") or keep_pred}}
    if "checkpoint" in out:
        out["checkpoint"] = {**out["checkpoint"],
                             "metrics": {**scores, "loss": out["loss"]}}
    return out


def warm_up() -> int:
    """Import what :func:`fit_predict` runs on (torch, the models, the training loop,
    and the ``torch._inductor`` config that ``torch.use_deterministic_algorithms``
    imports: 0.7-1.1 s of its own), so that a Ray worker that ran this starts its first
    fold training without the imports a new worker pays (measured on a 2-core CPU machine:
    4-5 s while the fold task also imported scikit-learn, about 2 s since). Returns the
    worker's process id."""
    import os

    import automl.models  # noqa: F401
    import automl.space  # noqa: F401
    import automl.train  # noqa: F401
    from automl.determinism import deterministic

    with deterministic():
        pass
    return os.getpid()


def _to_cpu(obj):
    """Every tensor in a nested dict / list moved to the CPU (for pickling to the driver)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
