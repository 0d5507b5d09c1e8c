"""Warm start: a sweep begins where a previous one ended.

Before Tune starts, the new run's Optuna study (``<run_dir>/study.db``, which Ray's
``StudySearch`` then opens with ``load_if_exists``) is seeded with

* the previous study's finished trials whose parameters fit this spec's space, via
  ``Study.add_trials`` (so TPE's model starts informed, and they count toward its
  ``n_startup_trials``), and
* the previous run's top configurations (its CV winner first, then its leaderboard), via
  ``Study.enqueue_trial``: Optuna hands queued trials out first, so the sweep's first
  trials evaluate them. This works with a define-by-run space, where Ray's
  ``points_to_evaluate`` is not reliable (FIELD-NOTES).

"Fits" means: replaying this spec's define-by-run space on the old parameters finds every
searched parameter present and inside its new range, and every now-fixed value unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna

from automl.errors import DataError, RegistryError
from automl.space import Misfit, Replay, define_by_run
from automl.spec import Experiment


def fit_space(exp: Experiment, params: dict[str, Any]) -> tuple[dict, dict]:
    """Replay ``exp``'s space on flat ``params`` (``{"training.lr": ...}``).

    Returns:
        ``(searched params, their Optuna distributions)`` in the new space.

    Raises:
        Misfit: a searched parameter is missing or out of range, or a fixed value differs.
    """
    replay = Replay(params)
    fixed = define_by_run(exp)(replay)
    for name, value in fixed.items():
        if name in params and params[name] != value:
            raise Misfit(name, "fixed now", f"{name} is fixed at {value!r} now, was "
                         f"{params[name]!r}")
    return {k: params[k] for k in replay.distributions}, replay.distributions


def resolve(ref: str, registry_root: Path) -> tuple[Path | None, dict | None, str]:
    """Where a warm start comes from: ``(previous run dir or None, registry lineage or
    None, description)``. ``ref`` is a run directory, or a registry reference
    (``NAME@ALIAS``, ``NAME@VERSION``, ``NAME@latest``) whose lineage names the run
    directory (None when that folder is gone: only the registered params are used).

    Raises:
        DataError: ``ref`` has no ``@`` and is not an existing run directory.
        RegistryError: the reference names a model or alias that does not exist.
    """
    path = check_source(ref)
    if path is not None:
        return path, None, str(path)
    from automl.registry import Registry

    version = Registry(registry_root).get(ref)
    run_dir = Path(version.lineage.get("run_dir") or "")
    usable = run_dir.is_dir() and (run_dir / "leaderboard.json").is_file()
    return (run_dir if usable else None), dict(version.lineage), f"{ref} ({version.ref})"


def check_source(ref: str) -> Path | None:
    """The run directory ``ref`` names, or None for a registry reference (has ``@``).
    Cheap: the CLI calls it before any cluster starts.

    Raises:
        DataError: not a registry reference, and not a finished run directory.
    """
    path = Path(ref).expanduser()
    if path.is_dir():
        if not (path / "leaderboard.json").is_file():
            raise DataError("is not a finished run directory (no leaderboard.json)",
                            where=str(path), fix="pass a folder written by `automl search`")
        return path
    if "@" not in ref:
        raise DataError("warm start run directory does not exist", where=ref,
                        fix="pass a run directory, or a registry reference NAME@ALIAS or "
                            "NAME@VERSION")
    return None


def top_configs(run_dir: Path | None, lineage: dict | None, k: int) -> list[dict]:
    """The previous run's best flat configurations, best first, without repeats: its CV
    winner, then its leaderboard (search ranking); only the registered params when its
    run directory is gone."""
    found: list[dict] = []
    if run_dir is not None:
        summary = _read(run_dir / "summary.json") or {}
        found.append((summary.get("winner") or {}).get("params") or {})
        found += [row.get("params") or {} for row in _read(run_dir / "leaderboard.json") or []]
    elif lineage:
        found.append(lineage.get("params") or {})
    out: list[dict] = []
    for params in found:
        if params and params not in out:
            out.append(params)
    return out[:k]


def previous_trials(run_dir: Path | None) -> tuple[list[optuna.trial.FrozenTrial], str | None]:
    """Finished trials of the previous run's study (``study.db``) and its direction:
    completed ones and those the scheduler stopped early (PRUNED, valued at the epoch they
    stopped; TPE ranks them after completed ones)."""
    if run_dir is None or not (run_dir / "study.db").is_file():
        return [], None
    storage = optuna.storages.RDBStorage(f"sqlite:///{(run_dir / 'study.db').resolve()}")
    summaries = optuna.get_all_study_summaries(storage)
    if not summaries:
        return [], None
    study = optuna.load_study(study_name=summaries[0].study_name, storage=storage)
    kept = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    done = [t for t in study.get_trials(deepcopy=False)
            if t.state in kept and t.value is not None]
    return done, study.direction.name.lower()


def seed_study(exp: Experiment, run_dir: Path, ref: str, registry_root: Path) -> dict:
    """Seed ``<run_dir>/study.db`` from the previous run ``ref`` (see the module doc).

    Returns:
        The ``warm_start`` section of ``summary.json``: ``source``, ``run_dir``,
        ``enqueued`` (params, in the order they run), ``history_trials`` added,
        ``skipped`` (count per reason), ``previous_data`` (the old run's data description
        or registered checksum), ``status`` (``seeded`` or ``cold: <why>``).

    Raises:
        DataError: ``ref`` is not a run directory nor a registry reference.
    """
    nightly = exp.nightly
    try:
        prev_dir, lineage, source = resolve(ref, registry_root)
    except RegistryError as e:  # the first night: nothing registered yet
        return {"source": ref, "status": f"cold: {e.message}", "enqueued": [],
                "history_trials": 0, "skipped": {}}
    skipped: dict[str, int] = {}

    def fits(params: dict) -> tuple[dict, dict] | None:
        try:
            return fit_space(exp, params)
        except Misfit as e:
            reason = f"{e.param} {e.kind}"
            skipped[reason] = skipped.get(reason, 0) + 1
            return None

    direction = "maximize" if exp.search.mode == "max" else "minimize"
    storage = optuna.storages.RDBStorage(f"sqlite:///{(run_dir / 'study.db').resolve()}")
    study = optuna.create_study(study_name=exp.name, storage=storage, direction=direction,
                                load_if_exists=True)
    history, old_direction = previous_trials(prev_dir) if nightly.warm_start_history else ([], None)
    prev_spec = _read_yaml(prev_dir / "spec.yaml") if prev_dir else None
    old_metric = ((prev_spec or {}).get("search") or {}).get("metric")
    added = []
    if history and (old_metric not in (None, exp.search.metric) or old_direction != direction):
        skipped[f"previous study optimised {old_metric} ({old_direction})"] = len(history)
        history = []
    for t in history:
        fit = fits(t.params)
        if fit is not None:
            added.append(optuna.trial.create_trial(
                state=t.state, params=fit[0], distributions=fit[1], value=t.value,
                intermediate_values=dict(t.intermediate_values),
                user_attrs={"warm_start": source, "previous_number": t.number}))
    study.add_trials(added)
    enqueued = []
    for params in top_configs(prev_dir, lineage, nightly.warm_start_top_k):
        fit = fits(params)
        if fit is not None and fit[0] not in enqueued:
            study.enqueue_trial(fit[0], user_attrs={"warm_start": source})
            enqueued.append(fit[0])
    previous_data = (_read(prev_dir / "data.json") if prev_dir else None) or (
        {"sha256": lineage.get("data_sha256")} if lineage else None)
    return {"source": source, "run_dir": str(prev_dir) if prev_dir else None,
            "status": "seeded", "enqueued": enqueued, "history_trials": len(added),
            "skipped": skipped, "previous_data": previous_data}


def _read(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _read_yaml(path: Path) -> dict | None:
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None
