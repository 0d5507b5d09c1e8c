"""Nightly sweeps: warm start, transfer learning, data snapshots and champion / challenger
promotion (the ``nightly`` section of the spec, :class:`automl.spec.NightlySpec`).

The main job calls three hooks, in order:

* :func:`before_search` (run dir written, Tune not started): seed the new Optuna study
  from the previous run (:mod:`._warm`), say what changed in the data since, and load the
  champion's weights for transfer (:mod:`._transfer`);
* :func:`after_selection` (Ray still up): compare the CV winner with the champion on the
  same folds (:mod:`._champion`);
* :func:`after_publish` (winner registered): move the champion alias when the challenger
  won, and return the ``warm_start`` / ``transfer`` / ``champion`` sections of
  ``summary.json``.

Public API: the hooks, :class:`NightlyRun`, :func:`seed_study`, :func:`fit_space`,
:func:`data_change`, :func:`paired_comparison`, :func:`decide`, :func:`fold_signature`,
:func:`champion_weights`, :func:`init_from_champion`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from automl.nightly._champion import (
    challenge,
    champion_version,
    decide,
    fold_signature,
    paired_comparison,
    settle,
)
from automl.nightly._snapshot import data_change
from automl.nightly._transfer import champion_weights, init_from_champion
from automl.nightly._warm import Misfit, check_source, fit_space, seed_study
from automl.spec import Experiment


@dataclass
class NightlyRun:
    """What the hooks found and decided; ``transfer`` (champion weights) travels to trials."""

    registry_root: Path
    warm: dict[str, Any] | None = None
    transfer: dict[str, Any] | None = None
    champion: dict[str, Any] | None = None


def before_search(exp: Experiment, run_dir: Path, data_info: dict, console: Console,
                  resume: bool = False) -> NightlyRun:
    """Warm start and transfer setup; see the module doc. A resumed run keeps the study
    it already has (it was seeded before the crash)."""
    from automl.publish import registry_dir

    nightly = NightlyRun(registry_dir(exp, run_dir))
    ref = exp.nightly.warm_start
    if ref and not resume:
        warm = seed_study(exp, run_dir, ref, nightly.registry_root)
        warm["data_change"] = data_change(warm.pop("previous_data", None), data_info)
        nightly.warm = warm
        if warm["status"] != "seeded":
            console.print(f"warm   {warm['status']}; starting cold", style="yellow",
                          highlight=False)
        else:
            skipped = sum(warm["skipped"].values())
            why = "; ".join(f"{n}: {r}" for r, n in warm["skipped"].items())
            console.print(f"warm   from {warm['source']}: {len(warm['enqueued'])} earlier top "
                          f"configs run first, {warm['history_trials']} earlier trials "
                          f"inform the sampler" + (f"; {skipped} skipped ({why})" if skipped
                                                   else ""), highlight=False)
        if warm["data_change"]:
            console.print(f"data   since {warm['source']}: {warm['data_change']['line']}",
                          highlight=False)
    if exp.nightly.transfer:
        nightly.transfer = champion_weights(exp, nightly.registry_root)
        if nightly.transfer is None:
            console.print("transfer no champion yet: every trial starts from its own "
                          "initialisation", style="yellow", highlight=False)
        else:
            arch = " ".join(f"{k}={v}" for k, v in nightly.transfer["arch"].items())
            console.print(f"transfer trials with the architecture of {nightly.transfer['ref']} "
                          f"({arch}) start from its weights", highlight=False)
    return nightly


def after_selection(exp: Experiment, nightly: NightlyRun, dataset, splits, cv,
                    data_info: dict, console: Console) -> None:
    """Champion / challenger comparison (Ray must be up: the champion may be retrained)."""
    if not exp.nightly.promote:
        return
    nightly.champion = challenge(exp, dataset, splits, cv, data_info, nightly.registry_root,
                                 console)
    change = nightly.champion.get("data_change")
    if change:
        console.print(f"data   since champion {nightly.champion['champion']['ref']}: "
                      f"{change['line']}", highlight=False)


def after_publish(exp: Experiment, nightly: NightlyRun, summary: dict,
                  console: Console) -> dict[str, Any]:
    """Settle the champion and return the nightly sections of ``summary.json``."""
    out: dict[str, Any] = {}
    if nightly.warm is not None:
        out["warm_start"] = nightly.warm
    if exp.nightly.transfer:
        t = nightly.transfer
        out["transfer"] = {"from": t["ref"], "arch": t["arch"]} if t else {"from": None}
    if nightly.champion is not None:
        section = settle(exp, nightly.champion, summary.get("registry"), nightly.registry_root)
        out["champion"] = section
        verb = "promoted" if section["promoted"] else "kept"
        console.print(f"champion {verb}: {section['reason']}; "
                      f"{section['champion_now'] or 'none'} is {exp.registry.name or exp.name}"
                      f"@{section['alias']}", highlight=False)
    return out


__all__ = [
    "Misfit", "NightlyRun", "after_publish", "after_selection", "before_search", "check_source",
    "champion_version", "champion_weights", "data_change", "decide", "fit_space",
    "fold_signature", "init_from_champion", "paired_comparison", "seed_study",
]
