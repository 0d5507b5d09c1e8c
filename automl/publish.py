"""The last stage of the main job: register the chosen model (and every accepted
compressed model) in the registry with its lineage and a model card (``automl.card``),
log them to W&B under the winning trial's run, and say where everything is.

The winner's version holds ``model.pt`` (the checkpoint), ``model.ts`` (TorchScript) and
``model.onnx`` (ONNX with a dynamic batch axis), copied from ``compression/winner.*`` when
the chain ran, else exported here into ``best/``; a format that cannot be exported is left
out and the card says why.

Reads only the summary dict and files in the run directory, so the optional stages
(cross-validation: ``summary["cv"]``; compression: ``summary["compression"]`` or a
``chain.json``) appear in the lineage when they ran and are skipped when they did not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from automl._io import shown, write_json
from automl.registry import (
    CHECKPOINT,
    DEFAULT_REGISTRY,
    EXPORT,
    ONNX,
    TRAINED_ON,
    ModelVersion,
    Registry,
    now,
)
from automl.rundir import (
    compression,
    cv_table,
    measured_models,
    onnx_int8_models,
    read_trials,
    winner,
)
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
    hashes, metric and, for a user's own model, its code (``user_models``: import path,
    folder, version, source sha256; what ``Registry.load`` imports it from)."""
    from automl.models.user import read_record

    code = [m.to_dict() for m in read_record(run_dir).values()]
    return {"sweep": Path(run_dir).name, "run_dir": str(Path(run_dir).resolve()),
            "spec_sha256": summary.get("spec_sha256"),
            "data_sha256": (summary.get("data") or {}).get("sha256"),
            "metric": summary.get("metric"), **({"user_models": code} if code else {})}


def _card(exp: Experiment, summary: dict, kind: str, files: dict, lineage: dict,
          measurement: dict, input_shape, confusion: dict | None = None,
          export_name: str | None = None, fmt: str = CHECKPOINT):
    """The ``card`` callback of ``Registry.register``: renders ``MODEL_CARD.md`` once the
    version number is known."""
    from automl.card import CardInput, render_card

    sizes = {t: Path(src).stat().st_size for t, src in files.items() if Path(src).is_file()}

    def card(name: str, number: int, folder: Path) -> str:
        lin = {**json.loads(json.dumps(lineage, default=str)), "registered_at": now()}
        return render_card(CardInput(
            name, number, folder, folder.parent.parent, kind, fmt, tuple(files), lin,
            summary, exp.to_dict(), tuple(input_shape), measurement, confusion, export_name,
            sizes))

    return card


