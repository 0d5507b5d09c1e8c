"""The last stage of the main job: register the chosen model (and every accepted
compressed model) in the registry with its lineage, log them to W&B under the winning
trial's run, and say where everything is.

Reads only the summary dict and files in the run directory, so the optional stages
(cross-validation: ``summary["cv"]``; compression: ``summary["compression"]`` or a
``chain.json``) appear in the lineage when they ran and are skipped when they did not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from automl._io import write_json
from automl.registry import CHECKPOINT, DEFAULT_REGISTRY, EXPORT, ModelVersion, Registry, now
from automl.rundir import compression, cv_table, measured_models, read_trials, winner
from automl.spec import Experiment
from automl.tracking import WandbTarget, log_winner, run_id


def registry_dir(exp: Experiment, run_dir: Path) -> Path:
    """``registry.dir``, or ``registry`` beside the run directory (``<output.dir>/registry``)."""
    return Path(exp.registry.dir) if exp.registry.dir else Path(run_dir).parent / "registry"


def _tracking(target: WandbTarget | None, trial_id: str, artifact: str,
              aliases: list[str]) -> dict | None:
    if target is None:
        return None
    return {"backend": "wandb", "target": target.to_dict(), "trial_id": trial_id,
            "run_id": run_id(target.group, target.dir, trial_id), "artifact": artifact,
            "aliases": aliases}


def _locate(run_dir: Path, path: str | None) -> Path | None:
    """An exported file's path as recorded, or the file of that name in the run dir."""
    if not path:
        return None
    if Path(path).is_file():
        return Path(path)
    hits = [p for p in Path(run_dir).rglob(Path(path).name) if "tune" not in p.parts]
    return hits[0] if hits else None


def _dir_flag(root: Path) -> str:
    """`` --dir ROOT`` for a registry command, unless ROOT is the CLI's default."""
    return "" if Path(root).resolve() == Path(DEFAULT_REGISTRY).resolve() else f" --dir {root}"


def _search_val(run_dir: Path, best: dict, trial_id: str | None) -> dict | None:
    """The chosen trial's last validation metrics in the search: the best trial's from the
    summary, else its own from ``trials.json`` (cross-validation may choose another)."""
    if best.get("trial_id") == trial_id:
        return best.get("val")
    mine = next((t for t in read_trials(run_dir) if t.get("trial_id") == trial_id), None)
    return (mine or {}).get("metrics")


def _base_lineage(run_dir: Path, summary: dict) -> dict[str, Any]:
    """What every version registered from one run shares: sweep, run dir, spec and data
    hashes, metric."""
    return {"sweep": Path(run_dir).name, "run_dir": str(Path(run_dir).resolve()),
            "spec_sha256": summary.get("spec_sha256"),
            "data_sha256": (summary.get("data") or {}).get("sha256"),
            "metric": summary.get("metric")}


def register_run(reg: Registry, exp: Experiment, run_dir: Path, summary: dict,
                 target: WandbTarget | None = None) -> list[ModelVersion]:
    """Register the run's winner as ``<registry.name>@n`` and each accepted compressed
    model as ``<registry.name>-<NN_stage>@m`` (parent: the winner's version).

    Returns:
        The new versions, winner first.

    Raises:
        RegistryError: the winner's checkpoint is missing.
    """
    name = exp.registry.name or exp.name
    chosen, sweep = winner(summary), Path(run_dir).name
    cv = cv_table(summary)
    mine = next((c for c in (cv or {}).get("candidates", [])
                 if c["trial_id"] == chosen["trial_id"]), None)
    best = summary.get("best") or {}
    base = _base_lineage(run_dir, summary)
    lineage = {**base, "kind": "winner", "trial_id": chosen["trial_id"],
               "params": chosen["params"], "config": chosen["config"],
               "search_val": _search_val(run_dir, best, chosen["trial_id"]),
               "test": chosen["test"],
               "cv": ({"metric": cv["metric"], "scores": mine["scores"], "mean": mine["mean"],
                       "std": mine["std"]} if mine else None),
               "compression": [], "parent": None, "run_finished_at": now()}
    files = {"model.pt": chosen["checkpoint"]}
    pre = Path(chosen["checkpoint"]).with_name("preprocessor.skops")  # tabular data only
    if pre.is_file():
        files[pre.name] = pre
    win = reg.register(name, files, format=CHECKPOINT,
                       lineage=lineage,
                       tracking=_tracking(target, chosen["trial_id"], name, ["best", sweep]))
    return [win, *register_compressed(reg, exp, run_dir, summary, win, target)]


