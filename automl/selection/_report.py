"""The CV table on the terminal (rich), from a :class:`CVResult` only."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

#: what each ``summary[metric]["interval"]`` is, in the line under the table
INTERVALS = {
    "wilson": "Wilson score interval on the held-out rows of all folds (fewer effective "
              "rows when the folds disagree more than sampling noise explains)",
    "t": "Student's t over the fold scores",
}


def format_ci(ci, digits: int = 3) -> str:
    """``[low, high]`` (``-`` for None): brackets and a comma, so a negative bound reads as
    one (``[-0.012, 0.412]``), never ``a-b``."""
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "-"


def print_cv_table(console: Console, cv) -> None:
    """One row per candidate: search rank (``rank``), trial, parameters, folds run, the deciding
    metric's mean ± std and 95% CI (``[low, high]``; the line under the table says which
    interval), the search's validation score and the status, then the result's warnings.
    Every metric's per-fold scores are in ``cv.json`` / ``summary.json``."""
    plan = cv.plan
    title = (f"cross-validation: {plan['n_folds']} folds x {plan['n_repeats']} repeat(s), "
             f"{cv.metric}")
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    # "rank" (in the search): the table must fit 80 columns, a log's width, with whole CIs
    for col in ("rank", "trial", "params", "folds", "mean ± std", "95% CI", "val", "status"):
        table.add_column(col, no_wrap=True)
    for c in cv.candidates:
        s = c.summary[cv.metric]
        ci = format_ci(s["ci95"])
        val = f"{c.search_score:.4f}" if c.search_score is not None else "-"
        style = {"winner": "bold green", "scored": None}.get(c.status, "dim")
        status = "dropped" if c.status.startswith("dropped") else c.status
        table.add_row(str(c.rank), c.trial_id, _count(c.n_params), str(len(c.folds)),
                      f"{s['mean']:.4f}±{s['std']:.4f}" if s["std"] is not None
                      else f"{s['mean']:.4f}", ci, val, status, style=style)
    console.print(table)
    kinds = sorted({c.summary[cv.metric].get("interval", "t") for c in cv.candidates})
    if kinds:
        console.print("95% CI: " + "; ".join(INTERVALS.get(k, k) for k in kinds),
                      highlight=False)
    for w in cv.warnings:
        console.print(f"warning: {w}", style="yellow", highlight=False)
    console.print(f"winner trial {cv.winner}: {cv.reason}", highlight=False)
    comp = cv.compute
    line = (f"cv     {comp['fold_trainings']} fold trainings, {comp['fold_epochs']} epochs, "
            f"{comp['train_time_s']:.1f}s training, {comp['wall_time_s']:.1f}s wall")
    if cv.halving:
        h = cv.halving
        line += (f"; fold halving dropped {len(h['dropped'])} after fold 1, skipping "
                 f"{h['fold_trainings_skipped']} fold trainings ({h['epochs_saved_fraction']:.0%} "
                 f"of epochs, ~{h['train_time_s_saved_est']:.1f}s)")
        if h.get("speculative_discarded"):
            line += (f"; {h['speculative_discarded']} of them had started in a slot that "
                     "waited for fold 1, and were discarded")
    console.print(line, highlight=False)


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k" if n >= 1e4 else f"{n:,}"
