"""Selection: the search's top k re-scored by stratified k-fold cross-validation on
the training rows, a winner named (best CV mean; near-ties go to the smaller model),
then retrained on all training rows and scored once on the test split.

Public API: :func:`cross_validate`, :class:`CVResult`, :class:`CandidateCV`,
:func:`refit_and_test`, :func:`make_folds`, :class:`FoldPlan`,
:func:`classification_scores`, :func:`summarize`, :func:`choose_winner`,
:func:`fit_and_score`, :func:`print_cv_table`, :class:`WarmFoldWorkers`.
"""

from automl.selection._cv import (
    CandidateCV,
    CVResult,
    WarmFoldWorkers,
    cross_validate,
    refit_and_test,
)
from automl.selection._folds import FoldPlan, make_folds
from automl.selection._report import print_cv_table
from automl.selection._scores import choose_winner, classification_scores, summarize
from automl.selection._tasks import fit_and_score

__all__ = [
    "CVResult",
    "CandidateCV",
    "FoldPlan",
    "WarmFoldWorkers",
    "choose_winner",
    "classification_scores",
    "cross_validate",
    "fit_and_score",
    "make_folds",
    "print_cv_table",
    "refit_and_test",
    "summarize",
]
