"""One :class:`benchmarks._events.Runner` per method of the search-quality benchmark, each
built from ``(problem, seed)`` and driven by :func:`benchmarks._events.run`, so every
method returns the same event log.

=================  ==========================================================================
``automl``         this project's default: ``make_sampler`` (``auto``: TPE with the constant
                   liar and a random-forest model, asked in turn) in
                   ``StudySearch`` (a stopped trial told PRUNED) + ``make_policy``
                   (``RungPolicy``: ASHA, grace 1, reduction factor 3, rank cutoff, 2
                   brackets whose start rung adapts, 12 probe trials, one bracket once the
                   start rung's Spearman is 0.8: ``scheduler.brackets: auto``), built from
                   an ``automl.spec.Experiment`` as ``automl.search`` builds them; study in
                   memory
``automl[k=v+..]`` the same with spec or policy knobs changed (:data:`KNOBS`; ``bohb=1``
                   wraps the sampler in :class:`HighestRungSampler`)
``random``         random search (Optuna's ``RandomSampler`` in ``StudySearch``), every trial
                   at full fidelity
``random_asha``    the same sampler + our ``RungPolicy`` as plain ASHA (``brackets: 1``,
                   ``cutoff: quantile``: Ray Tune's ``ASHAScheduler``)
``optuna_tpe_hb``  ``TPESampler(seed)`` + ``HyperbandPruner(1, max_t, 3)``, fixed study name
``optuna_tpe_sh``  ``TPESampler(seed)`` + ``SuccessiveHalvingPruner(min_resource=1,
                   reduction_factor=3)``
``syne_asha``      Syne Tune 0.16 ``ASHA`` (stopping type, grace 1, reduction factor 3)
``syne_bohb``      Syne Tune 0.16 ``BOHB`` (KDE searcher over the same ASHA)
``dehb``           DEHB 0.1.2 ask/tell (eta 3, fidelity 1..max_t)
``smac``           SMAC3 2.4.1 ``MultiFidelityFacade`` + ``Hyperband`` (eta 3) ask/tell
=================  ==========================================================================

Trial-based methods report at :func:`benchmarks._events.checkpoints`; DEHB and SMAC ask
for one fidelity at a time (rounded to the nearest integer step: their geometric budgets
``max_t * 3**-k`` are fractional) and restart the configuration at each.

A method whose package is missing raises ImportError with a one-line reason.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import Counter
from typing import Any

import optuna
from optuna.trial import TrialState, create_trial

from benchmarks._events import Job, checkpoints

PEERS = ("random", "random_asha", "optuna_tpe_hb", "optuna_tpe_sh", "syne_asha",
         "syne_bohb", "dehb", "smac")
METHODS = ("automl", *PEERS)
#: extra rows of ours: the defaults before this one (TPE alone: ``sampler=tpe``; before it,
#: adaptive brackets without probes or narrowing: ``probe=0+narrow=off``; fixed brackets
#: with the quantile cutoff) and what the defaults were chosen against
VARIANTS = ("automl[sampler=tpe]", "automl[probe=0+narrow=off+sampler=tpe]",
            "automl[probe=0+sampler=tpe]", "automl[probe=5+sampler=tpe]",
            "automl[probe=8+sampler=tpe]", "automl[probe=16+sampler=tpe]",
            "automl[probe=24+sampler=tpe]", "automl[probe=5+narrow=off+sampler=tpe]",
            "automl[probe=8+narrow=off+sampler=tpe]",
            "automl[probe=5+narrow=0.9+sampler=tpe]",
            "automl[probe=8+narrow=0.7+sampler=tpe]",
            "automl[probe=5+prate=0.2+sampler=tpe]",
            "automl[brackets=2+cutoff=quantile+sampler=tpe]",
            "automl[cutoff=quantile+probe=0+narrow=off+sampler=tpe]",
            "automl[brackets=2+sampler=tpe]", "automl[brackets=1+sampler=tpe]",
            "automl[min_corr=0.3+probe=0+narrow=off+sampler=tpe]",
            "automl[min_corr=0.7+probe=0+narrow=off+sampler=tpe]",
            "automl[min_pairs=8+probe=0+narrow=off+sampler=tpe]",
            "automl[brackets=3+adaptive=1+sampler=tpe]",
            "automl[n_startup=4+probe=0+narrow=off+sampler=tpe]",
            "automl[brackets=1+cutoff=quantile+sampler=tpe]",
            "automl[brackets=3+cutoff=quantile+sampler=tpe]",
            "automl[brackets=4+cutoff=quantile+sampler=tpe]",
            "automl[brackets=1+n_startup=4+cutoff=quantile+sampler=tpe]",
            "automl[brackets=2+n_startup=4+cutoff=quantile+sampler=tpe]",
            "automl[rfrac=0.2+sampler=tpe]", "automl[rfrac=0.33+sampler=tpe]",
            "automl[n_startup=5]", "automl[n_startup=12]")
#: methods that need no benchmark-only package (the quick path, CI)
CORE = ("automl", "random", "random_asha", "optuna_tpe_hb", "optuna_tpe_sh")
_INSTALL = "make bench-setup installs it"


#: spec knobs of a variant (:func:`experiment`; ``rfrac`` is ``search.random_fraction``),
#: and ``bohb`` (:class:`HighestRungSampler`)
SPEC_KNOBS = ("brackets", "n_startup", "sampler", "grace", "rf", "cutoff", "rfrac")
#: the rung policy's adaptive-bracket settings: knob -> (``RungPolicy`` keyword, how its
#: text is read); naming one passes it to ``make_policy`` (``adaptive=1`` with an explicit
#: ``brackets`` count: an adaptive window of that many brackets; ``probe``, ``narrow``
#: (``off``: never narrows) and ``prate``: the probes and narrowing of adaptive brackets)
POLICY_KNOBS = {"adaptive": ("adaptive", lambda v: v not in ("0", "false")),
                "min_corr": ("min_correlation", float), "min_pairs": ("min_pairs", int),
                "probe": ("probe_trials", int), "prate": ("probe_rate", float),
                "narrow": ("narrow_at", lambda v: None if v == "off" else float(v))}
KNOBS = (*SPEC_KNOBS, *POLICY_KNOBS, "bohb")
#: ``automl[k=v+k=v]``
VARIANT_PATTERN = re.compile(r"^automl\[(\w+=[\w.]+(?:\+\w+=[\w.]+)*)\]$")


def experiment(problem, seed: int, sampler: str = "auto", asha: bool = True,
               **knobs: Any):
    """The spec our search is built from: ``search`` (``sampler``, ``seed``, and
    ``n_startup`` and ``rfrac`` when given) and ``scheduler`` (ASHA, grace 1, reduction
    factor 3 up to ``max_t``; ``brackets``, ``grace`` and ``rf`` when given); everything
    else the spec's defaults.

    Raises:
        ValueError: a knob not in :data:`SPEC_KNOBS`.
    """
    from automl.spec import Experiment

    knobs = dict(knobs)
    search = {"sampler": knobs.pop("sampler", sampler), "seed": seed,
              "metric": "val_accuracy"}
    if "n_startup" in knobs:
        search["n_startup_trials"] = int(knobs.pop("n_startup"))
    if "rfrac" in knobs:
        search["random_fraction"] = float(knobs.pop("rfrac"))
    scheduler = {"type": "asha" if asha else "none",
                 "grace_period": int(knobs.pop("grace", 1)),
                 "reduction_factor": float(knobs.pop("rf", 3)), "max_epochs": problem.max_t}
    if "brackets" in knobs:
        b = knobs.pop("brackets")
        scheduler["brackets"] = b if b == "auto" else int(b)
    if "cutoff" in knobs:
        scheduler["cutoff"] = knobs.pop("cutoff")
    if knobs:
        raise ValueError(f"unknown knobs {sorted(knobs)}; {', '.join(SPEC_KNOBS)}")
    return Experiment.model_validate({"name": "sq", "training": {"epochs": problem.max_t},
                                      "search": search, "scheduler": scheduler})


def variant_knobs(method: str) -> dict[str, str] | None:
    """``automl[k=v+k=v]`` as ``{k: v}``; None when ``method`` is not a variant.

    Raises:
        ValueError: a knob not in :data:`KNOBS`.
    """
    m = VARIANT_PATTERN.match(method)
    if m is None:
        return None
    knobs = dict(kv.split("=", 1) for kv in m.group(1).split("+"))
    bad = sorted(set(knobs) - set(KNOBS))
    if bad:
        raise ValueError(f"--methods: unknown knob {bad[0]!r} in {method}; one of "
                         f"{', '.join(KNOBS)}")
    return knobs


class CoreRunner:
    """Our search core: :class:`automl.search.StudySearch` + :class:`RungPolicy` (or None:
    every trial to ``max_t``), through their public methods only."""

    def __init__(self, problem, exp, points: list[int] | None = None, bohb: bool = False,
                 policy: dict | None = None):
        import optuna

        from automl.search import StudySearch, make_policy, make_sampler

        self.max_t = problem.max_t
        # POLICY_KNOBS: the same policy with its adaptive settings changed
        kw = {POLICY_KNOBS[k][0]: POLICY_KNOBS[k][1](v) for k, v in (policy or {}).items()}
        self.policy = make_policy(exp, **kw)
        sampler = make_sampler(exp.search)
        if bohb:
            sampler = HighestRungSampler(sampler, n_startup=exp.search.n_startup_trials)
        self.search = StudySearch(problem.space, optuna.storages.InMemoryStorage(), "sq",
                                  sampler, "max", 10**6, seed=exp.search.seed)
        self.points = points or (checkpoints(self.max_t) if self.policy else [self.max_t])

    def ask(self) -> Job | None:
        s = self.search.ask()
        return None if s is None else Job(s.number, s.config, list(self.points))

    def tell(self, job: Job, t: int, score: float, cost_s: float) -> bool:
        from automl.search import STOP

        self.search.report(job.trial, t, score)
        if self.policy is not None and self.policy.on_report(job.trial, t, score) == STOP:
            return False
        return t < self.max_t

    def finish(self, job: Job, t: int, score: float) -> None:
        from automl.search import end_state

        self.search.end(job.trial, end_state(t, self.max_t), t, score)


class OptunaRunner:
    """Plain Optuna ask/tell with a pruner (``trial.should_prune`` after each report)."""

    def __init__(self, problem, seed: int, pruner: str):
        import optuna

        if pruner == "hb":
            p = optuna.pruners.HyperbandPruner(min_resource=1, max_resource=problem.max_t,
                                               reduction_factor=3)
        else:
            p = optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
        # HyperbandPruner draws a trial's bracket from a hash of the study name and number
        self.study = optuna.create_study(study_name=f"sq-{pruner}", direction="maximize",
                                         sampler=optuna.samplers.TPESampler(seed=seed),
                                         pruner=p)
        self.problem, self.points = problem, checkpoints(problem.max_t)

    def ask(self) -> Job:
        trial = self.study.ask()
        fixed = self.problem.space(trial) or {}
        return Job(trial.number, {**trial.params, **fixed}, list(self.points), trial)

    def tell(self, job: Job, t: int, score: float, cost_s: float) -> bool:
        job.state.report(score, t)
        return t < self.problem.max_t and not job.state.should_prune()

    def finish(self, job: Job, t: int, score: float) -> None:
        import optuna

        if t >= self.problem.max_t:
            self.study.tell(job.state, score)
        else:
            self.study.tell(job.state, state=optuna.trial.TrialState.PRUNED)


class SyneTuneRunner:
    """Syne Tune 0.16's ``ASHA`` or ``BOHB`` scheduler, driven as its Tuner does:
    ``suggest``, ``on_trial_add``, ``on_trial_result`` per report, ``on_trial_complete``
    at ``max_t``. Its bracket draw uses numpy's global RNG, seeded here."""

    def __init__(self, problem, seed: int, kind: str):
        try:
            from syne_tune.optimizer.baselines import ASHA, BOHB
        except ImportError as e:
            raise ImportError(f"syne-tune is not installed ({e}); {_INSTALL}") from None
        import numpy as np

        from benchmarks._spaces import syne_tune_space

        np.random.seed(seed)
        cls = ASHA if kind == "asha" else BOHB
        self.cs = problem.config_space(seed)
        self.sch = cls(syne_tune_space(self.cs), metric="score", time_attr="epoch",
                       max_t=problem.max_t, do_minimize=False, random_seed=seed,
                       grace_period=1, reduction_factor=3)
        self.problem, self.points, self.n = problem, checkpoints(problem.max_t), 0

    def ask(self) -> Job | None:
        from datetime import datetime

        from syne_tune.backend.trial_status import Trial

        from benchmarks._spaces import active

        sugg = self.sch.suggest()
        if sugg is None:
            return None
        trial = Trial(trial_id=self.n, config=dict(sugg.config), creation_time=datetime.now())
        self.sch.on_trial_add(trial)
        self.n += 1
        return Job(trial.trial_id, active(self.cs, dict(sugg.config)), list(self.points), trial)

    def tell(self, job: Job, t: int, score: float, cost_s: float) -> bool:
        from syne_tune.optimizer.scheduler import SchedulerDecision

        decision = self.sch.on_trial_result(job.state, {"epoch": t, "score": score})
        return decision == SchedulerDecision.CONTINUE and t < self.problem.max_t

    def finish(self, job: Job, t: int, score: float) -> None:
        if t >= self.problem.max_t:
            self.sch.on_trial_complete(job.state, {"epoch": t, "score": score})


