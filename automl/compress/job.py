"""The compression step of the main job, and ``automl compress RUN_DIR``.

Which model is compressed, and why: the winner saved at ``best/model.pt`` was retrained
on train + validation rows, so every row outside the test split has been in its
training. A guard on such rows would compare a student's held-out accuracy with the
teacher's *training* accuracy (near 1.0), and the only unseen rows would be the test
split, which must not choose anything. So the chain's teacher (``00_teacher``) is the
winner's configuration retrained on the search's train rows only (same seed, epochs and
preprocessing as the search's trials); every stage trains on those rows; the guard
compares accuracy on the search's validation rows; the test split is measured once per
model at the end. The deployed winner is measured beside them (row ``winner``) and
exported too, so the table shows what compression buys relative to ``best/model.pt``.

Writes ``<run_dir>/compression/`` (``winner.*``, ``00_teacher.*``, ``NN_<stage>.*``:
state_dict ``.pt``, rebuild recipe ``.json``, TorchScript ``.ts`` when traceable, ONNX
``.onnx`` for float models; ``NN_quantize_ort.onnx``: ONNX Runtime's int8; ``chain.json``)
and returns the ``compression`` section of ``summary.json``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from rich import box
from rich.console import Console
from rich.table import Table

from automl._io import write_json
from automl._progress import StageProgress
from automl.compress._base import make_context, measure, predict
from automl.compress.chain import run_chain
from automl.compress.export import export_model, shapes_of
from automl.compress.onnx_export import export_checked
from automl.errors import DataError, SpecError
from automl.task import task_of

OUT = "compression"
REQUIRED = ("spec.yaml", "best/model.pt", "summary.json")
TEACHER_SOURCE = ("the winner's configuration trained on the search's train rows only "
                  "(validation rows held out for the accuracy-drop guard)")


def stage_work(comp) -> list[tuple[str, float]]:
    """``[(step, epochs)]`` of a compression section: the teacher's retraining (counted by
    the caller), then each stage's training epochs (distillation ``epochs``, pruning
    ``fine_tune_epochs``; at least 1 for its measurement and exports)."""
    return [(f"{i:02d}_{s.stage}", float(max(1, getattr(s, "epochs", 0)
                                               or getattr(s, "fine_tune_epochs", 0) or 1)))
            for i, s in enumerate(comp.stages, 1)]


def compress_winner(exp, dataset, splits, run_dir: str | Path, *,
                    cv_accuracy: float | None = None,
                    console: Console | None = None, publish=None,
                    eta_s: float | None = None,
                    teacher_fit: dict | None = None,
                    winner_ready: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run ``exp.compression`` on the run's winner (module docstring) and print the table.

    Args:
        exp: the validated ``Experiment``; ``exp.compression.stages`` must be non-empty.
        dataset, splits: the run's ``automl.data.Dataset`` and ``Splits``.
        run_dir: holds ``best/model.pt`` (``TrainState.checkpoint`` format).
        cv_accuracy: the winner configuration's mean CV accuracy, shown in the table.
        publish: ``(stage, done, total, eta, elapsed_s)`` goes there as each step ends
            (metrics, the history of estimates: ``automl._progress.Publish``).
        eta_s: an estimate of the whole stage before its first step ends, seconds.
        teacher_fit: the teacher already trained (``fit_and_score(keep_model=True)`` of
            the winner's config on the train rows, e.g. beside the refit, or the winner's
            own sweep trial's last checkpoint, ``{"checkpoint", "source"}``); trained here
            when None or of another config.
        winner_ready: the refit still runs (the main job's refit beside this stage):
            ``best/model.pt`` is read only once this returns (it raises when the refit
            failed), after the chain; the chain's configuration comes from
            ``teacher_fit``, which is then required.

    Runs in this process with ``exp.resources.cpus_per_worker`` torch threads (restored
    afterwards); trains on ``compression.device``; latency is measured on the CPU with
    ``compression.latency_threads`` threads.

    Returns:
        ``ChainResult.to_dict()`` plus ``winner`` (measurement), ``winner_export``,
        ``winner_onnx``, ``teacher_source``, ``guard``, ``table`` (one row per measured
        model, see ``table_rows``), ``out_dir``, ``timing_s`` (teacher retrain, chain) and
        ``wall_time_s`` (seconds). Also written to ``compression/chain.json``.

    Raises:
        ValueError: ``exp.compression`` lists no stage.
        ResourceError: ``compression.device`` is ``cuda`` and no GPU is visible.
    """
    from automl.data import fit_transform
    from automl.selection import fit_and_score
    from automl.space import TrialConfig
    from automl.train import load_checkpoint

    comp = exp.compression
    if not comp.stages:
        raise ValueError("compression.stages: no stage listed")
    if comp.device == "cuda" and not torch.cuda.is_available():
        from automl.errors import ResourceError

        raise ResourceError("no CUDA device is visible to this process",
                            where="compression.device", fix="set compression.device: cpu")
    console = console or Console()
    t0, threads_before = time.perf_counter(), torch.get_num_threads()
    # one unit of work, like a trial: resources.cpus_per_worker threads (more threads than
    # free cores thrash in OpenMP spin-waits on a shared machine)
    threads = max(1, int(exp.resources.cpus_per_worker))
    run_dir = Path(run_dir)
    if winner_ready is None:
        winner, ckpt = load_checkpoint(run_dir / "best" / "model.pt")
    elif teacher_fit is None:
        raise ValueError("compress_winner: winner_ready needs teacher_fit (the chain's "
                         "configuration before the refit ends)")
    else:
        ckpt = teacher_fit["checkpoint"]
    cfg = TrialConfig.from_dict(ckpt["config"])
    console.print(f"compress {len(comp.stages)} stage(s): "
                  f"{' -> '.join(s.stage for s in comp.stages)}; teacher: {TEACHER_SOURCE}; "
                  f"{threads} thread(s)"
                  + ("; the refit trains beside it" if winner_ready is not None else ""),
                  highlight=False)
    work = stage_work(comp)
    cost = dict(work)
    bar = StageProgress(console, "compress", 3 + len(work),
                        work=cfg.epochs + sum(cost.values()) + 1, eta_s=eta_s, publish=publish)
    try:
        torch.set_num_threads(threads)
        fit = teacher_fit if teacher_fit is not None and (teacher_fit.get("checkpoint") or {}) \
            .get("config") == ckpt["config"] else None
        if fit is None:
            fit = fit_and_score(dataset, ckpt["config"], splits.train, splits.val,
                                impute=exp.data.impute, cpus=threads, keep_model=True,
                                gpus=1.0 if comp.device == "cuda" else 0.0)
        teacher = _rebuild(cfg.arch, fit["checkpoint"])
        timing = {"teacher_retrain_s": round(time.perf_counter() - t0, 2)}
        how = ("retrained" if fit is not teacher_fit else
               f"from {fit['source']}" if fit.get("source") else "trained beside the refit")
        bar.step(f"teacher {how} ({cfg.epochs} epochs)", work=cfg.epochs)
        sets = fit_transform(dataset, splits.train, splits.val, splits.test,
                             impute=exp.data.impute)
        kw = {"seed": comp.seed, "batch_size": comp.batch_size, "lr": comp.lr,
              "threads": comp.latency_threads, "latency_repeats": comp.latency_repeats,
              "max_slowdown": comp.max_slowdown,
              "teacher_arch": cfg.arch, "onnx": comp.onnx, "device": comp.device,
              "task": cfg.task}
        out, old = run_dir / OUT, run_dir / f".{OUT}-old-{os.getpid()}"
        if out.exists():  # a re-run: keep the old results until the new ones are complete
            os.replace(out, old)
        try:
            ctx = make_context(*sets, out, **kw)
            chain = run_chain(teacher, comp.chain(), ctx, on_stage=lambda name, status: (
                bar.step(f"{name} {status}", work=cost.get(name, 0.0))))
            timing["chain_s"] = round(time.perf_counter() - t0 - sum(timing.values()), 2)
            if winner_ready is not None:  # the refit beside the chain: its model, once done
                t1 = time.perf_counter()
                winner_ready()
                winner, wckpt = load_checkpoint(run_dir / "best" / "model.pt")
                if wckpt["config"] != ckpt["config"]:
                    raise ValueError("best/model.pt is not of the teacher's configuration")
                timing["refit_wait_s"] = round(time.perf_counter() - t1, 2)
            # the deployed winner, preprocessed as it was trained (fitted on train + val)
            _, val_w, test_w = fit_transform(dataset, splits.pool, splits.val, splits.test,
                                             impute=exp.data.impute)
            wctx = make_context(sets[0], val_w, test_w, out, **kw)
            w_export = export_model(winner, out, "winner", {
                "arch": cfg.arch, "input_shape": list(ckpt["input_shape"]),
                "num_classes": ckpt["num_classes"], "shapes": shapes_of(winner),
                "pruned": None, "quantized": None, "lineage": ["winner"]}, wctx.X_test)
            w_meas = measure(winner, wctx, "winner", predict(teacher, ctx.X_test),
                             size_bytes=w_export.size_bytes, script_bytes=w_export.script_bytes)
            w_onnx = export_checked(winner, wctx, "winner") if comp.onnx else None
            bar.step("winner measured and exported")
        except BaseException:  # leave no partial chain.json for readers of the run dir
            shutil.rmtree(out, ignore_errors=True)
            if old.exists():
                os.replace(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        torch.set_num_threads(threads_before)
        bar.close()
    section = {"status": "completed",
               # what the fields named accuracy hold: accuracy, or R² for regression
               "metric": task_of(cfg.task).guard_metric,
               **chain.to_dict(), "winner": w_meas.to_dict(),
               "winner_export": w_export.to_dict(),
               "winner_onnx": w_onnx.to_dict() if w_onnx else None,
               "teacher_source": TEACHER_SOURCE, "teacher_from": how,
               "guard": {"split": "validation", "rows": len(splits.val),
                         "teacher_val_accuracy": chain.teacher.val_accuracy,
                         "winner_val_accuracy_seen_in_training": w_meas.val_accuracy},
               "table": table_rows(chain, w_meas, cv_accuracy, w_onnx),
               "out_dir": str(out), "timing_s": timing,
               "wall_time_s": round(time.perf_counter() - t0, 2)}
    write_json(out / "chain.json", section)
    print_compression(console, section)
    return section


def compress_step(exp, dataset, splits, run_dir: str | Path, *, cv_accuracy: float | None,
                  console: Console, publish=None, eta_s: float | None = None,
                  teacher_fit: dict | None = None,
                  winner_ready: Callable[[], None] | None = None) -> dict[str, Any] | None:
    """The main job's compression stage: ``compress_winner`` when ``exp.compression`` is
    enabled, else None. An unexpected error is reported and returned as ``{"status":
    "failed", "error"}`` instead of raised: the search and selection results stand."""
    if not exp.compression.enabled:
        return None
    try:
        return compress_winner(exp, dataset, splits, run_dir, cv_accuracy=cv_accuracy,
                               console=console, publish=publish, eta_s=eta_s,
                               teacher_fit=teacher_fit, winner_ready=winner_ready)
    except Exception as e:  # stage errors are recorded in the chain; this is anything else
        error = f"{type(e).__name__}: {str(e)[:300]}"
        console.print(f"warning: compression failed: {error}", style="yellow", highlight=False)
        return {"status": "failed", "error": error}


def _rebuild(arch: dict, checkpoint: dict) -> torch.nn.Module:
    from automl.task import task_of

    task = task_of((checkpoint.get("config") or {}).get("task"))
    model = task.build(arch, tuple(checkpoint["input_shape"]), checkpoint["num_classes"])
    model.load_state_dict(checkpoint["model"])
    return model.eval()


ONNX_KEYS = ("onnx_file", "onnx_bytes", "onnx_max_abs_diff", "onnx_argmax_agreement",
             "ort_latency_ms_b1", "ort_latency_ms_b64", "onnx_skipped")


def _onnx_columns(onnx) -> dict[str, Any]:
    """The table's ONNX columns from an ``OnnxExport`` (all None without one)."""
    if onnx is None:
        return dict.fromkeys(ONNX_KEYS)
    return {"onnx_file": str(onnx.path) if onnx.path else None, "onnx_bytes": onnx.bytes,
            "onnx_max_abs_diff": onnx.max_abs_diff,
            "onnx_argmax_agreement": onnx.argmax_agreement,
            "ort_latency_ms_b1": onnx.latency_ms_b1, "ort_latency_ms_b64": onnx.latency_ms_b64,
            "onnx_skipped": onnx.skipped}


def table_rows(chain, winner_meas, cv_accuracy: float | None,
               winner_onnx=None) -> list[dict[str, Any]]:
    """Rows of the compression table: the deployed winner, the chain's teacher, each
    accepted stage and an accepted ONNX Runtime int8 model (``NN_quantize_ort``).

    Keys: ``name``, ``role``, ``params``, ``nonzero_params``, ``macs``, ``size_bytes``
    (state_dict file), ``latency_ms_b1``, ``latency_ms_b64`` (PyTorch, ms, p50),
    ``val_accuracy``, ``test_accuracy``, ``cv_accuracy``, ``agreement`` (test argmax vs
    ``00_teacher``) and the ONNX columns ``onnx_file``, ``onnx_bytes``,
    ``onnx_max_abs_diff`` and ``onnx_argmax_agreement`` (ONNX Runtime vs PyTorch on the
    test split), ``ort_latency_ms_b1``, ``ort_latency_ms_b64`` (ONNX Runtime, ms, p50) and
    ``onnx_skipped`` (why there is no ONNX file). The ONNX Runtime int8 row has no PyTorch
    figures (None) and counts its source model's parameters and MACs; its parity columns
    are None (it is a different, quantized model; ``agreement`` says how close it is).
    """
    rows = []
    accepted = [(s.stage, s.measurement, s.onnx) for s in chain.stages
                if s.status == "accepted"]
    by_name = {chain.teacher.name: chain.teacher, **{m.name: m for _, m, _ in accepted}}
    for role, m, onnx in [("winner (train + val rows)", winner_meas, winner_onnx),
                          ("teacher (train rows)", chain.teacher, chain.teacher_onnx)] + accepted:
        d = m.to_dict()
        rows.append({"name": d["name"], "role": role,
                     **{k: d[k] for k in ("params", "nonzero_params", "macs", "size_bytes",
                                          "latency_ms_b1", "latency_ms_b64")},
                     "val_accuracy": None if m is winner_meas else d["val_accuracy"],
                     "test_accuracy": d["accuracy"],
                     "cv_accuracy": cv_accuracy if m in (winner_meas, chain.teacher) else None,
                     "agreement": d["agreement"], **_onnx_columns(onnx)})
    for s in chain.stages:
        q = s.onnx_int8
        if q is None or q.status != "accepted":
            continue
        src = by_name.get(q.source)
        rows.append({"name": q.name, "role": f"ONNX Runtime static int8 of {q.source}",
                     "params": src.params if src else None,
                     "nonzero_params": src.nonzero_params if src else None,
                     "macs": src.macs if src else None, "size_bytes": None,
                     "latency_ms_b1": None, "latency_ms_b64": None,
                     "val_accuracy": q.val_accuracy, "test_accuracy": q.accuracy,
                     "cv_accuracy": None, "agreement": q.agreement,
                     "onnx_file": str(q.path), "onnx_bytes": q.bytes, "onnx_max_abs_diff": None,
                     "onnx_argmax_agreement": None, "ort_latency_ms_b1": q.latency_ms_b1,
                     "ort_latency_ms_b64": q.latency_ms_b64, "onnx_skipped": None})
    return rows


def print_compression(console: Console, section: dict) -> None:
    """The compression table (rich), the ONNX Runtime table, then one line per stage: its
    status and, for an accepted one, its validation drop; for the others, the reason."""
    regression = section.get("metric") == "r2"  # val, test, CV and agree are R² then
    title = ("compression (CPU p50 latency in ms; val, test, CV: R²; agree: R² of the test "
             "outputs against 00_teacher's)" if regression else
             "compression (CPU p50 latency in ms; agree: test argmax vs 00_teacher)")
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=0, show_edge=False)
    # unstructured pruning zeroes weights without removing them: show the non-zero count
    sparse = any(r.get("nonzero_params") not in (None, r["params"]) for r in section["table"])
    cols = ("model", "params", *(("non-zero",) if sparse else ()), "MACs", "file", "b1", "b64",
            "val", "test", "CV", "agree")
    for col in cols:
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)

    def f(v, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for r in section["table"]:
        if r.get("size_bytes") is None and r.get("onnx_bytes") is not None:
            continue  # an ONNX-only model: in the ONNX Runtime table
        nonzero = (f(r.get("nonzero_params"), ","),) if sparse else ()
        table.add_row(r["name"], f(r["params"], ","), *nonzero, _si(r["macs"]),
                      _si(r["size_bytes"], "B"),
                      f(r["latency_ms_b1"], ".3f"), f(r["latency_ms_b64"], ".2f"),
                      f(r["val_accuracy"], ".4f"), f(r["test_accuracy"], ".4f"),
                      f(r["cv_accuracy"], ".4f"), f(r["agreement"], ".4f"))
    console.print(table)
    onnx_rows = [r for r in section["table"] if r.get("onnx_bytes") is not None]
    if onnx_rows:
        ort = Table(title="ONNX Runtime (CPU p50 ms; |diff|, agree: vs PyTorch on the test "
                          "split)", box=box.SIMPLE_HEAD, padding=0, show_edge=False)
        for col in ("model", "file", "max |diff|", "agree", "ort b1", "ort b64", "test"):
            ort.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
        for r in onnx_rows:
            ort.add_row(r["name"], _si(r["onnx_bytes"], "B"), f(r["onnx_max_abs_diff"], ".1e"),
                        f(r["onnx_argmax_agreement"], ".4f"), f(r["ort_latency_ms_b1"], ".3f"),
                        f(r["ort_latency_ms_b64"], ".2f"), f(r["test_accuracy"], ".4f"))
        console.print(ort)
    for r in section["table"]:
        if r.get("onnx_skipped"):
            console.print(f"  {r['name']}: no ONNX file: {r['onnx_skipped']}", highlight=False)
    for s in section["stages"]:
        drop = s.get("val_accuracy_drop")
        note = (f", val drop {drop:+.4f} (max {s['max_accuracy_drop']})"
                if drop is not None and s["status"] == "accepted" else "")
        line = f"  #{s['index']} {s['stage']}: {s['status']}{note}"
        console.print(line + (f": {s['reason']}" if s.get("reason") else ""), highlight=False)
        q = s.get("onnx_int8")
        if q:
            qdrop = q.get("val_accuracy_drop")
            qnote = f", val drop {qdrop:+.4f}" if qdrop is not None else ""
            console.print(f"  #{s['index']} {q['name']} (ONNX Runtime int8 of {q['source']}): "
                          f"{q['status']}{qnote}" + (f": {q['reason']}" if q.get("reason")
                                                     else ""), highlight=False)
    console.print(f"compress {section['wall_time_s']:.0f}s; files in {section['out_dir']}",
                  highlight=False)


def _si(v: float | None, unit: str = "") -> str:
    """``12.3k``/``4.56M`` style (decimal prefixes) for MACs and bytes."""
    if v is None:
        return "-"
    for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g}{prefix}{unit}"
    return f"{v:.0f}{unit}"


