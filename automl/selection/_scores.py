"""Per-fold classification scores (scikit-learn), their mean / std / 95% confidence
interval (a Wilson score interval for the scores in [0, 1], Student's t otherwise; SciPy),
and the winner rule. Pure functions, no Ray."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats
from sklearn import metrics as skm

from automl.spec import CV_METRICS, TASK_CV_METRICS

#: the name ``summarize`` records under ``"interval"`` for each kind of interval
WILSON, STUDENT_T = "wilson", "t"


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


def wilson_interval(p: float, n: float, crit: float) -> list[float]:
    """The Wilson (1927) score interval ``[low, high]`` of a proportion ``p`` observed on
    ``n`` (possibly effective, non-integer) trials, with critical value ``crit`` (1.96 for
    95%). It lies inside [0, 1] for every ``p`` in [0, 1], and keeps close to its nominal
    coverage for small ``n`` and ``p`` near 0 or 1, where the Wald interval ``p ± crit *
    sqrt(p (1 - p) / n)`` leaves the range (Agresti & Coull 1998; Brown, Cai & DasGupta
    2001).

    Raises:
        ValueError: ``p`` outside [0, 1], or ``n`` or ``crit`` not positive.
    """
    if not 0.0 <= p <= 1.0 or not n > 0 or not crit > 0:
        raise ValueError(f"wilson_interval needs 0 <= p <= 1, n > 0 and crit > 0; got p={p}, "
                         f"n={n}, crit={crit}")
    z2 = crit * crit
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = crit * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # at p = 0 or 1 the bound is exactly 0 or 1 (not 1 - 1e-16 from rounding)
    return [0.0 if p == 0 else max(0.0, centre - half), 1.0 if p == 1 else min(1.0, centre + half)]


def summarize(values: Sequence[float], confidence: float = 0.95, *, bounded: bool = False,
              rows: int | None = None) -> dict:
    """Mean, sample standard deviation (ddof 1) and a two-sided confidence interval for the
    mean of ``n`` fold scores (``std`` and ``ci95`` are None when ``n < 2``).

    Args:
        bounded: the scores are fractions in [0, 1] (accuracy, balanced accuracy, macro
            precision / recall / F1): the interval is a Wilson score interval and stays in
            [0, 1]. Otherwise (losses, errors) it is Student's t on the fold scores.
        rows: held-out rows per repeat (every fold's validation rows added up, counted
            once per repeat), for the binomial part of the Wilson interval; None when
            unknown (the folds' spread alone then sets the width).

    The Wilson interval (Wilson 1927) treats the mean score ``p`` as a proportion of the
    held-out rows pooled over the folds (for accuracy: correct predictions over all
    held-out rows). When the folds disagree more than that binomial noise explains
    (``std**2 / n`` above ``p (1 - p) / rows``, e.g. one fold that collapsed), the rows
    count as fewer: the effective sample size ``p (1 - p) / var`` of the design effect
    (Kish 1965), and the critical value is Student's t with Satterthwaite's degrees of
    freedom for the part of the variance the ``n - 1`` fold degrees estimate; this is Korn
    & Graubard's (1998) interval for proportions from clustered samples, with Wilson's
    score interval in place of Clopper-Pearson's. So two folds that disagree give a wide
    interval, folds that agree give the binomial one, and neither leaves [0, 1]. For the
    macro averages the binomial part is an approximation (they are not proportions of
    rows); their fold spread usually decides.

    Folds share training rows, so either interval is optimistic (Nadeau & Bengio 2003);
    read it as a noise scale, not a guarantee.

    Returns:
        ``{"mean", "std", "ci95": [low, high] or None, "n", "interval": "wilson" or "t"}``;
        a Wilson interval adds ``"n_eff"`` (its effective rows, 1 decimal).
    """
    x = np.asarray(values, dtype=float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    std = float(x.std(ddof=1)) if n > 1 else None
    out = {"mean": mean, "std": std, "ci95": None, "n": n,
           "interval": WILSON if bounded else STUDENT_T}
    if n < 2:
        return out
    level = 0.5 + confidence / 2
    if not bounded:
        half = float(stats.t.ppf(level, n - 1)) * std / math.sqrt(n)
        out["ci95"] = [mean - half, mean + half]
        return out
    p = min(max(mean, 0.0), 1.0)
    pq = p * (1 - p)
    binom = pq / rows if rows else 0.0  # the held-out rows' sampling noise, known
    excess = max(0.0, std * std / n - binom)  # what the folds add, on n - 1 degrees
    var = binom + excess
    if var <= 0.0 or pq == 0.0:  # every fold scored the same, and no rows are known
        n_eff = float(rows) if rows else math.inf
    else:
        n_eff = min(pq / var, float(rows)) if rows else pq / var
    if math.isinf(n_eff):
        out["ci95"], out["n_eff"] = [p, p], None
        return out
    df = math.inf if excess == 0.0 else var * var / (excess * excess / (n - 1))
    crit = float(stats.norm.ppf(level)) if math.isinf(df) else float(stats.t.ppf(level, df))
    out["ci95"], out["n_eff"] = wilson_interval(p, n_eff, crit), round(n_eff, 1)
    return out


#: fold scores that are fractions in [0, 1] (a Wilson interval); every other one (R²,
#: which can be negative, RMSE, MAE) gets Student's t
BOUNDED = (*CV_METRICS, "roc_auc", "pr_auc")


def summarize_folds(folds: Sequence[dict], task: str = "classification") -> dict:
    """``{metric: summarize([fold["scores"][metric] ...], bounded=..., rows=...)}`` for
    every score of ``task`` (:data:`automl.spec.TASK_CV_METRICS`, plus ROC AUC and PR AUC
    when every fold has them): bounded (Wilson) for the fractions in [0, 1], Student's t
    for R², RMSE and MAE. ``rows`` is the folds' held-out rows (``fold["rows"]``) per
    repeat, None when a fold does not record them (results of older runs)."""
    counts = [f.get("rows") for f in folds]
    repeats = len({f.get("repeat", 1) for f in folds}) or 1
    rows = sum(counts) // repeats if counts and all(isinstance(c, int) for c in counts) else None
    metrics = list(TASK_CV_METRICS[task])
    metrics += [m for m in ("roc_auc", "pr_auc")
                if folds and all(m in f["scores"] for f in folds)]
    return {m: summarize([f["scores"][m] for f in folds], bounded=m in BOUNDED, rows=rows)
            for m in metrics}


def collapsed_folds(candidates: Sequence[dict], num_classes: int) -> list[str]:
    """One warning per fold whose model predicted a single class for every held-out row
    (``fold["predicted_classes"] == 1`` with ``num_classes`` > 1): its score is that
    class's share of the rows (0.1000 with 10 balanced classes), not a measure of the
    configuration, and its interval widens for it. ``candidates``: ``{"trial_id",
    "folds"}`` dicts; folds without ``predicted_classes`` (older runs) are not judged."""
    out = []
    for c in candidates:
        for f in c["folds"]:
            if num_classes > 1 and f.get("predicted_classes") == 1:
                rows = f" for all {f['rows']} held-out rows" if f.get("rows") else ""
                out.append(f"trial {c['trial_id']} fold {f['fold']}"
                           f"{' repeat ' + str(f['repeat']) if f.get('repeat', 1) > 1 else ''}"
                           f" predicted one class{rows} (accuracy "
                           f"{f['scores']['accuracy']:.4f}, that class's share): its training "
                           "learned nothing usable on this fold, so its score says little "
                           "about the configuration")
    return out


def choose_winner(candidates: Sequence[dict], tolerance: float,
                  sign: int = 1) -> tuple[str, str]:
    """The best mean; among candidates within ``tolerance`` of it, the smallest model.

    Args:
        candidates: dicts with ``trial_id``, ``mean`` (higher is better; with ``sign``
            -1 lower is, as RMSE), ``n_params`` and ``rank`` (search order, breaks exact
            ties).
        tolerance: absolute score difference that counts as a near-tie.

    Returns:
        ``(trial_id, reason)``; the reason is one sentence with the figures.

    Raises:
        ValueError: no candidates.
    """
    if not candidates:
        raise ValueError("no candidate finished cross-validation")
    def key(c: dict) -> float:
        return sign * c["mean"]

    best = max(candidates, key=lambda c: (key(c), -c["rank"]))
    tied = [c for c in candidates if key(c) >= key(best) - tolerance - 1e-12]
    win = min(tied, key=lambda c: (c["n_params"], -key(c), c["rank"]))
    if win is best:
        others = [c for c in candidates if c is not best]
        if not others:
            return win["trial_id"], (f"the only candidate scored on every fold "
                                     f"(CV mean {best['mean']:.4f})")
        if len(tied) > 1:
            return win["trial_id"], (f"best CV mean ({best['mean']:.4f}) and the smallest of the "
                                     f"{len(tied)} within {tolerance:g} of it "
                                     f"({win['n_params']:,} parameters)")
        gap = key(best) - max(key(c) for c in others)
        return win["trial_id"], (f"best CV mean ({best['mean']:.4f}), {gap:.4f} ahead of the "
                                 f"next, more than the tie tolerance {tolerance:g}")
    return win["trial_id"], (
        f"CV mean {win['mean']:.4f} is within {tolerance:g} of the best ({best['mean']:.4f}, "
        f"trial {best['trial_id']}) and it is the smallest model of the {len(tied)} near-tied "
        f"({win['n_params']:,} vs {best['n_params']:,} parameters)"
    )