class DEHBRunner:
    """DEHB 0.1.2 (Awad et al. 2021) ask/tell; ``fitness`` = -score (it minimises),
    ``cost`` = the evaluation's simulated seconds. Pending asks are allowed (async)."""

    def __init__(self, problem, seed: int):
        try:
            from dehb import DEHB
        except ImportError as e:
            raise ImportError(f"dehb is not installed ({e}); {_INSTALL}") from None
        self._tmp = tempfile.TemporaryDirectory(prefix="sq-dehb-")
        self.dehb = DEHB(cs=problem.config_space(seed), min_fidelity=1,
                         max_fidelity=problem.max_t, eta=3, n_workers=1, seed=seed,
                         output_path=self._tmp.name, save_freq=None, log_level="ERROR")
        self.max_t, self.n = problem.max_t, 0

    def ask(self) -> Job:
        info = self.dehb.ask()
        t = min(self.max_t, max(1, round(float(info["fidelity"]))))
        self.n += 1
        return Job(self.n - 1, dict(info["config"]), [t], info)

    def tell(self, job: Job, t: int, score: float, cost_s: float) -> bool:
        self.dehb.tell(job.state, {"fitness": -float(score), "cost": float(cost_s)})
        return False

    def finish(self, job: Job, t: int, score: float) -> None:
        pass


