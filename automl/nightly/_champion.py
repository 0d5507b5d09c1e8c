"""Champion / challenger: the new CV winner replaces the registry's champion only if it
beats it on the same cross-validation folds by ``nightly.champion_margin``.

The comparison is paired, fold by fold (both models scored on the same validation rows):
the mean paired difference decides; a one-sided paired t-test (``scipy.stats.ttest_rel``)
and a sign test (``scipy.stats.binomtest`` on wins vs losses) are reported, and the
t-test gates the decision when ``nightly.alpha`` is set. Fold scores share training
rows, so the p-values are optimistic (Nadeau & Bengio 2003): read them as a noise scale.

The champion's per-fold scores are reused when its run cross-validated on the very same
folds (same data checksum and fold plan: ``folds_sha256``); otherwise its config is
retrained on this run's folds through :func:`automl.selection.cross_validate`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy import stats

from automl.errors import RegistryError, RunError
from automl.nightly._snapshot import data_change
from automl.spec import CV_MIN_METRICS, Experiment


def champion_version(exp: Experiment, registry_root: Path):
    """The registry's ``<registry.name>@<nightly.champion_alias>``, or None when there is
    none yet (no model of that name, or no version carries the alias)."""
    from automl.registry import Registry

    ref = f"{exp.registry.name or exp.name}@{exp.nightly.champion_alias}"
    try:
        return Registry(registry_root).get(ref)
    except RegistryError:
        return None


def fold_signature(data_sha256: str, folds: Sequence[tuple[np.ndarray, np.ndarray]]) -> str:
    """sha256 over the data checksum and every fold's validation row indices: equal
    signatures mean the same rows were scored in the same fold order."""
    h = hashlib.sha256(str(data_sha256).encode())
    for _, val in folds:
        h.update(np.asarray(val, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()


def paired_comparison(challenger: Sequence[float], champion: Sequence[float]) -> dict[str, Any]:
    """Paired statistics of per-fold scores (higher is better), fold ``i`` against fold ``i``.

    Returns:
        ``n``, ``challenger_mean``, ``champion_mean``, ``mean_diff`` (challenger -
        champion), ``std_diff``, ``wins`` / ``losses`` / ``ties``, ``t_stat`` and
        ``p_t_test`` (one-sided, H1: the challenger is better; None when every difference
        is equal), ``p_sign_test`` (one-sided binomial test on wins vs losses; 1.0 when
        all tie).

    Raises:
        ValueError: the score lists differ in length or are empty.
    """
    a, b = np.asarray(challenger, dtype=float), np.asarray(champion, dtype=float)
    if len(a) != len(b) or len(a) == 0:
        raise ValueError(f"paired scores need equal, non-empty lists (got {len(a)} and "
                         f"{len(b)} folds)")
    d = a - b
    wins, losses = int((d > 1e-12).sum()), int((d < -1e-12).sum())
    t_stat = p_t = None
    if len(d) > 1 and float(np.std(d)) > 1e-12:
        res = stats.ttest_rel(a, b, alternative="greater")
        t_stat, p_t = float(res.statistic), float(res.pvalue)
    p_sign = (float(stats.binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue)
              if wins + losses else 1.0)
    return {"n": len(d), "challenger_mean": float(a.mean()), "champion_mean": float(b.mean()),
            "mean_diff": float(d.mean()),
            "std_diff": float(d.std(ddof=1)) if len(d) > 1 else None,
            "wins": wins, "losses": losses, "ties": len(d) - wins - losses,
            "t_stat": t_stat, "p_t_test": p_t, "p_sign_test": p_sign}


def decide(cmp: dict[str, Any], margin: float, alpha: float | None, metric: str,
           champion_ref: str) -> tuple[bool, str]:
    """Promote when the mean paired gain is positive and at least ``margin`` (and, with
    ``alpha``, the paired t-test's p-value is below it). Returns ``(promote, reason)``."""
    gain, n = cmp["mean_diff"], cmp["n"]
    p = cmp["p_t_test"]
    tally = (f"{cmp['wins']} wins, {cmp['losses']} losses, {cmp['ties']} ties; paired t-test "
             f"p={'n/a' if p is None else f'{p:.3g}'}, sign test p={cmp['p_sign_test']:.3g}")
    head = f"mean paired gain {gain:+.4f} {metric} over {n} folds ({tally})"
    if gain <= 0 or gain < margin - 1e-12:
        return False, (f"champion {champion_ref} stays: {head} is below the margin "
                       f"{margin:g}" + (" (the challenger is no better)" if gain <= 0 else ""))
    if alpha is not None and (p is None or p >= alpha):
        return False, (f"champion {champion_ref} stays: {head} meets the margin {margin:g} "
                       f"but the t-test p-value is not below alpha {alpha:g}")
    return True, f"challenger beats champion {champion_ref}: {head}, at least the margin {margin:g}"


def _champion_scores(exp, version, signature: str, metric: str, dataset, pool, console
                     ) -> tuple[list[float], str]:
    """The champion's per-fold scores on this run's folds, and where they came from."""
    lineage = version.lineage
    cv = lineage.get("cv") or {}
    old_run = Path(lineage.get("run_dir") or "")
    try:
        old = json.loads((old_run / "summary.json").read_text())
    except (OSError, ValueError):
        old = {}
    if (cv.get("metric") == metric and cv.get("scores")
            and (old.get("champion") or {}).get("folds_sha256") == signature):
        return [float(s) for s in cv["scores"]], "its own cross-validation on the same folds"
    from automl.selection import cross_validate

    pseudo = SimpleNamespace(trial_id=f"champion {version.ref}", config=lineage["config"],
                             params=lineage.get("params") or {}, metrics={})
    result = cross_validate(exp, dataset, pool, [pseudo], console=console)
    scores = [f["scores"][metric] for f in result.candidates[0].folds]
    return scores, "its config retrained on this run's folds"


def challenge(exp: Experiment, dataset, splits, cv, data_info: dict, registry_root: Path,
              console) -> dict[str, Any]:
    """Compare this run's CV winner with the champion (needs Ray when the champion must be
    retrained). Returns the ``champion`` section of ``summary.json`` without the final
    registry action: ``alias``, ``folds_sha256``, ``metric``, ``challenger`` (trial and
    fold scores), ``champion`` (ref, fold scores, their source) or None, ``comparison``,
    ``data_change`` against the champion's data, ``promote`` and ``reason``."""
    from automl.selection import make_folds

    sel = exp.selection
    plan = make_folds(dataset.y, splits.pool, sel.cv_folds, sel.cv_repeats, exp.data.seed,
                      allow_fewer=sel.allow_fewer_folds, classes=dataset.classes,
                      task=dataset.task)
    signature = fold_signature(data_info["sha256"], plan.folds)
    winner = cv.winner_candidate
    mine = [f["scores"][cv.metric] for f in winner.folds]
    out: dict[str, Any] = {"alias": exp.nightly.champion_alias, "folds_sha256": signature,
                           "metric": cv.metric, "margin": exp.nightly.champion_margin,
                           "challenger": {"trial_id": winner.trial_id, "scores": mine}}
    version = champion_version(exp, registry_root)
    if version is None:
        return {**out, "champion": None, "comparison": None, "data_change": None,
                "promote": True, "reason": "no champion yet: this run's winner becomes it"}
    change = data_change(_run_data(version.lineage), data_info)
    try:
        theirs, source = _champion_scores(exp, version, signature, cv.metric, dataset,
                                          splits.pool, console)
    except (RunError, KeyError, TypeError) as e:  # the sweep's results stand either way
        why = e.message if isinstance(e, RunError) else f"its lineage lacks {e}"
        return {**out, "champion": {"ref": version.ref, "scores": None, "source": None},
                "comparison": None, "data_change": change, "promote": False,
                "reason": f"champion {version.ref} stays: it could not be scored on this "
                          f"run's folds ({why})"}
    # a score where smaller is better (rmse, mae) is compared negated: a gain is a drop
    sign = -1.0 if cv.metric in CV_MIN_METRICS else 1.0
    cmp = paired_comparison([sign * v for v in mine], [sign * v for v in theirs])
    label = cv.metric if sign > 0 else f"-{cv.metric} (smaller is better)"
    promote, reason = decide(cmp, exp.nightly.champion_margin, exp.nightly.alpha, label,
                             version.ref)
    return {**out, "champion": {"ref": version.ref, "scores": theirs, "source": source},
            "comparison": cmp, "data_change": change, "promote": promote, "reason": reason}


def _run_data(lineage: dict) -> dict | None:
    """The champion run's data description (``data.json``), else its registered checksum."""
    try:
        return json.loads((Path(lineage.get("run_dir") or "") / "data.json").read_text())
    except (OSError, ValueError):
        sha = lineage.get("data_sha256")
        return {"sha256": sha} if sha else None


def settle(exp: Experiment, section: dict[str, Any], registry_section: dict | None,
           registry_root: Path) -> dict[str, Any]:
    """Carry out the decision after the winner was registered: point the alias at the new
    version when ``promote``. Returns the final ``champion`` section (``promoted``,
    ``champion_now``)."""
    from automl.registry import Registry

    new_ref = (registry_section or {}).get("winner")
    if section["promote"] and new_ref:
        Registry(registry_root).set_alias(new_ref, exp.nightly.champion_alias)
        now = new_ref
    else:
        now = (section.get("champion") or {}).get("ref")
    return {**section, "challenger": {**section["challenger"], "ref": new_ref},
            "promoted": bool(section["promote"] and new_ref), "champion_now": now}
