"""The nightly driver: the main job wrapped by warm start, transfer and champion /
challenger, as an outer layer. The main job (``automl.pipeline``) knows nothing of it:
the driver hands it a warm-started study (``<run_dir>/study.db``, seeded before the
search opens it) and initial weights, then judges the registered winner against the
champion and moves the alias. Trial code never sees any of it but the weights.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from automl.spec import Experiment

STAGE = "nightly"


def _active(exp: Experiment) -> bool:
    n = exp.nightly
    return bool(n.warm_start or n.transfer or n.promote or n.transfer_from)


def run_job(exp: Experiment, run_dir: Path, *, console: Console | None = None,
            resume: bool = False, **job) -> dict:
    """Run the main job of ``exp`` in ``run_dir``; with any ``nightly`` feature set, around
    it: seed the study from ``nightly.warm_start`` (not on resume: the study was seeded
    then), hand trials the champion's weights (``nightly.transfer``), hand the sampler the
    earlier studies of ``nightly.transfer_from`` (transfer HPO), and after the job
    compare the registered winner with the champion on the same folds and move the alias
    when it wins (``nightly.promote``). ``job`` are :func:`automl.pipeline.run_main_job`'s
    keyword arguments.

    Returns:
        The summary (``summary.json``), with ``warm_start``, ``transfer``,
        ``transfer_hpo`` (``nightly.transfer_from``: each source's weight,
        :func:`automl.nightly._sources.transfer_section`) and ``champion`` sections when
        those ran.
    """
    from automl import pipeline
    from automl._io import write_json
    from automl.publish import registry_dir

    console = console or Console()
    if not _active(exp):
        return pipeline.run_main_job(exp, run_dir, console=console, resume=resume, **job)
    t0 = time.perf_counter()
    n = exp.nightly
    prepared = pipeline.prepare(exp, console)
    exp = prepared.exp or exp  # the task decided
    registry_root = registry_dir(exp, run_dir)
    stages = pipeline.Stages(run_dir, True, console)
    saved = stages.saved(STAGE)
    section: dict[str, Any] = dict(saved["result"]) if saved else {}
    if n.warm_start and not resume:
        from automl.nightly._snapshot import data_change
        from automl.nightly._warm import seed_study

        pipeline.start_run_dir(exp, run_dir, prepared.info)  # the study lives in the run dir
        warm = seed_study(exp, run_dir, n.warm_start, registry_root)
        warm["data_change"] = data_change(warm.pop("previous_data", None), prepared.info)
        section["warm_start"] = warm
        _say_warm(warm, console)
    transfer = None
    if n.transfer:
        from automl.nightly._transfer import champion_weights

        transfer = champion_weights(exp, registry_root)
        section["transfer"] = ({"from": transfer["ref"], "arch": transfer["arch"]} if transfer
                               else {"from": None})
        if transfer is None:
            console.print("transfer no champion yet: every trial starts from its own "
                          "initialisation", style="yellow", highlight=False)
        else:
            arch = " ".join(f"{k}={v}" for k, v in transfer["arch"].items())
            console.print(f"transfer trials with the architecture of {transfer['ref']} "
                          f"({arch}) start from its weights", highlight=False)
    sources: list = []
    if n.transfer_from:
        from automl.nightly._sources import read_sources

        sources, info = read_sources(exp)
        section["transfer_hpo"] = {"sources": info}
        for row in info:
            console.print(f"transfer_hpo {row['name']}: {row['status']}, {row['trials']} "
                          "trials", highlight=False,
                          style=None if row["status"] == "used" else "yellow")
    if section:
        run_dir.mkdir(parents=True, exist_ok=True)
        _save(write_json, run_dir, section, time.perf_counter() - t0)
    summary = pipeline.run_main_job(exp, run_dir, console=console, resume=resume,
                                    prepared=prepared, init_weights=transfer,
                                    transfer_sources=tuple(sources), **job)
    if n.transfer_from:
        from automl.nightly._sources import transfer_section

        section["transfer_hpo"] = transfer_section(section["transfer_hpo"]["sources"],
                                                   run_dir / "study.db", exp.name)
        used = [f"{r['name']} {r['weight']:.2f}" for r in section["transfer_hpo"]["sources"]
                if r["weight"] is not None]
        console.print(f"transfer_hpo weights: {', '.join(used) or 'none'}; own model "
                      f"{section['transfer_hpo']['own_weight']}", highlight=False)
    if n.promote and "champion" not in section:
        section["champion"] = _challenge(exp, run_dir, prepared, summary, registry_root,
                                         console, job.get("address"))
    _save(write_json, run_dir, section, time.perf_counter() - t0)
    return pipeline.compose_summary(exp, run_dir, prepared.info,
                                    wall_time_s=summary.get("wall_time_s", 0)
                                    + time.perf_counter() - t0)


def _save(write_json, run_dir: Path, section: dict, wall: float) -> None:
    from automl.pipeline import STAGES

    write_json(Path(run_dir) / STAGES / f"{STAGE}.json",
               {"stage": STAGE, "wall_s": round(wall, 3),
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "result": section})


def _say_warm(warm: dict, console: Console) -> None:
    if warm["status"] != "seeded":
        console.print(f"warm   {warm['status']}; starting cold", style="yellow", highlight=False)
    else:
        skipped = sum(warm["skipped"].values())
        why = "; ".join(f"{k}: {r}" for r, k in warm["skipped"].items())
        console.print(f"warm   from {warm['source']}: {len(warm['enqueued'])} earlier top "
                      f"configs run first, {warm['history_trials']} earlier trials inform the "
                      f"sampler" + (f"; {skipped} skipped ({why})" if skipped else ""),
                      highlight=False)
    if warm.get("data_change"):
        console.print(f"data   since {warm['source']}: {warm['data_change']['line']}",
                      highlight=False)


def _challenge(exp: Experiment, run_dir: Path, prepared, summary: dict, registry_root: Path,
               console: Console, address: str | None) -> dict:
    """Champion / challenger on the run's CV folds, then the alias decision (Ray is
    started again only when the champion must be retrained on this run's folds)."""
    from automl import cluster
    from automl.nightly._champion import challenge, settle
    from automl.selection._cv import CVResult

    cv = CVResult.from_dict(summary["cv"])
    handle = cluster.connect(address, exp.resources.num_cpus, exp.resources.object_store_mb,
                             dashboard_port=0)
    try:
        found = challenge(exp, prepared.dataset, prepared.splits, cv, prepared.info,
                          registry_root, console)
    finally:
        cluster.shutdown(handle)
    change = found.get("data_change")
    if change:
        console.print(f"data   since champion {found['champion']['ref']}: {change['line']}",
                      highlight=False)
    section = settle(exp, found, summary.get("registry"), registry_root)
    verb = "promoted" if section["promoted"] else "kept"
    console.print(f"champion {verb}: {section['reason']}; {section['champion_now'] or 'none'} "
                  f"is {exp.registry.name or exp.name}@{section['alias']}", highlight=False)
    return section
