"""5. Compression of the digits winner (``automl.compress``).

The teacher is the project's CV winner from this invocation's digits run
(``best/model.pt``: retrained on train + validation rows); the chain is the one of
``benchmarks/compress_digits.py`` (distill into a smaller ResNet, structured pruning at
ratio 0.3, static int8 quantization; each stage may lose at most 2 points of test
accuracy against the teacher), on the project's own split so the test rows stay unseen.
The student halves the winner's width (at least 4) with one block per stage, so it is
smaller than whatever won. Without a winner in this invocation (``--only compression``),
``compress_digits.py`` runs as it is, with its own fixed ResNet teacher.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from benchmarks._common import REPO, Goal, Result, Table, run_python, tail

NAME = "compression"
TITLE = "Compression of the digits winner"
COLUMNS = ["model", "params", "nonzero params", "MACs", "file bytes", "p50 ms batch 1",
           "p50 ms batch 64", "test accuracy", "agreement with teacher"]


def _landed() -> bool:
    try:
        import automl.compress  # noqa: F401
    except ImportError:
        return False
    return True


def _rows(chain: dict) -> list[list]:
    measured = [chain["teacher"]] + [s["measurement"] for s in chain["stages"]
                                     if s.get("measurement")]
    return [[m["name"], m["params"], m["nonzero_params"], m["macs"], m["size_bytes"],
             m["latency_ms_b1"], m["latency_ms_b64"], m["accuracy"], m["agreement"]]
            for m in measured]


def compress_winner(run_dir: Path, quick: bool, out: Path) -> dict:
    """Run the chain on the winner of ``run_dir``; the chain's JSON (``to_dict``)."""
    import torch

    from automl.compress import make_context, run_chain
    from automl.data import fit_transform, load_dataset, split_indices
    from automl.spec import load_spec
    from automl.train import load_checkpoint

    exp = load_spec(run_dir / "spec.yaml")
    ds = load_dataset(exp.data)
    s = split_indices(ds.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    train, val, test = fit_transform(ds, s.train, s.val, s.test)
    teacher, ckpt = load_checkpoint(run_dir / "best" / "model.pt")
    arch = dict(ckpt["config"]["arch"])
    student = {**arch, "width": max(4, int(arch.get("width", 16)) // 2), "depth": 1}
    epochs = 2 if quick else 40
    torch.set_num_threads(1)
    ctx = make_context(train, val, test, out, seed=exp.search.seed, lr=1e-3, threads=1,
                       latency_repeats=5 if quick else 50, teacher_arch=arch)
    chain = [
        {"stage": "distill", "student": student, "temperature": 4.0, "alpha": 0.7,
         "epochs": epochs, "lr": 2e-3, "max_accuracy_drop": 0.02},
        {"stage": "prune", "method": "structured", "pruning_ratio": 0.3,
         "fine_tune_epochs": 2 if quick else 20, "lr": 5e-4, "iterative_steps": 1,
         "max_accuracy_drop": 0.02},
        {"stage": "quantize", "method": "static", "calibration_batches": 8,
         "max_accuracy_drop": 0.02},
    ]
    result = run_chain(teacher, chain, ctx).to_dict()
    result["student_arch"], result["teacher_arch"] = student, arch
    return result


def run(quick: bool, ctx: dict) -> Result:
    res = Result(NAME, TITLE)
    if not _landed():
        res.status, res.reason = "not landed", "automl.compress is not in this tree"
        return res
    out = Path(tempfile.mkdtemp(prefix="bench-compression-"))
    run_dir = Path(ctx["automl_run"]["run_dir"]) if ctx.get("automl_run") else None
    if run_dir is not None and (run_dir / "best" / "model.pt").exists():
        chain = compress_winner(run_dir, quick, out)
        res.settings = {"teacher": f"CV winner of {run_dir}", "teacher_arch":
                        chain["teacher_arch"], "student_arch": chain["student_arch"],
                        "split": "the project's (test rows never trained on)"}
        res.tables.append(Table("Chain: distill -> prune (structured 0.3) -> quantize "
                                "(static int8)", COLUMNS, _rows(chain)))
        stages = chain["stages"]
    else:
        args = [str(REPO / "benchmarks" / "compress_digits.py"), "--out", str(out)]
        if quick:
            args += ["--epochs", "2", "--student-epochs", "2", "--repeats", "5"]
        code, wall = run_python(args, out / "log.txt", 900)
        if code != 0:
            raise RuntimeError(f"compress_digits.py exited with {code}: {tail(out / 'log.txt')}")
        summary = json.loads((out / "summary.json").read_text())
        res.settings = {"teacher": "compress_digits.py's fixed ResNet (no search winner in "
                                   "this invocation)"}
        for name in ("chain", "prune_teacher", "quantize_teacher", "dynamic_teacher"):
            res.tables.append(Table(name, COLUMNS, _rows(summary[name])))
        stages = summary["chain"]["stages"]
        chain = summary["chain"]
    teacher = chain["teacher"]
    for s in stages:
        res.notes.append(f"stage {s['index']} {s['stage']}: {s['status']}"
                         + (f" ({s['reason']})" if s.get("reason") else ""))
    final = [s["measurement"] for s in stages if s.get("measurement")]
    if final:
        f = final[-1]
        res.goals.append(Goal(
            "final model within 2 points of the teacher's test accuracy",
            f"{f['name']}: {f['accuracy']:.4f} vs teacher {teacher['accuracy']:.4f}, "
            f"{teacher['params'] / max(f['params'], 1):.1f}x fewer parameters, "
            f"{(teacher['size_bytes'] or 0) / max(f['size_bytes'] or 1, 1):.1f}x smaller file",
            teacher["accuracy"] - f["accuracy"] <= 0.02 + 1e-9))
    res.data = {"chain": chain, "out_dir": str(out)}
    return res