def winner_formats(run_dir: Path, summary: dict) -> tuple[dict[str, Path], dict[str, Any]]:
    """``best/model.ts`` and ``best/model.onnx`` of the run's winner (copied from
    ``compression/winner.*`` when the chain exported them, else exported now) and its
    measurement for the card (the chain's winner row, else ``card.measure_checkpoint``).

    Returns:
        ``({"model.ts": path, "model.onnx": path}, measurement)``; a format that cannot be
        exported is missing, ``measurement["script_skipped"]``/``["onnx_skipped"]`` say why.
    """
    import shutil

    import torch

    from automl.compress.export import one_line
    from automl.compress.job import ONNX_KEYS

    best = Path(winner(summary)["checkpoint"])
    out, files = best.parent, {}
    shape = torch.load(best, map_location="cpu", weights_only=True)["input_shape"]
    section = summary.get("compression") if isinstance(summary.get("compression"), dict) else {}
    row = next((r for r in section.get("table") or [] if r.get("name") == "winner"), None)
    comp_dir = Path(section.get("out_dir") or Path(run_dir) / "compression")
    measurement = {**(dict(row) if row else {}), "input_shape": list(shape)}
    for ext in (".ts", ".onnx"):
        src = comp_dir / f"winner{ext}"
        if row and src.is_file():
            shutil.copyfile(src, out / f"model{ext}")
            files[f"model{ext}"] = out / f"model{ext}"
    if row:
        if "model.ts" not in files:
            measurement["script_skipped"] = (section.get("winner_export") or {}).get(
                "script_skipped")
        return files, measurement
    from automl.card import measure_checkpoint
    from automl.compress.onnx_export import (
        OnnxModel,
        export_onnx,
        ort_latency_ms,
        parity_problem,
        run_session,
    )
    from automl.models.cost import quiet
    from automl.train import load_checkpoint

    model, ckpt = load_checkpoint(best)
    measurement = {**measure_checkpoint(best), **dict.fromkeys(ONNX_KEYS),
                   "size_bytes": best.stat().st_size, "input_shape": list(shape)}
    x = torch.rand(64, *ckpt["input_shape"], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(x)
    try:
        with quiet(), torch.no_grad():
            torch.jit.save(torch.jit.trace(model, x[:2], check_trace=False), str(out / "model.ts"))
            got = torch.jit.load(str(out / "model.ts"))(x)
        if got.shape != ref.shape or not torch.allclose(got, ref, atol=1e-4, rtol=1e-4):
            raise ValueError("the reloaded trace does not reproduce the model (data-dependent "
                             "control flow?)")
        files["model.ts"] = out / "model.ts"
    except Exception as err:
        (out / "model.ts").unlink(missing_ok=True)
        measurement["script_skipped"] = f"TorchScript cannot trace this model: {one_line(err)}"
    try:
        export_onnx(model, out / "model.onnx", x[:2])
        sess = OnnxModel(out / "model.onnx").session
        off = parity_problem(ref, run_session(sess, x))
        if off is not None:
            raise ValueError(off)
        measurement.update(ort_latency_ms_b1=ort_latency_ms(sess, x[:1], 20),
                           ort_latency_ms_b64=ort_latency_ms(sess, x, 7),
                           onnx_bytes=(out / "model.onnx").stat().st_size)
        files["model.onnx"] = out / "model.onnx"
    except Exception as err:
        (out / "model.onnx").unlink(missing_ok=True)
        measurement["onnx_skipped"] = f"ONNX export failed: {one_line(err)}"
    return files, measurement


def register_run(reg: Registry, exp: Experiment, run_dir: Path, summary: dict,
                 target: WandbTarget | None = None) -> list[ModelVersion]:
    """Register the run's winner as ``<registry.name>@n`` (checkpoint, TorchScript, ONNX
    and the model card) and each accepted compressed model as
    ``<registry.name>-<NN_stage>@m`` (parent: the winner's version).

    A model whose files equal a version already registered under its name (sha256) is not
    registered again: that version comes back with ``unchanged`` set.

    Returns:
        The versions, winner first.

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
               "test": {**chosen["test"], "split": "test", "trained_on": TRAINED_ON["winner"]},
               "cv": ({"metric": cv["metric"], "scores": mine["scores"], "mean": mine["mean"],
                       "std": mine["std"]} if mine else None),
               "compression": [], "parent": None, "run_finished_at": now()}
    files: dict[str, Any] = {"model.pt": chosen["checkpoint"]}
    pre = Path(chosen["checkpoint"]).with_name("preprocessor.skops")  # tabular data only
    if pre.is_file():
        files[pre.name] = pre
    formats, measurement = ({}, {}) if not Path(chosen["checkpoint"]).is_file() else \
        winner_formats(run_dir, summary)
    files.update(formats)
    cm_path = Path(run_dir) / "confusion_matrix.json"
    confusion = json.loads(cm_path.read_text()) if cm_path.is_file() else None
    shape = measurement.get("input_shape") or \
        (summary.get("data") or {}).get("model_input_shape") or []
    card = _card(exp, summary, "winner", files, lineage, measurement, shape, confusion)
    win = reg.register(name, files, format=CHECKPOINT, lineage=lineage,
                       tracking=_tracking(target, chosen["trial_id"], name, ["best", sweep]),
                       card=card)
    front = register_front(reg, exp, run_dir, summary, win, target)
    return [win, *register_compressed(reg, exp, run_dir, summary, win, target), *front]


def register_front(reg: Registry, exp: Experiment, run_dir: Path, summary: dict,
                   win: ModelVersion, target: WandbTarget | None = None) -> list[ModelVersion]:
    """Several objectives: every member of the cross-validated Pareto front
    (``summary["pareto"]``) as a version of ``<registry.name>-pareto``, with its objective
    values, whether it keeps the constraints, and tags in the lineage; the winner's
    version there is its refit checkpoint and gets the alias ``winner``. The other
    members hold their sweep checkpoint (trained on the training rows, at their last
    epoch); a member whose checkpoint file is gone is skipped.

    Returns:
        The new versions, in front order (empty for one objective).

    Raises:
        RegistryError: the registry name is not a valid model name (``registry.name``).
    """
    rows = [r for r in summary.get("pareto") or [] if r.get("on_front")]
    if not rows:
        return []
    name = f"{exp.registry.name or exp.name}-pareto"
    trials = {t["trial_id"]: t for t in read_trials(run_dir)}
    base = _base_lineage(run_dir, summary)
    out = []
    for r in rows:
        t = trials.get(r["trial_id"]) or {}
        if r["winner"]:
            src, kind = winner(summary)["checkpoint"], "refit on train + validation rows"
        else:
            found = sorted(Path(t.get("checkpoint") or "").glob("epoch_*.pt"))
            src, kind = (str(found[-1]) if found else None), "sweep checkpoint (train rows)"
        if not src or not Path(src).is_file():
            continue
        lineage = {**base, "kind": "pareto_member", "trial_id": r["trial_id"],
                   "objectives": r["objectives"], "feasible": r["feasible"],
                   "weights": kind, "params": t.get("params"), "config": t.get("config"),
                   "winner": r["winner"], "winner_version": win.ref,
                   "tags": ["pareto", *(["winner"] if r["winner"] else []),
                            "feasible" if r["feasible"] else "infeasible"],
                   "run_finished_at": now()}
        aliases = ["pareto", Path(run_dir).name, *(["winner"] if r["winner"] else [])]
        v = reg.register(name, {"model.pt": src}, format=CHECKPOINT, lineage=lineage,
                         tracking=_tracking(target, r["trial_id"], name, aliases))
        if r["winner"]:
            v = reg.set_alias(v.ref, "winner")
        out.append(v)
    return out


def register_compressed(reg: Registry, exp: Experiment, run_dir: Path, summary: dict,
                        parent: ModelVersion, target: WandbTarget | None = None
                        ) -> list[ModelVersion]:
    """Register each accepted model of the run's compression chain as
    ``<registry.name>-<NN_stage>@m`` (state_dict, recipe, TorchScript and ONNX when they
    exist, and the model card), its lineage pointing at ``parent`` (the winner's version),
    and an accepted ONNX Runtime int8 model as ``<registry.name>-<NN>_quantize_ort@m``
    (format ``automl.onnx/1``). An accepted model whose files are missing is skipped.

    Returns:
        The new versions, in chain order (empty without a chain).
    """
    name = exp.registry.name or exp.name
    chosen, sweep = winner(summary), Path(run_dir).name
    base = _base_lineage(run_dir, summary)
    versions = []
    chain = compression(run_dir, summary)
    rows = measured_models(chain) if chain else []
    accepted = [r for r in rows if r["status"] == "accepted"]
    table = {r.get("name"): r for r in (chain or {}).get("table") or []}
    # what its test accuracy compares with: the chain teacher's, on the same test rows and
    # trained on the same (train) rows; the winner's refit also trained on validation rows
    teacher_acc = ((chain or {}).get("teacher") or {}).get("accuracy")

    def test(acc) -> dict:
        return {"accuracy": acc, "split": "test", "trained_on": TRAINED_ON["compressed"],
                "teacher_accuracy": teacher_acc}

    shape = (summary.get("data") or {}).get("model_input_shape") or []
    for row in accepted:
        export = row.get("export") or {}
        files = [_locate(run_dir, export.get(k)) for k in ("state_dict_path", "config_path")]
        if not all(files):
            continue
        export_name = files[0].stem
        extra = [_locate(run_dir, export.get("script_path")),
                 _locate(run_dir, (row.get("onnx") or {}).get("path"))]
        files += [f for f in extra if f]
        recipe = json.loads(files[1].read_text())
        child = f"{name}-{export_name}"
        measurement = {k: row.get(k) for k in ("params", "nonzero_params", "macs",
                                               "size_bytes", "latency_ms_b1",
                                               "latency_ms_b64", "accuracy", "val_accuracy",
                                               "agreement")}
        onnx = row.get("onnx") or {}
        measurement.update(ort_latency_ms_b1=onnx.get("latency_ms_b1"),
                           ort_latency_ms_b64=onnx.get("latency_ms_b64"),
                           onnx_skipped=onnx.get("skipped"),
                           script_skipped=export.get("script_skipped"))
        by_name = {f.name: f for f in files}
        lineage = {**base, "kind": "compressed", "trial_id": chosen["trial_id"],
                   "export_name": export_name, "test": test(row.get("accuracy")),
                   "measurement": measurement, "cv": None,
                   "compression": recipe.get("lineage") or [export_name],
                   "parent": parent.ref, "run_finished_at": now()}
        versions.append(reg.register(
            child, by_name, format=EXPORT, lineage=lineage,
            tracking=_tracking(target, chosen["trial_id"], child, [sweep]),
            card=_card(exp, summary, "compressed", by_name, lineage, measurement,
                       recipe.get("input_shape") or shape, export_name=export_name, fmt=EXPORT)))
    for q in onnx_int8_models(chain) if chain else []:
        path = _locate(run_dir, q.get("path"))
        if path is None:
            continue
        child, src = f"{name}-{q['name']}", table.get(q["name"]) or {}
        measurement = {"params": src.get("params"), "nonzero_params": src.get("nonzero_params"),
                       "macs": src.get("macs"), "accuracy": q.get("accuracy"),
                       "val_accuracy": q.get("val_accuracy"), "agreement": q.get("agreement"),
                       "ort_latency_ms_b1": q.get("latency_ms_b1"),
                       "ort_latency_ms_b64": q.get("latency_ms_b64")}
        src_row = next((r for r in rows if r.get("name") == q["source"]), {})
        cfg = _locate(run_dir, (src_row.get("export") or {}).get("config_path"))
        src_recipe = json.loads(cfg.read_text()) if cfg else {}
        source_lineage = src_recipe.get("lineage") or [q["source"]]
        files = {path.name: path}
        lineage = {**base, "kind": "onnx-int8", "trial_id": chosen["trial_id"],
                   "export_name": q["name"], "source_model": q["source"],
                   "test": test(q.get("accuracy")), "measurement": measurement,
                   "cv": None, "compression": [*source_lineage, q["name"]],
                   "parent": parent.ref, "run_finished_at": now()}
        versions.append(reg.register(
            child, files, format=ONNX, lineage=lineage,
            tracking=_tracking(target, chosen["trial_id"], child, [sweep]),
            card=_card(exp, summary, "onnx-int8", files, lineage, measurement,
                       src_recipe.get("input_shape") or shape, export_name=q["name"],
                       fmt=ONNX)))
    return versions


def register_recompressed(run_dir: Path, console: Console) -> list[ModelVersion]:
    """After ``automl compress RUN_DIR``: register the new chain's accepted models as
    children of the winner version the run registered (``summary.json`` ``registry``),
    and add them to that section. W&B is not logged to again (the sweep's runs are
    closed); the registry's lineage records the new chain.

    A model whose files equal a version already registered under its name (sha256) is not
    registered again: one line says so (``Registry.register``).

    Returns:
        The new versions; empty when ``registry.enabled`` is false, the run
        registered no winner (said on ``console``) or nothing changed.

    Raises:
        RegistryError: the run's winner version is no longer in the registry.
    """
    from automl.rundir import read_summary
    from automl.spec import load_run_spec

    run_dir = Path(run_dir)
    exp, summary = load_run_spec(run_dir), read_summary(run_dir)
    section = summary.get("registry") or {}
    if not exp.registry.enabled or not section.get("winner"):
        console.print("registry: the run registered no winner; compressed models not "
                      "registered", highlight=False)
        return []
    reg = Registry(section.get("dir") or registry_dir(exp, run_dir))
    versions = register_compressed(reg, exp, run_dir, summary, reg.get(section["winner"]))
    known = section.get("versions", [])
    section["versions"] = [*known, *(v.ref for v in versions if v.ref not in known)]
    summary["registry"] = section
    write_json(run_dir / "summary.json", summary)
    _say_unchanged(console, versions)
    new = [v for v in versions if not v.unchanged]
    if new:
        console.print(f"registry {', '.join(v.ref for v in new)} in {shown(reg.root)}  "
                      f"(parent {section['winner']}; automl registry show "
                      f"{new[0].ref}{_dir_flag(reg.root)})", highlight=False)
    return new


def _say_unchanged(console: Console, versions: list[ModelVersion]) -> None:
    """One line per version ``Registry.register`` found already registered."""
    for v in versions:
        if v.unchanged:
            console.print(f"registry {v.ref} unchanged (same sha256); not registered again",
                          highlight=False)


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
        _say_unchanged(console, versions)
        if any(not v.unchanged for v in versions):
            console.print(f"registry {', '.join(v.ref for v in versions if not v.unchanged)} "
                          f"in {shown(reg.root)}  (automl registry show "
                          f"{versions[0].ref}{_dir_flag(reg.root)})", highlight=False)
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
            console.print(f"wandb  offline runs in {shown(tracking['dir'])}; upload later "
                          f"with `wandb sync {shown(tracking['dir'])}`", highlight=False)
        else:
            console.print(f"wandb  online, project {target.project}, group {target.group}",
                          highlight=False)
    out["tracking"] = tracking
    return out
