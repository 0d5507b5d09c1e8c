"""Model cards: one Markdown file (``MODEL_CARD.md``) beside each registered model version,
after Mitchell et al. 2019, "Model Cards for Model Reporting" (FAT*; arXiv:1810.03993).

A card says what data the model saw and how it was split, the search that found it
(trials, budget, sampler, scheduler), its cross-validated scores with 95% intervals, its
test scores and a confusion-matrix summary, its size, MACs and CPU latency (PyTorch and
ONNX Runtime), its lineage, and how to load it (PyTorch, TorchScript, ONNX Runtime), with
a Python snippet that runs as written (absolute paths, a random input of the model's
input shape).

Everything comes from the run's summary dict, the spec and the files in the run
directory: ``render_card`` does no training and no measuring (``measure_checkpoint``
measures a checkpoint when the run did not, e.g. without a compression chain).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CV_METRICS = ("accuracy", "balanced_accuracy", "precision_macro", "recall_macro", "f1_macro")
#: the fold and test scores a card lists per task (``roc_auc``/``pr_auc`` when present)
TASK_SCORES = {"classification": (*CV_METRICS, "roc_auc", "pr_auc"),
               "regression": ("r2", "rmse", "mae")}


@dataclass(frozen=True)
class CardInput:
    """What one card is made of. ``kind``: ``winner``, ``compressed`` or ``onnx-int8``;
    ``files``: the version's file names; ``measurement``: ``params``, ``nonzero_params``,
    ``macs``, ``size_bytes``, ``latency_ms_b1``/``_b64`` (PyTorch) and
    ``ort_latency_ms_b1``/``_b64`` (ONNX Runtime), ms, CPU p50 (any may be missing);
    ``input_shape``: one example's shape as the model takes it (after preprocessing);
    ``file_sizes``: bytes of each file of the version."""

    name: str
    version: int
    folder: Path
    registry: Path
    kind: str
    format: str
    files: tuple[str, ...]
    lineage: dict[str, Any]
    summary: dict[str, Any]
    spec: dict[str, Any]
    input_shape: tuple[int, ...]
    measurement: dict[str, Any] = field(default_factory=dict)
    confusion: dict[str, Any] | None = None
    export_name: str | None = None
    file_sizes: dict[str, int] = field(default_factory=dict)


def _task(c: CardInput) -> str:
    """The card's task: the run's data section says it (runs before tasks: classification)."""
    return (c.summary.get("data") or {}).get("task") or "classification"


def _f(v: Any, spec: str = ".4f") -> str:
    return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _data(c: CardInput) -> list[str]:
    d, ds = c.summary.get("data") or {}, c.spec.get("data") or {}
    split = d.get("split") or {}
    cleaning = d.get("cleaning") or {}
    counts = d.get("class_counts") or {}
    target = d.get("target") or {}
    what = (["target (regression)", f"{_f(target.get('min'), '.4g')} to "
                                    f"{_f(target.get('max'), '.4g')}, mean "
                                    f"{_f(target.get('mean'), '.4g')}, std "
                                    f"{_f(target.get('std'), '.4g')}"]
            if _task(c) == "regression" else
            ["classes", f"{len(counts)}: " + ", ".join(f"{k} ({v})" for k, v in
                                                      list(counts.items())[:20])])
    rows = [["source", d.get("name", ds.get("source"))], ["kind", d.get("kind", "-")],
            ["task", _task(c) + (f" ({d['task_reason']})" if d.get("task_reason") else "")],
            ["rows (after cleaning)", d.get("rows", "-")], what,
            ["model input shape (one example)", tuple(d.get("model_input_shape")
                                                      or c.input_shape)],
            ["split (stratified, seed " + str(ds.get("seed", "-")) + ")",
             ", ".join(f"{k} {v}" for k, v in split.items())],
            ["removed", f"{cleaning.get('duplicate_rows', 0)} duplicate rows, "
                        f"{cleaning.get('missing_target_rows', 0)} rows without a label"],
            ["data sha256", f"`{d.get('sha256', '-')}`"]]
    return ["## Data and splits", "", *_table(["", ""], rows), "",
            "The search trained on the train split and scored on the validation split; "
            "cross-validation used train + validation rows; the test split was read once, "
            "by the final model.", ""]


def _search(c: CardInput) -> list[str]:
    s, sch = c.spec.get("search") or {}, c.spec.get("scheduler") or {}
    trials = c.summary.get("trials") or {}
    ended = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in trials.items() if k != "total")
    wall = (c.summary.get("search") or {}).get("wall_time_s")
    sched = sch.get("type", "-")
    if sched == "asha":
        top = sch.get("max_epochs")
        sched += (f" (grace period {sch.get('grace_period')} epoch(s), reduction factor "
                  f"{sch.get('reduction_factor')}"
                  + (f", at most {top} epochs)" if top else ", up to each trial's epochs)"))
        rungs = (c.summary.get("search") or {}).get("rungs") or {}
        if rungs:
            sched += (f"; {rungs['brackets']} bracket(s), {sch.get('cutoff', 'rank')} cutoff, "
                      f"rungs at epochs {', '.join(map(str, rungs['rungs']))}")
            if rungs.get("adaptive"):
                sched += (f", {'one bracket' if rungs.get('narrowed') else 'brackets'} "
                          f"starting at epoch {rungs['start_epoch']} at the end")
    rows = [["trials", f"{trials.get('total', '-')} of {s.get('num_samples', '-')} requested"
                       + (f" ({ended})" if ended else "")],
            ["sampler", f"{s.get('sampler', '-')} (Optuna), seed {s.get('seed', '-')}"],
            ["scheduler", sched],
            ["budget", f"{s.get('num_samples', '-')} trials, time budget "
                       f"{_f(s.get('time_budget_s'), '.0f')} s"],
            ["search wall time", f"{_f(wall, '.0f')} s"],
            ["search metric", f"{c.summary.get('metric', '-')} ({c.summary.get('mode', '-')})"]]
    return ["## The search that found it", "", *_table(["", ""], rows), ""]


def _cv(c: CardInput) -> list[str]:
    win = c.summary.get("winner") or {}
    cv = win.get("cv") or {}
    plan = (c.summary.get("cv") or {}).get("plan") or {}
    if not cv:
        return ["## Cross-validation", "", "Not cross-validated.", ""]
    rows = []
    shown = [m for m in TASK_SCORES[_task(c)] if cv.get(m)]
    for m in shown:
        s = cv.get(m) or {}
        ci = s.get("ci95")
        rows.append([m, _f(s.get("mean")), _f(s.get("std")),
                     f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "-", s.get("n", "-")])
    folds = f"{plan.get('n_folds', '-')} folds x {plan.get('n_repeats', 1)} repeat(s)" \
        if plan else "folds"
    kinds = {(cv.get(m) or {}).get("interval", "t") for m in shown}
    how = ("a Wilson score interval on the held-out rows of all folds (fewer effective rows "
           "when the folds disagree more than sampling noise explains; it stays in [0, 1])"
           if kinds == {"wilson"} else "Student's t over the folds" if kinds <= {"t"} else
           "Wilson or Student's t (see `cv.json`)")
    lines = ["## Cross-validation", "",
             f"Stratified {folds} on the train + validation rows (each fold trains this "
             f"configuration from scratch). The interval is {how}; folds share training "
             "rows, so read it as a noise scale (Nadeau & Bengio 2003).", "",
             *_table(["metric", "mean", "std", "95% CI", "folds"], rows), ""]
    if win.get("reason"):
        lines += [f"Chosen because: {win['reason']}.", ""]
    if c.kind != "winner":
        lines[2:2] = [f"These are the scores of the parent model ({c.lineage.get('parent')}) "
                      "this one was compressed from; compressed models are not re-validated by "
                      "folds (their guard is the validation split).", ""]
    return lines


def _test(c: CardInput) -> list[str]:
    t = c.lineage.get("test") or {}
    if c.kind == "winner":
        keys = (*TASK_SCORES[_task(c)], "loss")
        rows = [[k, _f(t.get(k))] for k in keys if t.get(k) is not None]
        res = t.get("residuals") or {}
        if res:
            rows.append(["residuals (prediction - target)",
                         f"mean {_f(res.get('mean'), '.4g')}, std {_f(res.get('std'), '.4g')}"
                         f", 90% within ±{_f(res.get('abs_p90'), '.4g')}, largest "
                         f"{_f(res.get('max_abs'), '.4g')}"])
        rows.append(["rows", f"{t.get('rows', '-')} test rows; trained on "
                             f"{t.get('train_rows', '-')} rows (train + validation)"])
    else:
        m = c.measurement
        score = "R²" if _task(c) == "regression" else "accuracy"  # the chain's guard score
        agree = ("R² of its outputs against the teacher's" if _task(c) == "regression"
                 else "test argmax")
        rows = [[score, _f(t.get("accuracy"))],
                [f"the chain's teacher's {score} (same test rows, same train rows)",
                 _f(t.get("teacher_accuracy"))],
                [f"agreement with the chain's teacher ({agree})", _f(m.get("agreement"))],
                [f"validation {score} (what the guard read)", _f(m.get("val_accuracy"))],
                ["trained on", "the train rows only, through the chain's teacher; the "
                               "winner's refit also trained on the validation rows, so "
                               "compare with the teacher, not with the winner"]]
    return ["## Test scores", "", *_table(["", ""], rows), ""]


def _confusion(c: CardInput) -> list[str]:
    if _task(c) == "regression":
        return []  # no classes: the residuals are under the test scores
    if not c.confusion or not c.confusion.get("matrix"):
        return ["## Confusion matrix", "",
                "Not computed for this model (see the parent's card); its test accuracy and "
                "agreement are above.", ""]
    classes = [str(k) for k in c.confusion.get("classes") or []]
    mat = c.confusion["matrix"]
    n = len(mat)
    classes = classes if len(classes) == n else [str(i) for i in range(n)]
    recall = [(mat[i][i] / sum(mat[i]) if sum(mat[i]) else None) for i in range(n)]
    pairs = sorted(((mat[i][j], classes[i], classes[j]) for i in range(n) for j in range(n)
                    if i != j and mat[i][j]), reverse=True)[:5]
    worst = min((r, k) for r, k in zip(recall, classes, strict=True) if r is not None) \
        if any(r is not None for r in recall) else None
    total = sum(map(sum, mat))
    wrong = total - sum(mat[i][i] for i in range(n))
    lines = ["## Confusion matrix (test split)", "",
             f"{wrong} of {total} test rows misclassified. Recall per class: "
             + ", ".join(f"{k} {_f(r, '.3f')}" for k, r in zip(classes, recall, strict=True))
             + "."]
    if worst is not None:
        lines.append(f"Lowest recall: class {worst[1]} ({worst[0]:.3f}).")
    lines += ["", "Most frequent confusions (true -> predicted: rows):", ""]
    lines += [f"- {a} -> {b}: {k}" for k, a, b in pairs] or ["- none"]
    return lines + ["", "The full matrix is `confusion_matrix.json` in the run directory "
                        "(rows: true class, columns: predicted class).", ""]


def _size(c: CardInput) -> list[str]:
    m = c.measurement
    sizes = ", ".join(f"`{f}` {n:,} B" for f, n in c.file_sizes.items())
    rows = [["parameters", _f(m.get("params"), ",")],
            ["non-zero parameters", _f(m.get("nonzero_params"), ",")],
            ["MACs per example", _f(m.get("macs"), ",")],
            ["files", sizes or "-"],
            ["PyTorch CPU p50 latency, batch 1 / 64 (ms)",
             f"{_f(m.get('latency_ms_b1'), '.3f')} / {_f(m.get('latency_ms_b64'), '.3f')}"],
            ["ONNX Runtime CPU p50 latency, batch 1 / 64 (ms)",
             f"{_f(m.get('ort_latency_ms_b1'), '.3f')} / {_f(m.get('ort_latency_ms_b64'), '.3f')}"]]
    threads = (c.spec.get("compression") or {}).get("latency_threads", 1)
    return ["## Size, MACs and latency", "", *_table(["", ""], rows), "",
            f"Latency: median of repeated runs on {threads} CPU thread(s) of the machine "
            "that ran the sweep (see `reproducibility.json` in the run directory).", ""]


def _lineage(c: CardInput) -> list[str]:
    lin = c.lineage
    rows = [["kind", c.kind], ["format", c.format], ["sweep", lin.get("sweep")],
            ["run directory", f"`{lin.get('run_dir')}`"], ["trial", lin.get("trial_id")],
            ["spec sha256", f"`{lin.get('spec_sha256')}`"],
            ["data sha256", f"`{lin.get('data_sha256')}`"],
            ["parent", lin.get("parent") or "-"],
            ["compression", " -> ".join(lin.get("compression") or []) or "-"]]
    for m in lin.get("user_models") or []:  # the user's own model code
        rows.append([f"model code `{m['import_path']}`",
                     f"version {m.get('version') or '-'}, source sha256 `{m['sha256']}` "
                     f"({m['files']} file(s) in `{m['shipped'] or m['root']}`)"])
    params = lin.get("params")
    lines = ["## Lineage", "", *_table(["", ""], rows), ""]
    if params:
        lines += ["Sampled hyperparameters:", "", "```json",
                  json.dumps(params, indent=1, sort_keys=True), "```", ""]
    lines += ["`automl reproduce <run directory>` retrains the winner from this record and "
              "checks that its weights come out identical.", ""] if c.kind == "winner" else []
    return lines


def snippet(c: CardInput) -> str:
    """The Python loading snippet: every way this version can be loaded, run on one random
    batch; prints one line per way (``pytorch`` or, for an ONNX-only version,
    ``registry``; ``torchscript``; ``onnx``) with the predicted classes (regression: the
    predicted values), then checks they agree (the same file or weights behind each). A
    user's own model is imported first, from the folder the run imported it from (lineage
    ``user_models``)."""
    regression = _task(c) == "regression"
    # classes, or values rounded so that engines' last-bit differences do not count
    take = (".reshape(-1).tolist()" if regression else ".argmax(1).tolist()")
    agree = ("assert all(all(abs(a - b) <= 1e-3 * (1 + abs(b)) for a, b in zip(p, preds[{w!r}]))"
             " for p in preds.values()), preds" if regression else
             "assert all(p == preds[{w!r}] for p in preds.values()), preds")
    root, ref = c.registry.resolve(), f"{c.name}@{c.version}"
    folder = c.folder.resolve()
    way = "registry" if c.kind == "onnx-int8" else "pytorch"  # an ONNX-only version loads
    # as an ONNX Runtime session behind the registry's call
    shape = ", ".join(str(d) for d in c.input_shape)
    code = []  # the user's own model: its factory imported from where the run found it
    for m in c.lineage.get("user_models") or []:
        module, attr = m["import_path"].split(":", 1)
        if m.get("shipped") and not code:
            code += ["import sys", ""]
        if m.get("shipped"):
            code += [f"sys.path.insert(0, {m['root']!r})  # the folder {module} came from"]
        code += [f"from {module} import {attr.split('.')[0]}  # noqa: F401 - the model's "
                 f"factory, {m['import_path']}", ""]
    lines = [*code, "import torch", "", "from automl.registry import Registry", "",
             "torch.manual_seed(0)",
             f"x = torch.rand(4, {shape})  # 4 inputs as the model takes them (preprocessed)",
             "preds = {}", "",
             ("# PyTorch: rebuilt from the recorded config, weights loaded weights-only"
              if way == "pytorch" else "# the registry: an ONNX Runtime session behind a call"),
             f"model, version = Registry({str(root)!r}).load({ref!r})",
             "with torch.no_grad():",
             f"    preds[{way!r}] = model(x){take}"]
    ts = "model.ts" if c.kind == "winner" else f"{c.export_name}.ts"
    if ts in c.files:
        lines += ["", "# TorchScript: needs torch only",
                  f"scripted = torch.jit.load({str(folder / ts)!r})",
                  "with torch.no_grad():",
                  f"    preds['torchscript'] = scripted(x){take}"]
    onnx = "model.onnx" if c.kind == "winner" else f"{c.export_name}.onnx"
    if onnx in c.files:
        lines += ["", "# ONNX Runtime: needs onnxruntime and numpy only",
                  "import onnxruntime as ort", "",
                  f"session = ort.InferenceSession({str(folder / onnx)!r}, "
                  "providers=['CPUExecutionProvider'])",
                  "preds['onnx'] = torch.from_numpy(session.run(None, {'input': x.numpy()})[0])"
                  + take]
    lines += ["", "for way, p in preds.items():", "    print(way, p)"]
    lines += [agree.format(w=way)]
    return "\n".join(lines) + "\n"


def _load(c: CardInput) -> list[str]:
    notes = []
    if c.kind == "winner" and "preprocessor.skops" in c.files:
        notes = ["Tabular data: raw rows become model inputs with "
                 f"`automl.data.load_preprocessor({str(c.folder / 'preprocessor.skops')!r})"
                 ".transform(frame)`.", ""]
    missing = []
    stem = "model" if c.kind == "winner" else c.export_name
    for ext, what in ((".ts", "TorchScript"), (".onnx", "ONNX")):
        if f"{stem}{ext}" not in c.files and c.kind != "onnx-int8":
            why = (c.measurement.get("onnx_skipped") if ext == ".onnx" else
                   c.measurement.get("script_skipped")) or "it could not be exported"
            missing.append(f"No {what} file: {why}.")
    return ["## How to load it", "", *notes,
            "PyTorch (`automl.registry.Registry(...).load`, weights-only), TorchScript "
            "(`torch.jit.load`, no automl needed) and ONNX Runtime (`onnxruntime`, input "
            "`input` with a dynamic batch axis, output `logits`: "
            + ("one value per example in the target's units):" if _task(c) == "regression"
               else "one score per class):"), "",
            "```python", snippet(c).rstrip(), "```", "", *missing,
            *([""] if missing else [])]


def render_card(c: CardInput) -> str:
    """The card's Markdown (module docstring)."""
    arch = (c.lineage.get("config") or {}).get("arch") or {}
    what = {"winner": "the cross-validation winner, retrained on train + validation rows",
            "compressed": f"a compressed model ({' -> '.join(c.lineage.get('compression') or [])})"
                          f" of {c.lineage.get('parent')}",
            "onnx-int8": f"ONNX Runtime's static int8 of {c.lineage.get('source_model')} "
                         f"(parent {c.lineage.get('parent')})"}[c.kind]
    head = [f"# {c.name}@{c.version}", "",
            f"{what[0].upper() + what[1:]} of the sweep "
            f"`{c.lineage.get('sweep')}`" + (f" ({arch.get('family')})" if arch else "")
            + f"; registered {c.lineage.get('registered_at', '')}.".rstrip(), ""]
    parts = [head, _data(c), _search(c), _cv(c), _test(c), _confusion(c), _size(c),
             _lineage(c), _load(c)]
    return "\n".join(line for part in parts for line in part).rstrip() + "\n"


def measure_checkpoint(path: str | Path, threads: int = 1, repeats: int = 20) -> dict[str, Any]:
    """Parameters, MACs and CPU p50 latency (ms, batch 1 and 64, random inputs) of a
    ``TrainState.checkpoint`` file, for a card whose run measured nothing."""
    import torch

    from automl.models.cost import count_macs_params, latency_ms
    from automl.train import load_checkpoint

    model, ckpt = load_checkpoint(path)
    x = torch.rand(64, *ckpt["input_shape"], generator=torch.Generator().manual_seed(0))
    macs, params = count_macs_params(model, x)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        b1, b64 = latency_ms(model, x[:1], repeats), latency_ms(model, x, max(3, repeats // 3))
    finally:
        torch.set_num_threads(before)
    return {"params": params, "nonzero_params": int(sum(int(torch.count_nonzero(p))
                                                        for p in model.parameters())),
            "macs": macs, "latency_ms_b1": b1, "latency_ms_b64": b64}


def extract_snippet(card_text: str) -> str:
    """The first ```python block of a card (what a user copies)."""
    start = card_text.index("```python\n") + len("```python\n")
    return card_text[start:card_text.index("```", start)]
