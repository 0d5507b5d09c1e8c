"""Selection: the search's top k re-scored by stratified k-fold cross-validation on
the training rows, a winner named (best CV mean; near-ties go to the smaller model),
then retrained on all training rows and scored once on the test split.

Public API: :func:`cross_validate`, :class:`CVResult`, :class:`CandidateCV`,
:func:`refit_and_test`, :func:`make_folds`, :class:`FoldPlan`,
:func:`classification_scores`, :func:`summarize`, :func:`choose_winner`,
:func:`fit_and_score` (:func:`fit_predict` then :func:`with_scores`),
:func:`print_cv_table`, :class:`WarmFoldWorkers`.

The names are imported when first used (PEP 562): a Ray worker that runs a fold training
imports ``automl.selection._tasks``, and with it this package, without the search and
Ray Tune that ``_cv`` needs (about 1 s of a new worker's start on a 2-core machine).
"""

from __future__ import annotations

from automl._lazy import lazy_exports

_WHERE = {
    "CVResult": "_cv",
    "CandidateCV": "_cv",
    "WarmFoldWorkers": "_cv",
    "cross_validate": "_cv",
    "refit_and_test": "_cv",
    "FoldPlan": "_folds",
    "make_folds": "_folds",
    "print_cv_table": "_report",
    "choose_winner": "_scores",
    "classification_scores": "_scores",
    "summarize": "_scores",
    "fit_and_score": "_tasks",
    "fit_predict": "_tasks",
    "with_scores": "_tasks",
}

__all__ = sorted(_WHERE)


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
