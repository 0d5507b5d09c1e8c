"""The search: spec -> our Optuna ask/tell searcher + rung policy + admitted resources ->
Ray Tune ``Tuner``, and the sweep's event ledger.

The core is Ray-free and tested without Ray: :class:`RungPolicy` (ASHA / Hyperband
decisions), :class:`StudySearch` (Optuna ask/tell over ``study.db``). Tune reaches them
through :class:`RungScheduler` and :class:`StudySearcher`; :class:`Ledger` turns Tune's
trial events into ours for :class:`TrialSink` objects.

Public API: :func:`run_search`, :class:`SearchResult`, :class:`TrialRecord`,
:func:`make_sampler`, :func:`make_policy`, :class:`RungPolicy`, :class:`StudySearch`,
:class:`TrialSink`, :class:`SweepView`, :class:`TrialLog`; several objectives:
:class:`Objectives`, :func:`rank_trials`, :func:`pareto_of`, :func:`cv_candidates` and the
front's geometry (:func:`non_dominated_sort`, :func:`pareto_front`, :func:`spread`,
:func:`knee`, :func:`hypervolume`); transfer from earlier studies: :class:`SourceStudy`,
:class:`TransferSampler` (via :func:`make_sampler`'s ``sources``), :class:`RushPolicy`.
Admission lives in :mod:`automl.cluster`.

``automl.search`` is also the Python API's entry point: calling the package,
``automl.search(spec, model=..., data=...)``, runs :func:`automl.api.search`, which the call
imports at run time (the API sits above every stage; the search layer does not depend on it).
"""

from __future__ import annotations

import importlib
import sys
import types

from automl._lazy import lazy_exports

# Imported on first use: a trial process or a Ray Train worker imports
# ``automl.search._trainable`` / ``_distributed`` and must not pay for Optuna, Tune's
# searcher and the sweep driver it never runs (measured: 0.3 to 0.6 s per process).
_WHERE = {
    "CONTINUE": "_asha", "STOP": "_asha", "RungPolicy": "_asha", "judged_at": "_asha",
    "cv_candidates": "_front", "front_within": "_front", "pareto_of": "_front",
    "rank_trials": "_front",
    "SweepView": "_ledger", "TrialLog": "_ledger", "TrialSink": "_ledger",
    "read_ledger": "_ledger",
    "Objectives": "_objectives",
    "hypervolume": "_pareto", "knee": "_pareto", "non_dominated_sort": "_pareto",
    "pareto_front": "_pareto", "spread": "_pareto",
    "make_policy": "_policy",
    "SearchResult": "_result", "TrialRecord": "_result", "end_state": "_result",
    "make_sampler": "_sampler",
    "StudySearch": "_study",
    "run_search": "_tuner",
    "RushPolicy": "_transfer", "SourceStudy": "_transfer", "TransferSampler": "_transfer",
}

__all__ = sorted(_WHERE)

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)


class _CallableSearch(types.ModuleType):
    """This package, callable: ``automl.search(spec, **options)`` is
    :func:`automl.api.search` (see its docstring)."""

    def __call__(self, spec, **options):
        return importlib.import_module("automl.api").search(spec, **options)


sys.modules[__name__].__class__ = _CallableSearch
