"""Cross-validation compute with and without fold-level halving, on a finished run: not a test.

Reads ``RUN_DIR/spec.yaml``, ``trials.json`` and ``leaderboard.json`` (the top k the main
job cross-validated), then cross-validates the same candidates on a local Ray twice:
``fold_halving: false`` (reusing ``RUN_DIR/cv.json`` when it was made that way) and
``fold_halving: true`` with ``--margin``. Prints fold trainings, epochs, training and
wall seconds, the winner and its CV mean ± std for each, and whether the winner changed.

Usage: ``.venv/bin/python benchmarks/cv_halving.py RUN_DIR [--margin 0.01] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--margin", type=float, default=None,
                    help="selection.halving_margin (default: the spec's)")
    ap.add_argument("--out", type=Path, default=None, help="write the comparison as JSON")
    args = ap.parse_args()

    from automl import cluster as runtime
    from automl.data import load_dataset, split_indices
    from automl.search import TrialRecord
    from automl.selection import cross_validate, print_cv_table
    from automl.spec import load_spec

    run = args.run_dir
    overrides = {"selection.fold_halving": True}
    if args.margin is not None:
        overrides["selection.halving_margin"] = args.margin
    exp = load_spec(run / "spec.yaml")
    records = json.loads((run / "trials.json").read_text())
    trials = {t["trial_id"]: TrialRecord(**t) for t in records}
    top = [trials[r["trial_id"]] for r in json.loads((run / "leaderboard.json").read_text())]
    data = load_dataset(exp.data)
    splits = split_indices(data.y, exp.data.test_size, exp.data.val_size, exp.data.seed)
    console = Console()
    handle = runtime.connect(None, exp.resources.num_cpus, exp.resources.object_store_mb,
                             dashboard_port=0)
    try:
        cv_path = run / "cv.json"
        plain = json.loads(cv_path.read_text()) if cv_path.exists() else None
        if plain is None or plain.get("halving") is not None:
            off = load_spec(run / "spec.yaml", {"selection.fold_halving": False})
            plain = cross_validate(off, data, splits.pool, top, console=console).to_dict()
        halved = cross_validate(load_spec(run / "spec.yaml", overrides), data, splits.pool, top,
                                console=console)
        print_cv_table(console, halved)
    finally:
        runtime.shutdown(handle)
    rows = {"without halving": plain, "with halving": halved.to_dict()}
    metric = plain["metric"]
    out = {}
    for name, cv in rows.items():
        win = next(c for c in cv["candidates"] if c["trial_id"] == cv["winner"])
        s = win["summary"][metric]
        out[name] = {**cv["compute"], "winner": cv["winner"], "mean": s["mean"], "std": s["std"]}
        console.print(f"{name:16s} {cv['compute']['fold_trainings']:3d} fold trainings, "
                      f"{cv['compute']['fold_epochs']:4d} epochs, "
                      f"{cv['compute']['train_time_s']:7.1f}s training, "
                      f"{cv['compute']['wall_time_s']:6.1f}s wall; winner {cv['winner']} "
                      f"{metric} {s['mean']:.4f} ± {s['std']:.4f}", highlight=False)
    changed = out["without halving"]["winner"] != out["with halving"]["winner"]
    out["winner_changed"] = changed
    out["halving"] = halved.halving
    console.print(f"winner changed by halving: {'yes' if changed else 'no'}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