def compress_run(run_dir: str | Path, spec: str | Path | None = None,
                 console: Console | None = None) -> dict[str, Any]:
    """``automl compress RUN_DIR``: re-run compression alone on a finished run and update
    its ``summary.json`` (``compression`` section) and ``compression/`` folder.

    The run's ``spec.yaml`` rebuilds the same data and split (``data.seed``); ``spec``,
    when given, replaces only its ``compression`` section.

    Raises:
        DataError: RUN_DIR does not exist or lacks ``spec.yaml``, ``best/model.pt`` or ``summary.json``
            (not a finished run), or its data changed since the run (checksum).
        SpecError: a spec is invalid, or the chain lists no stage.
    """
    from automl.data import load_dataset, split_dataset
    from automl.rundir import read_summary, require_run_dir
    from automl.spec import load_run_spec, load_spec

    run_dir = require_run_dir(run_dir)
    for name in REQUIRED:
        if not (run_dir / name).is_file():
            raise DataError(f"{name} is missing, so this is not a finished run",
                            where=str(run_dir / name),
                            fix="pass a run directory written by `automl search`")
    from automl.models.user import read_record, use_record

    for line in use_record(read_record(run_dir)):  # a user's model imports as in the run
        (console or Console()).print(f"warning: {line}", style="yellow", highlight=False)
    exp = load_run_spec(run_dir)
    where = str(run_dir / "spec.yaml")
    if spec is not None:
        chain = load_spec(spec).compression.model_dump(mode="json")
        exp, where = load_run_spec(run_dir, {"compression": chain}), str(spec)
    if not exp.compression.enabled:
        raise SpecError("compression.stages: compression is disabled or lists no stage",
                        where=where, fix="pass --spec with a compression section")
    summary = read_summary(run_dir)
    dataset = load_dataset(exp.data, exp.task)
    recorded = (summary.get("data") or {}).get("sha256")
    if recorded and recorded != dataset.checksum:
        raise DataError(f"the data changed since the run (sha256 {dataset.checksum[:12]} vs "
                        f"{recorded[:12]} recorded)", where=dataset.name,
                        fix="restore the data the run used")
    splits = split_dataset(dataset, exp.data)
    cv = ((summary.get("winner") or {}).get("cv") or {}).get("accuracy") or {}
    section = compress_winner(exp, dataset, splits, run_dir, cv_accuracy=cv.get("mean"),
                              console=console)
    summary["compression"] = section
    write_json(run_dir / "summary.json", summary)
    return section
