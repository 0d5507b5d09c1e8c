"""The report's figures as PNG files (matplotlib, Agg backend).

Study figures come from Optuna's own matplotlib visualisations; learning curves, CV
scores and the compression trade-off are drawn here from the run's JSON files. Each
function writes one PNG and returns its path, or raises ``Skip`` with the reason the
figure cannot be drawn (e.g. too few finished trials).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never opens a window
import matplotlib.pyplot as plt  # noqa: E402
import optuna  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

DPI = 110
#: line colours of trial end states in the learning curves
END_COLOURS = {"completed": "#1b7837", "failed": "#b2182b"}


class Skip(Exception):
    """A figure that cannot be drawn from this run; the message says why."""


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def call_optuna(fn, study: optuna.Study, **kw):
    """``fn(study, **kw)``, one of Optuna's plot functions (matplotlib or plotly), with
    its experimental-feature warnings off. Raises :class:`Skip` when the study has fewer
    than 2 finished trials or Optuna cannot draw it (e.g. no parameter varies)."""
    finished = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(finished) < 2:
        raise Skip(f"{len(finished)} finished trial(s) in the study; need at least 2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            return fn(study, **kw)
        except (ValueError, RuntimeError) as e:
            raise Skip(f"optuna could not draw it: {e}") from None


def _optuna_plot(fn, study: optuna.Study, path: Path, tweak=None, **kw) -> Path:
    ax = call_optuna(fn, study, **kw)
    fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
    fig.set_size_inches(max(fig.get_size_inches()[0], 8), 4.5)
    if tweak is not None:
        tweak(fig, ax)
    return _save(fig, path)


def short_names(labels: list[str], names: list[str]) -> list[str]:
    """Axis labels as whole short names: Optuna cuts long ones (``training.weight_d...``);
    each becomes the one parameter of ``names`` it starts, less its section
    (``weight_decay``; ``model.resnet.width`` -> ``resnet.width``)."""
    out = []
    for text in labels:
        full = [n for n in names if n == text or (text.endswith("...")
                                                   and n.startswith(text[:-3]))]
        name = full[0] if len(full) == 1 else text
        for prefix in ("training.", "model.", "data."):
            name = name.removeprefix(prefix)
        out.append(name)
    return out


def _legible_axes(fig, ax, names: list[str]) -> None:
    """Parallel coordinates: 1.3 inches per parameter axis, whole short names (``lr``,
    not ``training.lr``) tilted, so the labels do not run into each other."""
    labels = [t.get_text() for t in ax.get_xticklabels()]
    short = short_names(labels, names)
    fig.set_size_inches(max(8.0, 1.3 * len(labels)), 5.0)
    ax.set_xticks(ax.get_xticks(), short, rotation=25, ha="right", fontsize=9)


def optimization_history(study: optuna.Study, path: Path) -> Path:
    """Objective value per trial and best so far (``plot_optimization_history``)."""
    from optuna.visualization.matplotlib import plot_optimization_history

    return _optuna_plot(plot_optimization_history, study, path)


def parallel_coordinates(study: optuna.Study, path: Path) -> Path:
    """Sampled parameters against the objective (``plot_parallel_coordinate``)."""
    from optuna.visualization.matplotlib import plot_parallel_coordinate

    names = sorted({k for t in study.trials for k in t.params})
    return _optuna_plot(plot_parallel_coordinate, study, path,
                        tweak=lambda fig, ax: _legible_axes(fig, ax, names))


def param_importances(study: optuna.Study, path: Path) -> Path:
    """fANOVA hyperparameter importance (Hutter et al. 2014; Optuna's default evaluator,
    seeded) over the parameters every finished trial has."""
    from optuna.importance import FanovaImportanceEvaluator
    from optuna.visualization.matplotlib import plot_param_importances

    return _optuna_plot(plot_param_importances, study, path,
                        evaluator=FanovaImportanceEvaluator(seed=0))


def pareto_front(study: optuna.Study, path: Path) -> Path:
    """The non-dominated trials of a multi-objective study (``plot_pareto_front``)."""
    from optuna.visualization.matplotlib import plot_pareto_front

    if len(study.directions) < 2:
        raise Skip("one objective: no Pareto front")
    return _optuna_plot(plot_pareto_front, study, path)


def reference_point(study: optuna.Study) -> list[float]:
    """A hypervolume reference point for ``study``: per objective, its worst value among
    the completed trials moved a tenth of the observed range further (1.0 when all are
    equal), so every completed trial adds volume.

    Raises:
        Skip: fewer than 2 completed trials.
    """
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(done) < 2:
        raise Skip(f"{len(done)} completed trial(s); need at least 2")
    out = []
    for i, d in enumerate(study.directions):
        vals = [t.values[i] for t in done]
        span = (max(vals) - min(vals)) or 1.0
        out.append(min(vals) - 0.1 * span if d == optuna.study.StudyDirection.MAXIMIZE
                   else max(vals) + 0.1 * span)
    return out


def hypervolume_history(study: optuna.Study, path: Path) -> Path:
    """Hypervolume of the completed trials' front against trial number
    (``plot_hypervolume_history``, reference point :func:`reference_point`)."""
    from optuna.visualization.matplotlib import plot_hypervolume_history

    if len(study.directions) < 2:
        raise Skip("one objective: no hypervolume")
    return _optuna_plot(plot_hypervolume_history, study, path,
                        reference_point=reference_point(study))


def curve_styles(trials: list[dict]) -> dict[str, tuple[str, Any, str]]:
    """``{trial_id: (legend label, colour, line style)}`` for the learning curves:
    completed trials solid green, failed ones solid red, trials ASHA stopped dashed in
    one colour per stopping epoch (rung)."""
    rungs = sorted({t["epochs_run"] for t in trials if t["end_state"] == "stopped_early"})
    cmap = plt.get_cmap("plasma", len(rungs) + 1)
    out = {}
    for t in trials:
        if t["end_state"] == "stopped_early":
            out[t["trial_id"]] = (f"stopped by ASHA at epoch {t['epochs_run']}",
                                  cmap(rungs.index(t["epochs_run"])), "--")
        else:
            out[t["trial_id"]] = (t["end_state"], END_COLOURS.get(t["end_state"], "grey"), "-")
    return out


def learning_curves(trials: list[dict], metric: str, path: Path) -> Path:
    """The search metric per epoch for every trial, styled by :func:`curve_styles`, with
    a marker where ASHA stopped a trial."""
    curves = [t for t in trials if any(metric in h for h in t.get("history", []))]
    if not curves:
        raise Skip(f"no trial reported {metric}")
    styles = curve_styles(curves)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labelled: set[str] = set()
    for t in curves:
        x = [h["epoch"] for h in t["history"] if metric in h]
        y = [h[metric] for h in t["history"] if metric in h]
        label, colour, style = styles[t["trial_id"]]
        if t["end_state"] == "stopped_early":
            ax.plot(x[-1], y[-1], "o", color=colour, ms=4)
        ax.plot(x, y, style, color=colour, lw=1.2, alpha=0.85,
                label=None if label in labelled else label)
        labelled.add(label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.set_title(f"Learning curves ({len(curves)} trials)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def cv_scores(cv: dict, path: Path) -> Path:
    """Fold scores per CV candidate (box + points), the winner highlighted."""
    cands = [c for c in cv["candidates"] if c["scores"]]
    if not cands:
        raise Skip("the CV table has no fold scores")
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cands)), 4.5))
    ax.boxplot([c["scores"] for c in cands], widths=0.5)
    for i, c in enumerate(cands, 1):
        win = c["trial_id"] == cv.get("winner")
        ax.plot([i] * len(c["scores"]), c["scores"], "o", ms=5, alpha=0.8,
                color="#d6604d" if win else "#4393c3", label="winner" if win else None)
    ax.set_xticks(range(1, len(cands) + 1),
                  [f"{c['trial_id']}\n{c['status']}" for c in cands], fontsize=8)
    ax.set_ylabel(f"{cv['metric']} per fold")
    ax.set_title("Cross-validation scores per candidate")
    ax.grid(alpha=0.3, axis="y")
    if cv.get("winner"):
        ax.legend(fontsize=8)
    return _save(fig, path)


def label_groups(points: list[tuple[float, float, str]], rel_x: float = 0.03,
                 abs_y: float = 0.002) -> dict[tuple[float, float], list[str]]:
    """Points ``(x, y, name)`` grouped where their labels would overprint: ``x`` within
    ``rel_x`` (relative) and ``y`` within ``abs_y`` of a group's first point. Returns
    ``{(x, y) of the group's first point: [names]}`` in input order (the deployed winner
    and the teacher it equals share one label, ``winner = 00_teacher``)."""
    groups: dict[tuple[float, float], list[str]] = {}
    for x, y, name in points:
        for gx, gy in groups:
            if abs(x - gx) <= rel_x * max(abs(gx), 1e-12) and abs(y - gy) <= abs_y:
                groups[(gx, gy)].append(name)
                break
        else:
            groups[(x, y)] = [name]
    return groups


def compression_tradeoff(rows: list[dict], path: Path) -> Path:
    """Test accuracy against parameter count and against batch-1 CPU latency (ms) for
    the teacher and each accepted compressed model."""
    rows = [r for r in rows if isinstance(r.get("accuracy"), (int, float))]
    if not rows:
        raise Skip("no measured models in the compression chain")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, key, label in ((axes[0], "nonzero_params", "non-zero parameters"),
                           (axes[1], "latency_ms_b1", "latency, batch 1 (ms)")):
        pts = []
        for r in rows:
            x = r.get(key) if r.get(key) is not None else r.get("params")
            if x is None or (isinstance(x, float) and math.isnan(x)):
                continue
            ax.plot(x, r["accuracy"], "s" if r["stage"] == "teacher" else "o", ms=7)
            pts.append((x, r["accuracy"], r.get("name", r["stage"])))
        for (x, y), names in label_groups(pts).items():  # one label where points coincide
            ax.annotate(" = ".join(names), (x, y), fontsize=8, xytext=(4, 4),
                        textcoords="offset points")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_xscale("log")
    axes[0].set_ylabel("test accuracy")
    fig.suptitle("Compression trade-off")
    return _save(fig, path)