class SMACRunner:
    """SMAC3 2.4.1 ``MultiFidelityFacade`` with ``Hyperband`` (eta 3, budgets 1..max_t),
    ask/tell; cost = -score. Needs ``PYTHONHASHSEED=0`` to repeat across processes (the
    benchmark re-executes itself with it)."""

    def __init__(self, problem, seed: int):
        try:
            from smac import MultiFidelityFacade, Scenario
            from smac.model.random_forest import RandomForest
            from smac.runhistory.dataclasses import TrialValue
        except ImportError as e:
            raise ImportError(f"smac is not installed ({e}); {_INSTALL}") from None
        import logging

        for name in ("smac", "ConfigSpace"):
            logging.getLogger(name).setLevel(logging.ERROR)
        self._tmp = tempfile.TemporaryDirectory(prefix="sq-smac-")
        scenario = Scenario(problem.config_space(seed), name=f"sq{seed}",
                            output_directory=self._tmp.name, deterministic=True,
                            n_trials=100_000, min_budget=1, max_budget=problem.max_t,
                            seed=seed)

        def train(config, seed: int = 0, budget: float = 1.0) -> float:  # never called
            raise RuntimeError("ask/tell only")

        # the facade's own random forest, but on one thread (its default n_jobs=-1 fans
        # each prediction out over every core: same trees, same predictions, slower here)
        # (the arguments of MultiFidelityFacade.get_model, smac 2.4.1, plus n_jobs=1)
        model = RandomForest(log_y=True, n_trees=10, bootstrapping=True, ratio_features=1.0,
                             min_samples_split=2, min_samples_leaf=1, max_depth=2**20,
                             configspace=scenario.configspace,
                             instance_features=scenario.instance_features, seed=seed,
                             n_jobs=1)
        self.smac = MultiFidelityFacade(
            scenario, train, intensifier=MultiFidelityFacade.get_intensifier(scenario, eta=3),
            model=model, overwrite=True, logging_level=40)
        self._value, self.max_t, self.n = TrialValue, problem.max_t, 0

    def ask(self) -> Job:
        info = self.smac.ask()
        t = min(self.max_t, max(1, round(float(info.budget))))
        self.n += 1
        return Job(self.n - 1, dict(info.config), [t], info)

    def tell(self, job: Job, t: int, score: float, cost_s: float) -> bool:
        self.smac.tell(job.state, self._value(cost=-float(score), time=float(cost_s)), save=False)
        return False

    def finish(self, job: Job, t: int, score: float) -> None:
        pass



