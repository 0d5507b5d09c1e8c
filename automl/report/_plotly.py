"""The report's interactive figures (plotly), embedded in ``index.html`` with plotly.js
inline, so the page opens offline.

Study figures are Optuna's own plotly visualisations (``optuna.visualization``);
learning curves, CV scores with their intervals and the compression trade-off are drawn
here from the run's JSON files, as the PNGs of :mod:`automl.report._figures` are. Each
function returns a ``plotly.graph_objects.Figure`` or raises :class:`Skip` with the reason.
"""

from __future__ import annotations

import math
from typing import Any

import optuna

from automl.report._figures import (
    END_COLOURS,
    Skip,
    call_optuna,
    label_groups,
    reference_point,
    short_names,
)

#: colours of the trials ASHA stopped, one per stopping epoch (rung), in rung order
RUNG_COLOURS = ("#542788", "#8073ac", "#b35806", "#e08214", "#fdb863", "#2d004b")
HEIGHT = 460


def _short(name: str) -> str:
    """``training.lr`` -> ``lr``, ``model.resnet.width`` -> ``resnet.width``: axis labels
    that fit beside each other."""
    for prefix in ("training.", "model.", "data."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _optuna(fn, study: optuna.Study, **kw):
    fig = call_optuna(fn, study, **kw)
    fig.update_layout(height=HEIGHT, template="plotly_white")
    return fig


def optimization_history(study: optuna.Study):
    """Objective value per trial and the best so far (``plot_optimization_history``)."""
    from optuna.visualization import plot_optimization_history

    if len(study.directions) > 1:
        raise Skip("several objectives: see the Pareto front")
    return _optuna(plot_optimization_history, study)


def parallel_coordinates(study: optuna.Study):
    """Sampled parameters against the objective (``plot_parallel_coordinate``), sized
    and labelled to be read: the page's width, whole short names (``weight_decay``, not
    ``training.weight_d...``), tilted."""
    from optuna.visualization import plot_parallel_coordinate

    if len(study.directions) > 1:
        raise Skip("several objectives: see the Pareto front")
    fig = _optuna(plot_parallel_coordinate, study)
    # Optuna draws one x position per axis and cuts long names ("training.weight_d...")
    names = sorted({k for t in study.trials for k in t.params})
    ticks = short_names(list(fig.layout.xaxis.ticktext or ()), names)
    fig.update_xaxes(ticktext=ticks, tickangle=-30, tickfont={"size": 12})
    fig.update_layout(height=560, margin={"l": 60, "r": 60, "t": 60, "b": 140})
    return fig


def param_importances(study: optuna.Study):
    """fANOVA hyperparameter importance (Hutter et al. 2014; Optuna's evaluator, seeded)
    over the parameters every finished trial has (``plot_param_importances``)."""
    from optuna.importance import FanovaImportanceEvaluator
    from optuna.visualization import plot_param_importances

    return _optuna(plot_param_importances, study, evaluator=FanovaImportanceEvaluator(seed=0))


def pareto_front(study: optuna.Study):
    """The non-dominated trials of a multi-objective study (``plot_pareto_front``)."""
    from optuna.visualization import plot_pareto_front

    if len(study.directions) < 2:
        raise Skip("one objective: no Pareto front")
    return _optuna(plot_pareto_front, study)


def hypervolume_history(study: optuna.Study):
    """Hypervolume against trial number (``plot_hypervolume_history``; reference point:
    :func:`automl.report._figures.reference_point`)."""
    from optuna.visualization import plot_hypervolume_history

    if len(study.directions) < 2:
        raise Skip("one objective: no hypervolume")
    return _optuna(plot_hypervolume_history, study, reference_point=reference_point(study))


def _style(trials: list[dict]) -> dict[str, tuple[str, str, str]]:
    """``{trial_id: (legend label, colour, dash)}``: completed solid green, failed solid
    red, stopped by ASHA dashed in one colour per stopping epoch."""
    rungs = sorted({t["epochs_run"] for t in trials if t["end_state"] == "stopped_early"})
    out = {}
    for t in trials:
        if t["end_state"] == "stopped_early":
            i = rungs.index(t["epochs_run"])
            out[t["trial_id"]] = (f"stopped by ASHA at epoch {t['epochs_run']}",
                                  RUNG_COLOURS[i % len(RUNG_COLOURS)], "dash")
        else:
            out[t["trial_id"]] = (t["end_state"], END_COLOURS.get(t["end_state"], "grey"),
                                  "solid")
    return out


def learning_curves(trials: list[dict], metric: str):
    """``metric`` per epoch of every trial, coloured by how it ended (hover: trial,
    epoch, value, parameters)."""
    import plotly.graph_objects as go

    curves = [t for t in trials if any(metric in h for h in t.get("history", []))]
    if not curves:
        raise Skip(f"no trial reported {metric}")
    styles, shown = _style(curves), set()
    fig = go.Figure()
    for t in curves:
        pts = [(h["epoch"], h[metric]) for h in t["history"] if metric in h]
        label, colour, dash = styles[t["trial_id"]]
        params = "<br>".join(f"{_short(k)}={v}" for k, v in (t.get("params") or {}).items())
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
            name=label, legendgroup=label, showlegend=label not in shown,
            line={"color": colour, "dash": dash, "width": 1.5}, marker={"size": 4},
            hovertemplate=f"trial {t['trial_id']}<br>epoch %{{x}}<br>{metric} %{{y:.4f}}"
                          f"<br>{params}<extra>{label}</extra>"))
        shown.add(label)
    fig.update_layout(height=HEIGHT, template="plotly_white", xaxis_title="epoch",
                      yaxis_title=metric, title=f"Learning curves ({len(curves)} trials)")
    fig.update_xaxes(dtick=1 if max(len(t["history"]) for t in curves) <= 20 else None)
    return fig


