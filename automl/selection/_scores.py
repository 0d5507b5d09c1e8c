"""Per-fold classification scores (scikit-learn), their mean / std / 95% confidence
interval (Student's t, SciPy), and the winner rule. Pure functions, no Ray."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats
from sklearn import metrics as skm

from automl.spec import CV_METRICS


def classification_scores(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> dict:
    """Accuracy, balanced accuracy and macro precision / recall / F1 (all in [0, 1]).

    Macro averages run over all ``num_classes`` labels; a label never predicted
    scores 0 precision (``zero_division=0``).
    """
    labels = list(range(num_classes))
    avg = {"labels": labels, "average": "macro", "zero_division": 0}
    return {
        "accuracy": float(skm.accuracy_score(y_true, y_pred)),
        "balanced_accuracy": float(skm.balanced_accuracy_score(y_true, y_pred)),
        "precision_macro": float(skm.precision_score(y_true, y_pred, **avg)),
        "recall_macro": float(skm.recall_score(y_true, y_pred, **avg)),
        "f1_macro": float(skm.f1_score(y_true, y_pred, **avg)),
    }


def summarize(values: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean, sample standard deviation (ddof 1) and a two-sided Student-t confidence
    interval for the mean over ``n`` fold scores (``std`` and ``ci95`` are None when
    ``n < 2``).

    Folds share training rows, so the interval is optimistic (Nadeau & Bengio 2003);
    read it as a noise scale, not a guarantee.
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    std = float(x.std(ddof=1)) if n > 1 else None
    ci = None
    if n > 1:
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * std / math.sqrt(n)
        ci = [mean - half, mean + half]
    return {"mean": mean, "std": std, "ci95": ci, "n": n}


def summarize_folds(folds: Sequence[dict]) -> dict:
    """``{metric: summarize([fold["scores"][metric] ...])}`` for every CV metric."""
    return {m: summarize([f["scores"][m] for f in folds]) for m in CV_METRICS}


def choose_winner(candidates: Sequence[dict], tolerance: float) -> tuple[str, str]:
    """The best mean; among candidates within ``tolerance`` of it, the smallest model.

    Args:
        candidates: dicts with ``trial_id``, ``mean`` (higher is better), ``n_params``
            and ``rank`` (search order, breaks exact ties).
        tolerance: absolute score difference that counts as a near-tie.

    Returns:
        ``(trial_id, reason)``; the reason is one sentence with the figures.

    Raises:
        ValueError: no candidates.
    """
    if not candidates:
        raise ValueError("no candidate finished cross-validation")
    best = max(candidates, key=lambda c: (c["mean"], -c["rank"]))
    tied = [c for c in candidates if c["mean"] >= best["mean"] - tolerance - 1e-12]
    win = min(tied, key=lambda c: (c["n_params"], -c["mean"], c["rank"]))
    if win is best:
        others = [c for c in candidates if c is not best]
        if not others:
            return win["trial_id"], (f"the only candidate scored on every fold "
                                     f"(CV mean {best['mean']:.4f})")
        if len(tied) > 1:
            return win["trial_id"], (f"best CV mean ({best['mean']:.4f}) and the smallest of the "
                                     f"{len(tied)} within {tolerance:g} of it "
                                     f"({win['n_params']:,} parameters)")
        gap = best["mean"] - max(c["mean"] for c in others)
        return win["trial_id"], (f"best CV mean ({best['mean']:.4f}), {gap:.4f} ahead of the "
                                 f"next, more than the tie tolerance {tolerance:g}")
    return win["trial_id"], (
        f"CV mean {win['mean']:.4f} is within {tolerance:g} of the best ({best['mean']:.4f}, "
        f"trial {best['trial_id']}) and it is the smallest model of the {len(tied)} near-tied "
        f"({win['n_params']:,} vs {best['n_params']:,} parameters)"
    )
