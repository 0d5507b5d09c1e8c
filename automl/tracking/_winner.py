"""Logging the chosen model to W&B: under the winning trial's own run (resumed by its
deterministic id) go the test scores, the CV fold table, the compression stages, and one
model artifact per registered model.

Artifact names follow the registry: the winner is ``<name>`` with aliases ``best`` and
the sweep id; a compressed model is ``<name>-<NN_stage>`` with the sweep id; a later
``automl registry promote`` adds ``champion`` (W&B keeps an alias on one version of an
artifact, so each compressed model has its own artifact name).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from automl.rundir import compression, cv_table, read_trials, winner
from automl.spec import TrackingSpec
from automl.tracking._wandb import WandbTarget, resolve_mode, start_run

_STAGE_COLUMNS = ("index", "stage", "status", "val_accuracy", "val_accuracy_drop",
                  "accuracy", "accuracy_drop", "params", "nonzero_params", "macs",
                  "size_bytes", "latency_ms_b1", "latency_ms_b64", "reason")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _artifact(version, aliases: list[str]):
    import wandb

    meta = {"registry_ref": version.ref, "format": version.format,
            **{k: v for k, v in version.lineage.items()
               if k in ("sweep", "trial_id", "spec_sha256", "data_sha256", "parent",
                        "compression", "test")}}
    art = wandb.Artifact(version.tracking["artifact"], type="model", metadata=meta)
    for fname in version.files:
        art.add_file(str(Path(version.path) / fname), name=fname)
    return art


def log_winner(target: WandbTarget, run_dir: Path, summary: dict, versions: list) -> dict:
    """Resume the winning trial's run and log the final results and model artifacts.

    Args:
        versions: registered :class:`~automl.registry.ModelVersion` objects (winner
            first); their ``tracking["artifact"]`` and ``tracking["aliases"]`` say how.

    Returns:
        ``{"run_id", "artifacts": {registry ref: {"name", "aliases"}}}``.
    """
    import wandb

    chosen = winner(summary)
    # a resumed offline run restarts its step counter at 0, so the tables are logged at
    # an explicit step after the trial's last epoch (W&B drops steps that go backwards)
    epochs = [t.get("epochs_run", 0) for t in read_trials(run_dir)
              if t.get("trial_id") == chosen["trial_id"]]
    step = (epochs[0] if epochs else int((chosen["config"] or {}).get("epochs", 0))) + 1
    run = start_run(target, str(chosen["trial_id"]))
    try:
        run.summary.update({"winner": True, **{f"test/{k}": v for k, v in
                                                chosen["test"].items() if _number(v)}})
        cv = cv_table(summary)
        if cv:
            rows = [[c["trial_id"], i + 1, s, c["status"]] for c in cv["candidates"]
                    for i, s in enumerate(c["scores"])]
            run.log({"cv/folds": wandb.Table(columns=["trial_id", "fold", cv["metric"],
                                                      "status"], data=rows)}, step=step)
            mine = [c for c in cv["candidates"] if c["trial_id"] == chosen["trial_id"]]
            if mine:
                run.summary.update({f"cv/{cv['metric']}_mean": mine[0]["mean"],
                                    f"cv/{cv['metric']}_std": mine[0]["std"]})
        chain = compression(run_dir, summary)
        if chain:
            rows = []
            for s in chain.get("stages", []):
                m = s.get("measurement") or {}
                rows.append([s.get("index"), s.get("stage"), s.get("status"),
                             s.get("val_accuracy"), s.get("val_accuracy_drop"),
                             s.get("accuracy"), s.get("accuracy_drop"), m.get("params"),
                             m.get("nonzero_params"), m.get("macs"), m.get("size_bytes"),
                             m.get("latency_ms_b1"), m.get("latency_ms_b64"),
                             s.get("reason")])
            run.log({"compression/stages": wandb.Table(columns=list(_STAGE_COLUMNS),
                                                       data=rows)}, step=step)
        logged = {}
        for v in versions:
            if not v.tracking:  # registered without a W&B artifact name
                continue
            aliases = list(v.tracking["aliases"])
            run.log_artifact(_artifact(v, aliases), aliases=aliases)
            logged[v.ref] = {"name": v.tracking["artifact"], "aliases": aliases}
        run_id = run.id
    finally:
        run.finish()
    return {"run_id": run_id, "artifacts": logged}


def log_alias(version, alias: str) -> str | None:
    """Add ``alias`` (e.g. ``champion``) to ``version``'s W&B model artifact by logging it
    again from its trial's run (W&B de-duplicates identical files).

    Returns:
        The mode used (``offline``/``online``), or None when the version has no W&B
        record or tracking resolves to disabled now (e.g. ``WANDB_MODE=disabled``).
    """
    rec = version.tracking or {}
    if rec.get("backend") != "wandb":
        return None
    t = rec["target"]
    mode = resolve_mode(TrackingSpec(backend="wandb", mode=t.get("setting", "auto")))
    if mode == "disabled":
        return None
    target = WandbTarget(mode, t.get("setting", "auto"), t["project"], t.get("entity"),
                         t["group"], t["dir"])
    run = start_run(target, rec["trial_id"])
    try:
        run.log_artifact(_artifact(version, [alias]), aliases=[alias])
    finally:
        run.finish()
    return mode