def cv_scores(cv: dict):
    """Each CV candidate's fold scores and its mean with its 95% interval (``automl.selection``
    summaries: Wilson for scores in [0, 1], Student's t in runs before it); the winner in
    red."""
    import plotly.graph_objects as go

    cands = [c for c in cv["candidates"] if c["scores"]]
    if not cands:
        raise Skip("the CV table has no fold scores")
    names = [f"trial {c['trial_id']} ({c['status']})" for c in cands]
    fig = go.Figure()
    for name, c in zip(names, cands):
        win = c["trial_id"] == cv.get("winner")
        colour = "#d6604d" if win else "#4393c3"
        fig.add_trace(go.Scatter(
            x=[name] * len(c["scores"]), y=c["scores"], mode="markers", showlegend=False,
            marker={"color": colour, "size": 7, "opacity": 0.6},
            hovertemplate=f"{name}<br>fold {cv['metric']} %{{y:.4f}}<extra></extra>"))
        ci = c.get("ci95") or [c["mean"], c["mean"]]
        fig.add_trace(go.Scatter(
            x=[name], y=[c["mean"]], mode="markers", showlegend=False,
            marker={"color": colour, "size": 12, "symbol": "diamond"},
            error_y={"type": "data", "symmetric": False, "array": [ci[1] - c["mean"]],
                     "arrayminus": [c["mean"] - ci[0]], "color": colour},
            hovertemplate=f"{name}<br>mean %{{y:.4f}}<br>95% CI [{ci[0]:.4f}, {ci[1]:.4f}] "
                          f"({c.get('interval') or 't'})<extra></extra>"))
    fig.update_layout(height=HEIGHT, template="plotly_white",
                      yaxis_title=f"{cv['metric']} (folds; mean and 95% CI)",
                      title="Cross-validation scores per candidate")
    return fig


def compression_tradeoff(rows: list[dict[str, Any]]):
    """Test accuracy against non-zero parameters (log) and against batch-1 CPU latency
    for the deployed winner, the teacher and each accepted model; models at the same
    point share one label (``winner = 00_teacher``) instead of overprinting."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = [r for r in rows if isinstance(r.get("accuracy"), (int, float))]
    if not rows:
        raise Skip("no measured models in the compression chain")
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True,
                        subplot_titles=("non-zero parameters", "latency, batch 1 (ms)"))
    for col, key in ((1, "nonzero_params"), (2, "latency_ms_b1")):
        pts = []
        for r in rows:
            x = r.get(key) if r.get(key) is not None else r.get("params")
            if x is None or (isinstance(x, float) and math.isnan(x)):
                continue
            pts.append((x, r["accuracy"], r.get("name", r["stage"])))
        for (x, y), names in label_groups(pts).items():
            fig.add_trace(go.Scatter(
                x=[x], y=[y], mode="markers+text", text=["<br>= ".join(names)],
                textposition="top center", showlegend=False, marker={"size": 10},
                cliponaxis=False,
                hovertemplate=f"{' = '.join(names)}<br>%{{x}}<br>test accuracy %{{y:.4f}}"
                              "<extra></extra>"), row=1, col=col)
        xs = [p[0] for p in pts if p[0] and p[0] > 0]
        if xs:  # room for the labels at both ends
            if col == 1:
                lo, hi = math.log10(min(xs)), math.log10(max(xs))
                fig.update_xaxes(range=[lo - 0.35, hi + 0.35], row=1, col=col)
            else:
                pad = 0.2 * (max(xs) - min(xs) or max(xs))
                fig.update_xaxes(range=[min(xs) - pad, max(xs) + pad], row=1, col=col)
    ys = [r["accuracy"] for r in rows]
    fig.update_yaxes(range=[min(ys) - 0.004, max(ys) + 0.006])
    fig.update_xaxes(type="log", row=1, col=1)
    fig.update_yaxes(title_text="test accuracy", row=1, col=1)
    fig.update_layout(height=HEIGHT, template="plotly_white", title="Compression trade-off")
    return fig