def make_runner(method: str, problem, seed: int):
    """The runner of ``method`` (see the module table) on ``problem`` with ``seed``.

    Raises:
        ValueError: an unknown method name. ImportError: its package is missing.
    """
    if method == "automl":
        return CoreRunner(problem, experiment(problem, seed))
    if (knobs := variant_knobs(method)) is not None:
        bohb = knobs.pop("bohb", "0") not in ("0", "false")
        policy = {k: knobs.pop(k) for k in POLICY_KNOBS if k in knobs}
        return CoreRunner(problem, experiment(problem, seed, **knobs), bohb=bohb,
                          policy=policy)
    if method == "random":
        return CoreRunner(problem, experiment(problem, seed, "random", asha=False))
    if method == "random_asha":  # plain ASHA as Ray Tune's, as its cells were run
        return CoreRunner(problem, experiment(problem, seed, "random", brackets=1,
                                              cutoff="quantile"))
    if method in ("optuna_tpe_hb", "optuna_tpe_sh"):
        return OptunaRunner(problem, seed, method.rsplit("_", 1)[1])
    if method in ("syne_asha", "syne_bohb"):
        return SyneTuneRunner(problem, seed, method.split("_", 1)[1])
    if method == "dehb":
        return DEHBRunner(problem, seed)
    if method == "smac":
        return SMACRunner(problem, seed)
    raise ValueError(f"--methods: unknown method {method!r}; one of "
                     f"{', '.join(METHODS + VARIANTS)} (or automl[k=v+k=v], k one of "
                     f"{', '.join(KNOBS)})")


