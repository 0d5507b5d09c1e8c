"""A reproducible winner: what producing ``best/model.pt`` needs is recorded in the run
directory, and ``automl reproduce RUN_DIR`` retrains the winner from that record and
compares the result with ``best/model.pt``.

The record (``reproducibility.json``, written by the main job right after the refit):
the spec and data checksums, the seeds (``data.seed`` for the split, ``search.seed``, the
winner's training seed), the configuration, the rows it trained on, and the environment
the refit ran in, captured inside the Ray task that trained it
(``automl.determinism.environment``): package
versions, torch's deterministic flags (``torch.use_deterministic_algorithms``, cuDNN's
``deterministic``/``benchmark``), intra-/inter-op thread counts, the device and the CPU's
vector instruction set (``torch.backends.cpu.get_cpu_capability``, which selects the
kernels), plus the sha256 of the weights.

Training is deterministic by construction: ``automl.selection.fit_and_score`` runs under
``automl.determinism.deterministic()`` (deterministic algorithms, cuDNN deterministic, no autotuning), the
model is initialised after ``torch.manual_seed(seed)``, batch order comes from a seeded
generator and augmentation and dropout draw from the seeded global generator. On the CPU,
with the recorded thread count, package versions and instruction set, retraining gives
the same weights bit for bit. On a GPU some kernels have no deterministic version (and
``CUBLAS_WORKSPACE_CONFIG`` must be set before CUDA starts), so there the check falls back
to the test score: it must agree with the recorded one within the standard error of the
winner's CV mean (std / sqrt(folds)).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from automl._io import write_json
from automl.determinism import weights_sha256
from automl.errors import DataError, RunError
from automl.task import task_of

RECORD = "reproducibility.json"
RESULT = "reproduce.json"
FORMAT = "automl.reproducibility/1"


def write_record(run_dir: str | Path, exp, splits, final: dict, *, spec_sha256: str,
                 data_sha256: str) -> dict[str, Any]:
    """Write ``RUN_DIR/reproducibility.json`` for the refit ``final``
    (``automl.selection.refit_and_test``'s result); returns the record."""
    config = final["checkpoint"]["config"]
    record = {
        "format": FORMAT,
        "what": "how best/model.pt was trained: retrain with `automl reproduce RUN_DIR`",
        "spec_sha256": spec_sha256, "data_sha256": data_sha256,
        "seeds": {"data.seed (split, folds)": exp.data.seed, "search.seed": exp.search.seed,
                  "training seed": config.get("seed")},
        "config": config,
        "rows": {"train (train + validation)": int(len(splits.pool)),
                 "test": int(len(splits.test))},
        "precision": exp.resources.precision,
        "environment": final.get("environment"),
        "weights_sha256": weights_sha256(final["checkpoint"]["model"]),
        "test": final["test"],
    }
    if exp.user_code():  # the user's model code: where it was, what it was
        from automl.models.user import describe_all

        record["user_models"] = [m.to_dict() for m in describe_all(exp).values()]
    write_json(Path(run_dir) / RECORD, record)
    return record


@dataclass(frozen=True)
class Reproduction:
    """The outcome of ``reproduce_run``: ``identical`` weights (bit for bit), else
    ``max_abs_diff``; the retrained ``test_score`` (``metric``: accuracy, or R² for
    regression) against the ``recorded`` one and the CV standard error ``cv_se`` it must
    fall within; ``held``: ``weights identical``,
    ``test score within the CV standard error`` or None (neither); ``differences``: what
    differs from the recorded environment."""

    run_dir: str
    identical: bool
    max_abs_diff: float | None
    test_score: float
    recorded_score: float | None
    cv_se: float | None
    held: str | None
    device: str
    threads: int
    differences: list[str]
    weights_sha256: str
    train_time_s: float
    metric: str = "accuracy"

    def line(self) -> str:
        """The one line ``automl reproduce`` prints."""
        rec = "-" if self.recorded_score is None else f"{self.recorded_score:.4f}"
        test = f"test {self.metric} {self.test_score:.4f} (recorded {rec})"
        where = f"{self.device}, {self.threads} thread(s)"
        if self.identical:
            return (f"reproduce {self.run_dir}: weights identical to best/model.pt (sha256 "
                    f"{self.weights_sha256[:12]}; {where}); {test}")
        diff = f"weights differ (max |diff| {self.max_abs_diff:.2e}; {where})"
        se = "-" if self.cv_se is None else f"{self.cv_se:.4f}"
        if self.held:
            return (f"reproduce {self.run_dir}: {diff}; {test} agrees within the CV standard "
                    f"error {se}")
        extra = f"; differs from the record: {'; '.join(self.differences)}" \
            if self.differences else ""
        return (f"{diff} and {test} is outside the CV standard error {se}{extra}")


def _differences(recorded: dict, now: dict) -> list[str]:
    out = []
    for pkg, v in (recorded.get("packages") or {}).items():
        if now["packages"].get(pkg) != v:
            out.append(f"{pkg} {now['packages'].get(pkg)} vs {v}")
    cap = (recorded.get("device") or {}).get("cpu_capability")
    if cap and cap != now["device"]["cpu_capability"]:
        out.append(f"CPU capability {now['device']['cpu_capability']} vs {cap}")
    return out


def reproduce_run(run_dir: str | Path, console=None) -> Reproduction:
    """``automl reproduce RUN_DIR``: retrain the winner as ``reproducibility.json`` records
    (same data, split, config, seeds, thread count, deterministic flags; on the recorded
    device when it is here, else the CPU), in this process, and compare with
    ``best/model.pt``. Writes ``RUN_DIR/reproduce.json``.

    Raises:
        DataError: RUN_DIR does not exist, is not a finished run with a reproducibility
            record, or its data changed (sha256).
        RunError: neither the weights are identical nor the test accuracy is within the CV
            standard error of the recorded one.
    """
    import torch

    from automl.data import load_dataset, split_dataset
    from automl.models.user import use_record
    from automl.rundir import read_summary, require_run_dir
    from automl.selection import fit_and_score
    from automl.spec import load_run_spec

    run_dir = require_run_dir(run_dir)
    for name in ("spec.yaml", "summary.json", "best/model.pt", RECORD):
        if not (run_dir / name).is_file():
            raise DataError(f"{name} is missing, so there is nothing to reproduce from",
                            where=str(run_dir / name),
                            fix="pass a run directory of a finished `automl search` (runs "
                                "from before reproducibility records cannot be reproduced)")
    record = json.loads((run_dir / RECORD).read_text())
    # a user's model imports from where the run imported it; a changed source is a
    # difference from the record
    code_changes = use_record(record.get("user_models") or [])
    exp, summary = load_run_spec(run_dir), read_summary(run_dir)
    dataset = load_dataset(exp.data, exp.task)
    if dataset.checksum != record.get("data_sha256"):
        raise DataError(f"the data changed since the run (sha256 {dataset.checksum[:12]} vs "
                        f"{str(record.get('data_sha256'))[:12]} recorded)", where=dataset.name,
                        fix="restore the data the run used")
    splits = split_dataset(dataset, exp.data)
    env = record.get("environment") or {}
    threads = int((env.get("threads") or {}).get("intra_op") or exp.resources.cpus_per_worker)
    on_gpu = str((env.get("device") or {}).get("type", "cpu")).startswith("cuda") \
        and torch.cuda.is_available()
    if console is not None:
        console.print(f"retrain {summary.get('winner', {}).get('trial_id', 'the winner')} on "
                      f"{len(splits.pool)} rows ({'cuda' if on_gpu else 'cpu'}, {threads} "
                      "thread(s))", highlight=False)
    before = torch.get_num_threads()
    t0 = time.perf_counter()
    try:
        out = fit_and_score(dataset, record["config"], splits.pool, splits.test,
                            impute=exp.data.impute, cpus=threads, gpus=1.0 if on_gpu else 0.0,
                            precision=record.get("precision", "fp32") if on_gpu else "fp32",
                            keep_model=True)
    finally:
        torch.set_num_threads(before)
    ref = torch.load(run_dir / "best" / "model.pt", map_location="cpu",
                     weights_only=True)["model"]
    new = out["checkpoint"]["model"]
    same_keys = ref.keys() == new.keys()
    identical = same_keys and all(torch.equal(ref[k], new[k]) for k in ref)
    diff = None if identical or not same_keys else max(
        float((ref[k].double() - new[k].double()).abs().max()) if ref[k].numel() else 0.0
        for k in ref)
    metric = task_of(exp.task).guard_metric  # accuracy, or R² for regression
    acc = out["scores"][metric]
    recorded = (summary.get("test") or {}).get(metric)
    cv = ((summary.get("winner") or {}).get("cv") or {}).get(metric) or {}
    se = cv["std"] / math.sqrt(cv["n"]) if cv.get("std") is not None and cv.get("n") else None
    within = recorded is not None and se is not None and abs(acc - recorded) <= se + 1e-12
    held = "weights identical" if identical else (
        "test score within the CV standard error" if within else None)
    result = Reproduction(str(run_dir), identical, diff if diff is not None else
                          (None if identical else math.inf), acc, recorded, se, held,
                          "cuda" if on_gpu else "cpu", threads,
                          _differences(env, out["environment"]) + code_changes,
                          weights_sha256(new), round(time.perf_counter() - t0, 3), metric)
    write_json(run_dir / RESULT, {**asdict(result), "line": result.line(),
                                  # the names of runs before regression, for their readers
                                  "test_accuracy": acc if metric == "accuracy" else None,
                                  "environment": out["environment"]})
    if held is None:
        raise RunError(result.line(), where=str(run_dir),
                       fix=f"compare {RECORD} with this machine (packages, threads, device)")
    return result
