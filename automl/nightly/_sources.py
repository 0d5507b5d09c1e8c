"""Transfer HPO's sources: the earlier studies ``nightly.transfer_from`` names, read into
:class:`automl.search._transfer.SourceStudy` objects for the sampler, and the summary's
``transfer_hpo`` section afterwards.

A source is a run directory (its ``study.db``; the study named as its ``spec.yaml``) or an
Optuna storage URL with a study name. Its finished trials (completed, and stopped early
with their learning curves) whose searched parameters fit this spec's space are used; the
fixed values (epochs, batch size) may differ, since a related sweep need not train alike.
Trials a warm start copied in and duplicates answered from a record are left out: they
are not that study's own evaluations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from automl.errors import DataError
from automl.search._study import DUPLICATE_OF, WARM_HISTORY
from automl.search._transfer import RECORD_KEY, SourceStudy
from automl.space import Misfit, Replay, define_by_run
from automl.spec import Experiment, TransferSource

#: how many of the sweep's first trials the summary lists
FIRST_TRIALS = 5


def _where(i: int) -> str:
    return f"nightly.transfer_from[{i}]"


def check_sources(exp: Experiment) -> None:
    """Cheap checks before any cluster starts: each run directory exists and holds a
    ``study.db``; each ``sqlite:///`` storage's file exists.

    Raises:
        DataError: one line naming ``nightly.transfer_from[i]`` and the fix.
    """
    for i, src in enumerate(exp.nightly.transfer_from):
        if src.run_dir is not None:
            path = Path(src.run_dir).expanduser()
            if not (path / "study.db").is_file():
                raise DataError(f"{src.run_dir} is not a run directory with a study.db",
                                where=_where(i), fix="name a folder written by `automl "
                                "search`, or give {storage: URL, study: NAME}")
        elif src.storage.startswith("sqlite:///"):
            path = Path(src.storage[len("sqlite:///"):]).expanduser()
            if not path.is_file():
                raise DataError(f"the SQLite file {path} does not exist", where=_where(i),
                                fix="check the path after sqlite:/// (three slashes, then "
                                    "the path; four for an absolute one)")


def _open(i: int, src: TransferSource) -> optuna.Study:
    """The source's study (read-only use).

    Raises:
        DataError: the storage cannot be opened or holds no such study.
    """
    if src.run_dir is not None:
        path = Path(src.run_dir).expanduser().resolve()
        url = f"sqlite:///{path / 'study.db'}"
    else:
        url = src.storage
    try:
        storage = optuna.storages.get_storage(url)
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    except Exception as e:  # noqa: BLE001 - any driver error is the same one line for the user
        raise DataError(f"cannot open {url}: {type(e).__name__}: {str(e).splitlines()[0]}",
                        where=_where(i), fix="check the URL and that the file or database "
                                             "exists") from None
    name = src.study
    if name is None:
        name = names[0] if len(names) == 1 else _spec_name(src.run_dir)
    if name not in names:
        raise DataError(f"{url} holds no study {name!r} (it holds {', '.join(names) or 'none'})",
                        where=_where(i), fix="set study: to one of those names")
    return optuna.load_study(study_name=name, storage=storage)


def _spec_name(run_dir: str | None) -> str | None:
    import yaml

    try:
        spec = yaml.safe_load((Path(run_dir).expanduser() / "spec.yaml").read_text())
        return spec.get("name") if isinstance(spec, dict) else None
    except (OSError, TypeError, yaml.YAMLError):
        return None


def _metric_of(src: TransferSource, study: optuna.Study) -> str | None:
    """The metric the source optimised, when it says: its run's spec, or the study's
    metric names."""
    if src.run_dir is not None:
        import yaml

        try:
            spec = yaml.safe_load((Path(src.run_dir).expanduser() / "spec.yaml").read_text())
            return ((spec or {}).get("search") or {}).get("metric")
        except (OSError, yaml.YAMLError):
            return None
    names = study.metric_names
    return names[0] if names else None


def read_sources(exp: Experiment) -> tuple[list[SourceStudy], list[dict[str, Any]]]:
    """Read every ``nightly.transfer_from`` study.

    Returns:
        ``(sources, info)``: the usable sources, and per entry ``{"name", "study",
        "status"`` (``used`` or ``skipped: <why>``), ``"trials"`` used, ``"skipped"``
        (count per reason)``}``.

    Raises:
        DataError: an entry's storage cannot be opened or lacks the study (one line naming
            ``nightly.transfer_from[i]``).
    """
    space = define_by_run(exp)
    sources, info = [], []
    for i, src in enumerate(exp.nightly.transfer_from):
        study = _open(i, src)
        row: dict[str, Any] = {"name": src.label, "study": study.study_name, "trials": 0,
                               "skipped": {}}
        info.append(row)
        metric = _metric_of(src, study)
        if len(study.directions) > 1:
            row["status"] = "skipped: it has several objectives"
            continue
        if metric is not None and metric != exp.search.metric:
            row["status"] = f"skipped: it optimised {metric}, this sweep {exp.search.metric}"
            continue
        done = [t for t in study.get_trials(deepcopy=False)
                if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
                and WARM_HISTORY not in t.user_attrs and DUPLICATE_OF not in t.user_attrs]
        last = max([1, *(int(e) for t in done for e in t.intermediate_values)])
        params, curves, dists = [], [], {}
        for t in done:
            curve = {int(e): float(v) for e, v in t.intermediate_values.items() if v is not None}
            if not curve and t.value is not None:
                curve = {last: float(t.value)}
            if not curve:
                row["skipped"]["no value"] = row["skipped"].get("no value", 0) + 1
                continue
            replay = Replay(dict(t.params))
            try:
                space(replay)
            except Misfit as e:
                reason = f"{e.param} {e.kind}"
                row["skipped"][reason] = row["skipped"].get(reason, 0) + 1
                continue
            params.append({k: t.params[k] for k in replay.distributions})
            curves.append(curve)
            dists.update(replay.distributions)
        row["trials"] = len(params)
        if len(params) < 2:
            row["status"] = f"skipped: {len(params)} usable trials (2 at least)"
            continue
        row["status"] = "used"
        mode = "max" if study.direction == optuna.study.StudyDirection.MAXIMIZE else "min"
        sources.append(SourceStudy(src.label, tuple(params), tuple(curves), mode, dists))
    return sources, info


def transfer_section(info: list[dict], study_db: Path, study_name: str) -> dict[str, Any]:
    """The summary's ``transfer_hpo`` section after the sweep: each source with its final
    weight, the sweep's own model's weight, the weights over time, which trials the sources
    proposed, and the first trials' values (the trials without transfer are what the
    benchmark compares against: ``benchmarks/results/transfer.md``)."""
    record: dict[str, Any] = {}
    first: list[dict[str, Any]] = []
    try:
        study = optuna.load_study(study_name=study_name,
                                  storage=f"sqlite:///{Path(study_db).resolve()}")
        record = study.user_attrs.get(RECORD_KEY) or {}
        own = [t for t in study.get_trials(deepcopy=False)
               if WARM_HISTORY not in t.user_attrs and DUPLICATE_OF not in t.user_attrs]
        proposed = set(record.get("transfer", []))
        for t in sorted(own, key=lambda t: t.number)[:FIRST_TRIALS]:
            curve = t.intermediate_values
            value = t.value if t.value is not None else (curve[max(curve)] if curve else None)
            first.append({"trial": t.number, "value": value, "state": t.state.name.lower(),
                          "from": "sources" if t.number in proposed else "sampler"})
    except (KeyError, OSError) as e:  # no study: the search never ran
        record = {"error": str(e)}
    weights = record.get("weights", {})
    sources = [{**row, "weight": weights.get(row["name"], 0.0 if row["status"] == "used"
                                             else None),
                "dropped": row["name"] in record.get("dropped", [])} for row in info]
    return {"sources": sources, "own_weight": record.get("own"),
            "proposed_by_sources": record.get("transfer", []),
            "proposed_by_sampler": len(record.get("inner", [])),
            "weights_history": record.get("history", []), "first_trials": first}
