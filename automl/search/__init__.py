"""The search: spec -> our Optuna ask/tell searcher + rung policy + admitted resources ->
Ray Tune ``Tuner``, and the sweep's event ledger.

The core is Ray-free and tested without Ray: :class:`RungPolicy` (ASHA / Hyperband
decisions), :class:`StudySearch` (Optuna ask/tell over ``study.db``). Tune reaches them
through :class:`RungScheduler` and :class:`StudySearcher`; :class:`Ledger` turns Tune's
trial events into ours for :class:`TrialSink` objects.

Public API: :func:`run_search`, :class:`SearchResult`, :class:`TrialRecord`,
:func:`make_sampler`, :func:`make_policy`, :class:`RungPolicy`, :class:`StudySearch`,
:class:`TrialSink`, :class:`SweepView`, :class:`TrialLog`. Admission lives in
:mod:`automl.cluster`.
"""

from automl.search._asha import CONTINUE, STOP, RungPolicy, judged_at
from automl.search._ledger import SweepView, TrialLog, TrialSink, read_ledger
from automl.search._policy import make_policy
from automl.search._result import SearchResult, TrialRecord, end_state
from automl.search._sampler import make_sampler
from automl.search._study import StudySearch
from automl.search._tuner import run_search

__all__ = [
    "CONTINUE", "STOP", "RungPolicy", "SearchResult", "StudySearch", "SweepView", "TrialLog",
    "TrialRecord", "TrialSink", "end_state", "judged_at", "make_policy", "make_sampler",
    "read_ledger", "run_search",
]
