"""The spec's rung policy: :class:`~automl.search._asha.RungPolicy` from ``scheduler``."""

from __future__ import annotations

from automl.search._asha import RungPolicy
from automl.search._objectives import Objectives
from automl.spec import Experiment


def make_policy(exp: Experiment, **overrides) -> RungPolicy | None:
    """ASHA (Li et al. 2020) in epochs from ``exp.scheduler`` (with
    :meth:`Experiment.bracket_count` > 1, asynchronous Hyperband, Li et al. 2018), judging
    ``search.metric`` in ``search.mode`` (with ``search.objectives``: every objective,
    MO-ASHA, Schmucker et al. 2021) up to :attr:`Experiment.max_epochs`, its brackets'
    start rung adapting to measured rung correlations when
    :meth:`Experiment.adaptive_bracketing`; None when ``scheduler.type`` is ``none``.
    ``overrides`` replace :class:`RungPolicy` keyword arguments (``adaptive``,
    ``min_pairs``, ``min_correlation``, ...; the search-quality benchmark's variants).

    Raises:
        ValueError: an override outside :class:`RungPolicy`'s ranges."""
    sch = exp.scheduler
    if sch.type == "none":
        return None
    kwargs = {"mode": Objectives.of(exp.search).mode, "brackets": exp.bracket_count(),
              "seed": exp.search.seed, "adaptive": exp.adaptive_bracketing(),
              "cutoff": sch.cutoff, **overrides}
    return RungPolicy(sch.grace_period, sch.reduction_factor, exp.max_epochs, **kwargs)
