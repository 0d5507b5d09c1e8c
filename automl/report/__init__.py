"""``automl report RUN_DIR``: one self-contained, offline HTML report of a finished run,
with interactive figures, and a PNG of each figure for the README and terminals.

Reads only the run directory: ``summary.json``, ``trials.json``, the Optuna study in
``study.db`` (SQLite), and the optional cross-validation (``summary["cv"]``) and
compression (``summary["compression"]`` or ``chain.json``) results; a section whose
input is absent is left out. Writes ``<run_dir>/report/index.html`` (plotly figures,
plotly.js inline: no CDN, opens with no network) and one PNG per figure beside it
(matplotlib; the page links each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from automl._io import write_text
from automl.report import _figures as figs
from automl.report import _plotly as live
from automl.report._html import code, figure, page, pairs, table
from automl.rundir import (
    compression,
    cv_table,
    measured_models,
    onnx_int8_models,
    read_summary,
    read_trials,
)

STUDY_DB = "study.db"


@dataclass(frozen=True)
class Report:
    """What :func:`build_report` wrote: ``index`` (the HTML file), ``figures`` (name ->
    PNG path), ``skipped`` (figure name -> why it was not drawn) and ``interactive`` (the
    figures the page shows as plotly figures)."""

    index: Path
    figures: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    interactive: frozenset[str] = frozenset()


def _load_study(run_dir: Path, name: str | None):
    import optuna

    path = run_dir / STUDY_DB
    if not path.is_file():
        raise figs.Skip(f"no {STUDY_DB} in the run directory")
    storage = f"sqlite:///{path.resolve()}"
    names = optuna.get_all_study_names(storage)
    if not names:
        raise figs.Skip(f"{STUDY_DB} holds no study")
    return optuna.load_study(study_name=name if name in names else names[0], storage=storage)


def _transfer(section: dict) -> str:
    """The ``transfer_hpo`` section: each source with its weight, then the first trials."""
    rows = [[s["name"], s["status"], s["trials"], s.get("weight"),
             "yes" if s.get("dropped") else "no"] for s in section.get("sources", [])]
    out = table(["source study", "status", "trials used", "weight", "dropped"], rows)
    out += (f"<p>The sweep's own model weighs {section.get('own_weight')}; the sources "
            f"proposed trials {section.get('proposed_by_sources') or 'none'}, the sampler "
            f"{section.get('proposed_by_sampler', 0)}.</p>")
    first = section.get("first_trials") or []
    if first:
        out += table(["trial", "proposed by", "state", "value"],
                     [[f["trial"], f["from"], f["state"], f["value"]] for f in first])
    return out


def build_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Report:
    """Write the report of ``run_dir`` into ``out_dir`` (default ``<run_dir>/report``).

    Raises:
        DataError: ``run_dir`` or its ``summary.json`` is missing or unreadable.
    """
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    out = Path(out_dir) if out_dir else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    trials, metric = read_trials(run_dir), summary.get("metric", "val_accuracy")
    cv, chain = cv_table(summary), compression(run_dir, summary)
    drawn: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    divs: dict[str, str] = {}

    def draw(name: str, fn, *args) -> None:
        try:
            drawn[name] = fn(*args, out / f"{name}.png")
        except figs.Skip as e:
            skipped[name] = str(e)
        try:
            fig = getattr(live, name)(*args)
        except figs.Skip as e:
            skipped.setdefault(name, str(e))
            return
        divs[name] = fig.to_html(full_html=False, include_plotlyjs=False, div_id=name,
                                 config={"displaylogo": False, "responsive": True})

    try:
        study = _load_study(run_dir, summary.get("name"))
    except figs.Skip as e:
        study = None
        for name in ("optimization_history", "parallel_coordinates", "param_importances"):
            skipped[name] = str(e)
    if study is not None:
        draw("optimization_history", figs.optimization_history, study)
        draw("parallel_coordinates", figs.parallel_coordinates, study)
        draw("param_importances", figs.param_importances, study)
        if len(study.directions) > 1:
            draw("pareto_front", figs.pareto_front, study)
            draw("hypervolume_history", figs.hypervolume_history, study)
    draw("learning_curves", figs.learning_curves, trials, metric)
    if cv:
        draw("cv_scores", figs.cv_scores, cv)
    models = measured_models(chain) if chain else []
    if chain:
        draw("compression_tradeoff", figs.compression_tradeoff, models)

    files = {k: p.name for k, p in drawn.items()}
    search_figs = [("optimization_history", "Optimisation history (Optuna)"),
                   ("parallel_coordinates", "Parallel coordinates (Optuna)"),
                   ("param_importances", "Hyperparameter importance (Optuna, fANOVA)"),
                   ("learning_curves", f"Learning curves: {metric} per epoch, by how each "
                                       "trial ended")]
    if "pareto_front" in drawn or "pareto_front" in divs:
        search_figs.insert(0, ("pareto_front", "Pareto front (Optuna)"))
        search_figs.insert(1, ("hypervolume_history", "Hypervolume against trials (Optuna)"))
    sections = [("Overview", _overview(summary)),
                ("Leaderboard (search)", _leaderboard(summary, metric)),
                *([("Pareto front (cross-validated)", _front(summary))]
                  if summary.get("pareto") else []),
                ("Search", "".join(figure(n, c, files, skipped, divs) for n, c in search_figs))]
    if summary.get("transfer_hpo"):
        sections.append(("Transfer from earlier studies", _transfer(summary["transfer_hpo"])))
    if cv:
        rows = [[c["trial_id"], c["status"], c["mean"], c["std"], c["scores"], c["n_params"]]
                for c in cv["candidates"]]
        sections.append(("Cross-validation", table(
            ["trial", "status", f"mean {cv['metric']}", "std", "fold scores", "parameters"],
            rows) + (f"<p>{cv['reason']}</p>" if cv.get("reason") else "")
            + figure("cv_scores", "CV scores per candidate: folds, mean and 95% interval",
                     files, skipped, divs)))
    if chain:
        sections.append(("Compression", _compression(chain)
                         + figure("compression_tradeoff", "Accuracy vs parameters and latency",
                                  files, skipped, divs)))
    sections.append(("Where things are", _where(run_dir, summary)))
    head = ""
    if divs:  # plotly.js once, inline: the page needs no network
        from plotly.offline import get_plotlyjs

        head = f'<script type="text/javascript">{get_plotlyjs()}</script>'
    index = write_text(out / "index.html",
                       page(f"automl report: {summary.get('name', run_dir.name)}", sections,
                            head))
    return Report(index, drawn, skipped, frozenset(divs))


def _overview(s: dict) -> str:
    w, test = s.get("winner") or s.get("best") or {}, s.get("test") or {}
    data = s.get("data") or {}
    return pairs([
        ("run", s.get("run_dir")), ("search metric", f"{s.get('metric')} ({s.get('mode')})"),
        ("trials", s.get("trials")), ("wall time (s)", s.get("wall_time_s")),
        ("winner trial", w.get("trial_id")), ("why", w.get("reason")),
        ("winner config", w.get("params")),
        ("test scores", {k: v for k, v in test.items() if isinstance(v, (int, float))}),
        ("data", f"{data.get('name')}: {data.get('rows')} rows, sha256 {data.get('sha256')}"),
        ("spec sha256", s.get("spec_sha256")),
    ])


def _front(s: dict) -> str:
    """The cross-validated front (``summary["pareto"]``): each candidate's axes, whether it
    keeps the constraints, is on the front, or won."""
    rows = s.get("pareto") or []
    axes = list(rows[0]["objectives"]) if rows else []
    return table(["trial", *axes, "feasible", "on front", "winner"],
                 [[r["trial_id"], *(r["objectives"][a] for a in axes), r["feasible"],
                   r["on_front"], r["winner"]] for r in rows])


def _leaderboard(s: dict, metric: str) -> str:
    rows = [[i, r.get("trial_id"), r.get(metric), r.get("epochs"), r.get("end_state"),
             r.get("params")] for i, r in enumerate(s.get("leaderboard") or [], 1)]
    return table(["rank", "trial", metric, "epochs", "end", "config"], rows) if rows else ""


def _compression(chain: dict) -> str:
    """One row per measured model (deployed winner, teacher, accepted stages), then the
    stages that were not accepted with the reason; the guard decides on validation rows."""
    cols = ["model", "status", "val accuracy", "val drop", "test accuracy", "params",
            "non-zero", "MACs", "file bytes", "latency b1 (ms)", "ONNX bytes",
            "ONNX max |diff|", "ORT latency b1 (ms)", "reason"]
    drops = {f"{s.get('index', 0):02d}_{s.get('stage')}": s for s in chain.get("stages", [])}
    rows = []
    for m in measured_models(chain):
        st, onnx = drops.get(m.get("name"), {}), m.get("onnx") or {}
        # the deployed winner was trained on the validation rows: its score there says nothing
        val = None if m["status"] == "winner" else m.get("val_accuracy")
        rows.append([m.get("name", m["stage"]), m["status"], val,
                     st.get("val_accuracy_drop", st.get("accuracy_drop")), m.get("accuracy"),
                     m.get("params"), m.get("nonzero_params"), m.get("macs"),
                     m.get("size_bytes"), m.get("latency_ms_b1"), onnx.get("bytes"),
                     onnx.get("max_abs_diff"), onnx.get("latency_ms_b1"), ""])
    for q in onnx_int8_models(chain):  # ONNX Runtime's int8, kept by the same guard
        rows.append([q.get("name"), f"ONNX Runtime int8 of {q.get('source')}",
                     q.get("val_accuracy"), q.get("val_accuracy_drop"), q.get("accuracy"),
                     None, None, None, None, None, q.get("bytes"), None,
                     q.get("latency_ms_b1"), ""])
    for st in chain.get("stages", []):
        if st.get("status") != "accepted":
            rows.append([f"{st.get('index')} {st.get('stage')}", st.get("status"),
                         st.get("val_accuracy"),
                         st.get("val_accuracy_drop", st.get("accuracy_drop")),
                         st.get("accuracy"), None, None, None, None, None, None, None, None,
                         st.get("reason") or ""])
    return table(cols, rows)


def _where(run_dir: Path, s: dict) -> str:
    """Commands that open the run's study, event files, W&B runs and registry entries."""
    db = (run_dir / STUDY_DB).resolve()
    reg, trk = s.get("registry") or {}, s.get("tracking") or {}
    rows = [("Optuna study", code(f"automl dashboard {run_dir}") + " (optuna-dashboard, "
             "live during a sweep; or " + code(f"optuna-dashboard sqlite:///{db}") + ")")]
    if trk.get("tensorboard"):
        rows.append(("TensorBoard", code(trk["tensorboard"])))
    if trk.get("backend") == "wandb" and trk.get("mode"):
        text = escape(f"{trk['mode']} runs, project {trk.get('project')}, "
                      f"group {trk.get('group')}")
        rows.append(("W&B", text + (f"; upload with {code(trk['sync'])}" if trk.get("sync")
                                    else "")))
    if reg:
        rows.append(("registry", escape(f"{', '.join(reg['versions'])} in {reg['dir']}")))
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>"
                               for k, v in rows) + "</table>"
