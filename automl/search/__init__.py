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
:func:`knee`, :func:`hypervolume`). Admission lives in
:mod:`automl.cluster`.

``automl.search`` is also the Python API's entry point: calling the package,
``automl.search(spec, model=..., data=...)``, runs :func:`automl.api.search`, which the call
imports at run time (the API sits above every stage; the search layer does not depend on it).
"""

import importlib
import sys
import types

from automl.search._asha import CONTINUE, STOP, RungPolicy, judged_at
from automl.search._front import candidates as cv_candidates
from automl.search._front import front_within, pareto_of, rank_trials
from automl.search._ledger import SweepView, TrialLog, TrialSink, read_ledger
from automl.search._objectives import Objectives
from automl.search._pareto import hypervolume, knee, non_dominated_sort, pareto_front, spread
from automl.search._policy import make_policy
from automl.search._result import SearchResult, TrialRecord, end_state
from automl.search._sampler import make_sampler
from automl.search._study import StudySearch
from automl.search._tuner import run_search

__all__ = [
    "CONTINUE", "STOP", "Objectives", "RungPolicy", "SearchResult", "StudySearch", "SweepView",
    "TrialLog", "TrialRecord", "TrialSink", "cv_candidates", "end_state", "front_within", "hypervolume",
    "judged_at", "knee", "make_policy", "make_sampler", "non_dominated_sort", "pareto_front",
    "pareto_of", "rank_trials", "read_ledger", "run_search", "spread",
]


class _CallableSearch(types.ModuleType):
    """This package, callable: ``automl.search(spec, **options)`` is
    :func:`automl.api.search` (see its docstring)."""

    def __call__(self, spec, **options):
        return importlib.import_module("automl.api").search(spec, **options)


sys.modules[__name__].__class__ = _CallableSearch
