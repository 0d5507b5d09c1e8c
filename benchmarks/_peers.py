"""One :class:`benchmarks._events.Runner` per method of the search-quality benchmark, each
built from ``(problem, seed)`` and driven by :func:`benchmarks._events.run`, so every
method returns the same event log.

=================  ==========================================================================
``automl``         this project's default: ``make_sampler`` (TPE, constant liar) in
                   ``StudySearch`` (a stopped trial told PRUNED) + ``make_policy``
                   (``RungPolicy``: ASHA, grace 1, reduction factor 3), built from an
                   ``automl.spec.Experiment`` as ``automl.search`` builds them; study in memory
``automl[k=v]``    the same with one spec knob changed (``brackets``, ``n_startup``)
``random``         random search (Optuna's ``RandomSampler`` in ``StudySearch``), every trial
                   at full fidelity
``random_asha``    the same sampler + our ``RungPolicy``
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

import re
import tempfile
from typing import Any

from benchmarks._events import Job, checkpoints

PEERS = ("random", "random_asha", "optuna_tpe_hb", "optuna_tpe_sh", "syne_asha",
         "syne_bohb", "dehb", "smac")
METHODS = ("automl", *PEERS)
VARIANTS = ("automl[brackets=3]", "automl[n_startup=4]")
#: methods that need no benchmark-only package (the quick path, CI)
CORE = ("automl", "random", "random_asha", "optuna_tpe_hb", "optuna_tpe_sh")
_INSTALL = "make bench-setup installs it"


def experiment(problem, seed: int, sampler: str = "tpe", asha: bool = True,
               **knobs: Any):
    """The spec our search is built from: ``search`` (``sampler``, ``seed``, and
    ``n_startup`` when given) and ``scheduler`` (ASHA, grace 1, reduction factor 3 up to
    ``max_t``; ``brackets`` when given); everything else the spec's defaults."""
    from automl.spec import Experiment

    search = {"sampler": sampler, "seed": seed, "metric": "val_accuracy"}
    if "n_startup" in knobs:
        search["n_startup_trials"] = int(knobs.pop("n_startup"))
    scheduler = {"type": "asha" if asha else "none", "grace_period": 1,
                 "reduction_factor": 3, "max_epochs": problem.max_t}
    if "brackets" in knobs:
        scheduler["brackets"] = int(knobs.pop("brackets"))
    if knobs:
        raise ValueError(f"unknown knobs {sorted(knobs)}; brackets, n_startup")
    return Experiment.model_validate({"name": "sq", "training": {"epochs": problem.max_t},
                                      "search": search, "scheduler": scheduler})


class CoreRunner:
    """Our search core: :class:`automl.search.StudySearch` + :class:`RungPolicy` (or None:
    every trial to ``max_t``), through their public methods only."""

    def __init__(self, problem, exp, points: list[int] | None = None):
        import optuna

        from automl.search import StudySearch, make_policy, make_sampler

        self.max_t = problem.max_t
        self.policy = make_policy(exp)
        self.search = StudySearch(problem.space, optuna.storages.InMemoryStorage(), "sq",
                                  make_sampler(exp.search), "max", 10**6,
                                  seed=exp.search.seed)
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


VARIANT_PATTERN = re.compile(r"^automl\[(\w+)=(\d+)\]$")


def make_runner(method: str, problem, seed: int):
    """The runner of ``method`` (see the module table) on ``problem`` with ``seed``.

    Raises:
        ValueError: an unknown method name. ImportError: its package is missing.
    """
    if method == "automl":
        return CoreRunner(problem, experiment(problem, seed))
    if (m := VARIANT_PATTERN.match(method)) is not None:
        return CoreRunner(problem, experiment(problem, seed, **{m.group(1): m.group(2)}))
    if method == "random":
        return CoreRunner(problem, experiment(problem, seed, "random", asha=False))
    if method == "random_asha":
        return CoreRunner(problem, experiment(problem, seed, "random"))
    if method in ("optuna_tpe_hb", "optuna_tpe_sh"):
        return OptunaRunner(problem, seed, method.rsplit("_", 1)[1])
    if method in ("syne_asha", "syne_bohb"):
        return SyneTuneRunner(problem, seed, method.split("_", 1)[1])
    if method == "dehb":
        return DEHBRunner(problem, seed)
    if method == "smac":
        return SMACRunner(problem, seed)
    raise ValueError(f"--methods: unknown method {method!r}; one of "
                     f"{', '.join(METHODS + VARIANTS)} (or automl[brackets=N], "
                     "automl[n_startup=N])")