def register_compressed(reg: Registry, exp: Experiment, run_dir: Path, summary: dict,
                        parent: ModelVersion, target: WandbTarget | None = None
                        ) -> list[ModelVersion]:
    """Register each accepted model of the run's compression chain as
    ``<registry.name>-<NN_stage>@m``, its lineage pointing at ``parent`` (the winner's
    version). An accepted model whose exported files are missing is skipped.

    Returns:
        The new versions, in chain order (empty without a chain).
    """
    name = exp.registry.name or exp.name
    chosen, sweep = winner(summary), Path(run_dir).name
    base = _base_lineage(run_dir, summary)
    versions = []
    chain = compression(run_dir, summary)
    accepted = [r for r in measured_models(chain) if r["status"] == "accepted"] if chain else []
    for row in accepted:
        export = row.get("export") or {}
        files = [_locate(run_dir, export.get(k))
                 for k in ("state_dict_path", "config_path", "script_path")]
        if not all(files):
            continue
        export_name = files[0].stem
        recipe = json.loads(files[1].read_text())
        child = f"{name}-{export_name}"
        measurement = {k: row.get(k) for k in ("params", "nonzero_params", "macs",
                                               "size_bytes", "latency_ms_b1",
                                               "latency_ms_b64", "accuracy", "val_accuracy",
                                               "agreement")}
        versions.append(reg.register(
            child, {f.name: f for f in files}, format=EXPORT,
            lineage={**base, "kind": "compressed", "trial_id": chosen["trial_id"],
                     "export_name": export_name, "test": {"accuracy": row.get("accuracy")},
                     "measurement": measurement, "cv": None,
                     "compression": recipe.get("lineage") or [export_name],
                     "parent": parent.ref, "run_finished_at": now()},
            tracking=_tracking(target, chosen["trial_id"], child, [sweep])))
    return versions


def register_recompressed(run_dir: Path, console: Console) -> list[ModelVersion]:
    """After ``automl compress RUN_DIR``: register the new chain's accepted models as
    children of the winner version the run registered (``summary.json`` ``registry``),
    and add them to that section. W&B is not logged to again (the sweep's runs are
    closed); the registry's lineage records the new chain.

    Returns:
        The new versions; empty when ``registry.enabled`` is false or the run
        registered no winner (said on ``console``).

    Raises:
        RegistryError: the run's winner version is no longer in the registry.
    """
    from automl.rundir import read_summary
    from automl.spec import load_spec

    run_dir = Path(run_dir)
    exp, summary = load_spec(run_dir / "spec.yaml"), read_summary(run_dir)
    section = summary.get("registry") or {}
    if not exp.registry.enabled or not section.get("winner"):
        console.print("registry: the run registered no winner; compressed models not "
                      "registered", highlight=False)
        return []
    reg = Registry(section.get("dir") or registry_dir(exp, run_dir))
    versions = register_compressed(reg, exp, run_dir, summary, reg.get(section["winner"]))
    section["versions"] = [*section.get("versions", []), *(v.ref for v in versions)]
    summary["registry"] = section
    write_json(run_dir / "summary.json", summary)
    if versions:
        console.print(f"registry {', '.join(v.ref for v in versions)} in {reg.root}  "
                      f"(parent {section['winner']}; automl registry show "
                      f"{versions[0].ref}{_dir_flag(reg.root)})", highlight=False)
    return versions


def publish(exp: Experiment, run_dir: Path, summary: dict, target: WandbTarget | None,
            console: Console) -> dict[str, Any]:
    """Register and log the run's models; returns the ``registry`` and ``tracking``
    sections for ``summary.json``. A W&B failure is reported, not raised: the sweep's
    results are on disk either way."""
    out: dict[str, Any] = {}
    versions: list[ModelVersion] = []
    if exp.registry.enabled:
        reg = Registry(registry_dir(exp, run_dir))
        versions = register_run(reg, exp, run_dir, summary, target)
        out["registry"] = {"dir": str(reg.root), "winner": versions[0].ref,
                           "versions": [v.ref for v in versions]}
        console.print(f"registry {', '.join(v.ref for v in versions)} in {reg.root}  "
                      f"(automl registry show {versions[0].ref}{_dir_flag(reg.root)})",
                      highlight=False)
    tracking: dict[str, Any] = {"backend": exp.tracking.backend,
                                "tensorboard": (f"tensorboard --logdir {Path(run_dir) / 'tensorboard'}"
                                                if exp.tracking.tensorboard else None)}
    if target is not None:
        tracking.update({"mode": target.mode, "project": target.project,
                         "entity": target.entity, "group": target.group,
                         "dir": str(Path(target.dir) / "wandb")})
        try:
            tracking.update(log_winner(target, run_dir, summary, versions))
        except Exception as e:  # the results are safe on disk; say what failed
            tracking["error"] = f"{type(e).__name__}: {e}"
            console.print(f"warning: W&B logging of the winner failed: {tracking['error']}",
                          style="yellow", highlight=False)
        if target.mode == "offline":
            tracking["sync"] = target.sync_command()
            console.print(f"wandb  offline runs in {tracking['dir']}; upload later with "
                          f"`{target.sync_command()}`", highlight=False)
        else:
            console.print(f"wandb  online, project {target.project}, group {target.group}",
                          highlight=False)
    out["tracking"] = tracking
    return out
