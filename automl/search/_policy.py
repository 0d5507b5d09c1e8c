"""The spec's rung policy: :class:`~automl.search._asha.RungPolicy` from ``scheduler``."""

from __future__ import annotations

from automl.search._asha import RungPolicy
from automl.search._objectives import Objectives
from automl.spec import Experiment

#: adaptive brackets: the first trials probe the window's first rung (run past it unjudged,
#: so its rank correlation with the next rung is measured from the start)
PROBE_TRIALS = 12
#: adaptive brackets: Spearman's rho of the window's first rung at or above which the
#: window narrows to one bracket (a ``probe_rate`` of trials still probe it)
NARROW_AT = 0.8


def make_policy(exp: Experiment, **overrides) -> RungPolicy | None:
    """ASHA (Li et al. 2020) in epochs from ``exp.scheduler`` (with
    :meth:`Experiment.bracket_count` > 1, asynchronous Hyperband, Li et al. 2018), judging
    ``search.metric`` in ``search.mode`` (with ``search.objectives``: every objective,
    MO-ASHA, Schmucker et al. 2021) up to :attr:`Experiment.max_epochs`, its brackets'
    start rung adapting to measured rung correlations when
    :meth:`Experiment.adaptive_bracketing` (then the first :data:`PROBE_TRIALS` trials
    probe the window's first rung, and the window narrows to one bracket once that rung's
    correlation is at least :data:`NARROW_AT`); None when ``scheduler.type`` is ``none``.
    ``overrides`` replace :class:`RungPolicy` keyword arguments (``adaptive``,
    ``min_pairs``, ``min_correlation``, ...; the search-quality benchmark's variants).

    Raises:
        ValueError: an override outside :class:`RungPolicy`'s ranges."""
    sch = exp.scheduler
    if sch.type == "none":
        return None
    adaptive = exp.adaptive_bracketing()
    kwargs = {"mode": Objectives.of(exp.search).mode, "brackets": exp.bracket_count(),
              "seed": exp.search.seed, "adaptive": adaptive, "cutoff": sch.cutoff,
              **({"probe_trials": PROBE_TRIALS, "narrow_at": NARROW_AT} if adaptive else {}),
              **overrides}
    return RungPolicy(sch.grace_period, sch.reduction_factor, exp.max_epochs, **kwargs)
