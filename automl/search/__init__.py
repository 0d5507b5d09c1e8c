"""The search: spec -> Optuna sampler + ASHA + admitted resources -> Ray Tune ``Tuner``.

Public API: :func:`run_search`, :class:`SearchResult`, :class:`TrialRecord`,
:func:`admit`, :class:`Admission`, :func:`make_sampler`.
"""

from automl.search._resources import Admission, admit, admit_bundles, admit_trials, trial_bundles
from automl.search._result import SearchResult, TrialRecord
from automl.search._sampler import make_sampler
from automl.search._tuner import run_search

__all__ = [
    "Admission", "SearchResult", "TrialRecord", "admit", "admit_bundles", "admit_trials",
    "make_sampler", "run_search", "trial_bundles",
]