class HighestRungSampler(optuna.samplers.BaseSampler):
    """Fit the model on the highest rung with enough observations (BOHB's rule).

    Wraps another sampler (TPE here): each time a trial is sampled, the wrapped sampler
    sees an in-memory study made of the values every other trial reported at one epoch
    ``b`` — the largest epoch at which at least ``min_points`` trials reported — each told
    COMPLETE with its value at ``b``; trials still running without a report at ``b`` are
    kept RUNNING (the wrapped sampler's constant liar sees them). Trials that never reached
    ``b`` are left out. While no epoch has ``min_points`` reports, the wrapped sampler sees
    the real study (Optuna's own ranking: completed, then pruned by step and value).

    With one objective only (several objectives keep no intermediate values in the
    study: :class:`automl.search.StudySearch`); a multi-objective study is passed through.

    Source: Falkner et al. 2018, "BOHB: Robust and Efficient Hyperparameter Optimization at
    Scale" (ICML), section 3.1: the model is fitted on the largest budget with at least
    ``d + 2`` observations (``d`` the number of parameters).

    Args:
        inner: the sampler that proposes (e.g. ``TPESampler(constant_liar=True)``).
        min_points: observations an epoch needs to be modelled; None: ``d + 2``, at least
            ``n_startup`` (so the wrapped sampler's start-up phase is not re-entered).
        n_startup: the wrapped sampler's start-up trial count.
    """

    def __init__(self, inner: optuna.samplers.BaseSampler, min_points: int | None = None,
                 n_startup: int = 0):
        self.inner, self.min_points, self.n_startup = inner, min_points, n_startup
        self._cache: tuple[int, optuna.Study] | None = None

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def _model(self, study: optuna.Study, trial) -> optuna.Study:
        """The study the wrapped sampler sees while ``trial`` is sampled (built once per
        trial)."""
        if len(study.directions) > 1:
            return study
        if self._cache is not None and self._cache[0] == trial.number:
            return self._cache[1]
        states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
        others = [t for t in study.get_trials(deepcopy=False, states=states)
                  if t.number != trial.number]
        names = {n for t in others for n in t.distributions}
        need = self.min_points or max(len(names) + 2, self.n_startup)
        counts = Counter(e for t in others for e, v in t.intermediate_values.items()
                         if not math.isnan(v))
        ready = [e for e, c in counts.items() if c >= need]
        if not ready:
            model = study
        else:
            b = max(ready)
            storage = optuna.storages.InMemoryStorage()
            storage.create_new_study([study.direction], "highest-rung")
            model = optuna.Study("highest-rung", storage)  # no "study created" log line
            for t in others:
                v = t.intermediate_values.get(b)
                if v is not None and not math.isnan(v):
                    model.add_trial(create_trial(params=t.params, distributions=t.distributions,
                                                 value=v))
                elif t.state == TrialState.RUNNING:
                    model.add_trial(create_trial(params=t.params, distributions=t.distributions,
                                                 state=TrialState.RUNNING))
        self._cache = (trial.number, model)
        return model

    def infer_relative_search_space(self, study, trial):
        return self.inner.infer_relative_search_space(self._model(study, trial), trial)

    def sample_relative(self, study, trial, search_space):
        return self.inner.sample_relative(self._model(study, trial), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.inner.sample_independent(self._model(study, trial), trial, param_name,
                                             param_distribution)

    def before_trial(self, study, trial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.inner.after_trial(study, trial, state, values)
