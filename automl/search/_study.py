"""The searcher's core: Optuna ask/tell over the spec's space, kept in ``study.db``.

Pure of Ray: :class:`StudySearch` asks the study for configurations and tells it how each
trial ended; the Tune adapter (:class:`automl.search._adapters.StudySearcher`) and the
benchmark simulator both drive it through these methods.

The study is the record of the sweep's trials: a trial's number is the study's trial
number (stable across sessions), its params the study's, and its end what the study was
told. A resumed search opens the same study: finished trials stay finished, trials it
holds as RUNNING (their driver died) are handed out again first, with the same number and
config, and only the trials still missing are asked for.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from automl.search._result import COMPLETED, DIVERGED, FAILED, STOPPED

#: user attribute naming the trial whose record a duplicate configuration reused
DUPLICATE_OF = "automl.duplicate_of"
#: user attribute of trials a warm start copied from an earlier study (not this sweep's)
WARM_HISTORY = "previous_number"
_STATES = {COMPLETED: TrialState.COMPLETE, STOPPED: TrialState.PRUNED,
           FAILED: TrialState.FAIL, DIVERGED: TrialState.FAIL}


def param_key(params: dict[str, Any]) -> tuple:
    """A hashable key of a configuration, equal for equal configurations (floats compared
    to 12 significant digits, so ``0.85`` and ``0.8500000000000001`` are one value)."""
    def norm(v):
        return float(f"{v:.12g}") if isinstance(v, float) else v
    return tuple(sorted((k, norm(v)) for k, v in params.items()))


@dataclass(frozen=True)
class Suggestion:
    """A configuration to train.

    Attributes:
        number: the study's trial number (the trial's id everywhere in the run).
        params: the sampled values (``optuna.Trial.params``).
        config: the whole flat config (``params`` plus the space's fixed values).
        resumed: True when the trial was running when its driver died (it continues from
            its last checkpoint).
    """

    number: int
    params: dict[str, Any]
    config: dict[str, Any]
    resumed: bool = False


@dataclass
class _Known:
    """What the search knows of one of its trials."""

    params: dict[str, Any]
    state: TrialState
    steps: dict[int, Any] = field(default_factory=dict)  # epoch -> value(s) reported
    value: Any = None  # the value told (COMPLETE, PRUNED); a list with several objectives
    constraints: dict[str, float] | None = None  # name -> value (<= 0: satisfied)


class StudySearch:
    """Configurations from an Optuna sampler, one Optuna trial per sweep trial.

    * :meth:`ask` returns the next configuration; never one this sweep already trained.
      A sampled configuration equal to a finished trial's is told the same result
      (intermediate values and state, user attribute ``automl.duplicate_of``) without
      training, and the sampler is asked again; one equal to a running trial's is told
      FAIL with that attribute. After ``patience`` such proposals in a row, a random
      configuration is drawn instead, and on a finite space an untried one is taken from
      the list of all (:func:`automl.space.enumerate_params`). When every configuration of
      a finite space has been tried, :meth:`ask` returns None and :attr:`exhausted` says
      so in one line. (Optuna's recipe of returning a duplicate's recorded value,
      optuna#2021, but without running the objective at all.)
    * :meth:`report` stores a trial's value at an epoch as the Optuna intermediate value.
    * :meth:`end` tells the study how the trial ended: ``completed`` -> COMPLETE with its
      value, ``stopped_early`` -> PRUNED (Optuna takes its last intermediate value; TPE
      ranks pruned trials after completed ones by step, then value), ``failed`` and
      ``diverged`` -> FAIL. Constraint values given to :meth:`end` are set first with
      ``Trial.set_constraint`` (Optuna 5's constraint API, which TPE and NSGA-II read).
    * Several objectives (``mode`` a tuple, one direction each): values are tuples, the
      study has one direction per objective, and a completed trial is told all its
      values. Optuna keeps no intermediate values for such studies (``Trial.report``
      refuses them, and TPE's ranking of pruned trials reads one direction): the reports
      stay in this object, and a stopped trial is told PRUNED without them (TPE places
      pruned trials after the completed ones).

    Args:
        space: the define-by-run function (:func:`automl.space.define_by_run`); called with
            an ``optuna.Trial``, it returns the fixed values (or None: there are none).
        storage: an Optuna storage URL (``sqlite:///.../study.db``) or storage object.
        study_name: the study's name (created, or loaded when it exists).
        sampler: the Optuna sampler (:func:`automl.search.make_sampler`), or a function of
            the number of trials the study already holds that returns it: a resumed
            search then seeds its sampler anew rather than replaying its first proposals.
        mode: ``"max"`` or ``"min"``, or a tuple of them (one per objective).
        num_samples: trials this sweep runs in all (across resumes).
        size: the number of distinct configurations of the space (``math.inf`` when it has
            a continuous parameter; :func:`automl.space.describe`).
        enumerate_space: returns every configuration of a finite space (only called when
            the sampler keeps proposing tried ones).
        seed: seeds the random fallback.
        patience: duplicate proposals in a row before the fallback.
        metric_names: the objectives' names, stored in the study (``set_metric_names``:
            Optuna's plots and optuna-dashboard label their axes with them).
    """

    def __init__(self, space: Callable[[Any], dict], storage: Any, study_name: str,
                 sampler: optuna.samplers.BaseSampler | Callable[[int], Any],
                 mode: str | Sequence[str],
                 num_samples: int,
                 size: float = math.inf, enumerate_space: Callable[[], list[dict]] | None = None,
                 seed: int = 0, patience: int = 8,
                 metric_names: Sequence[str] | None = None):
        if isinstance(storage, str):
            storage = optuna.storages.RDBStorage(storage)
        self.storage, self.space, self.size = storage, space, size
        self.mode, self.num_samples, self.patience = mode, int(num_samples), patience
        self.multi = not isinstance(mode, str)
        modes = list(mode) if self.multi else [mode]
        directions = ["maximize" if m == "max" else "minimize" for m in modes]
        self._enumerate, self._rng = enumerate_space, random.Random(seed)
        if not isinstance(sampler, optuna.samplers.BaseSampler):
            try:
                held = len(optuna.load_study(study_name=study_name, storage=storage).trials)
            except KeyError:  # no such study yet
                held = 0
            sampler = sampler(held)
        self.study = optuna.create_study(
            study_name=study_name, storage=storage, sampler=sampler, load_if_exists=True,
            directions=directions)
        if metric_names and self.study.metric_names is None:
            with warnings.catch_warnings():  # experimental in Optuna 5, stable in use
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.study.set_metric_names(list(metric_names))
        self._random = optuna.load_study(study_name=study_name, storage=storage,
                                         sampler=optuna.samplers.RandomSampler(seed=seed))
        self._study_id = storage.get_study_id_from_name(study_name)
        self._ids: dict[int, int] = {}
        self.exhausted: str | None = None
        self.duplicates = 0  # proposals answered from an earlier trial's record
        self._trials: dict[int, _Known] = {}
        self._tried: dict[tuple, int] = {}  # config key -> the trial of this sweep that ran it
        self._resume: list[int] = []
        for t in self.study.get_trials(deepcopy=False):
            if WARM_HISTORY in t.user_attrs or DUPLICATE_OF in t.user_attrs:
                continue
            if t.state == TrialState.WAITING:
                continue  # enqueued (warm start): handed out by ask()
            self._trials[t.number] = _Known(
                dict(t.params), t.state, dict(t.intermediate_values),
                t.values if self.multi else t.value, dict(t.constraints) or None)
            self._tried.setdefault(param_key(t.params), t.number)
            if t.state == TrialState.RUNNING:
                self._resume.append(t.number)

    # -- what the study holds -------------------------------------------------------------
    @property
    def finished(self) -> list[int]:
        """This sweep's trials the study holds as finished (any end), by number."""
        return sorted(n for n, k in self._trials.items() if k.state.is_finished())

    @property
    def to_resume(self) -> list[int]:
        """Trials left RUNNING by a driver that died, not yet handed out again."""
        return [n for n in self._resume if not self._trials[n].state.is_finished()]

    @property
    def remaining(self) -> int:
        """Trials still to run, resumed ones included: ``num_samples`` minus finished."""
        return max(0, self.num_samples - len(self.finished))

    def params_of(self, number: int) -> dict[str, Any]:
        """Trial ``number``'s sampled params (empty when the study has no such trial)."""
        known = self._trials.get(number)
        return dict(known.params) if known else {}

    def state_of(self, number: int) -> str | None:
        """How the study holds trial ``number`` ended: ``completed``, ``stopped_early``
        or ``failed``; None while it runs (or when there is no such trial)."""
        known = self._trials.get(number)
        if known is None or not known.state.is_finished():
            return None
        return {TrialState.COMPLETE: COMPLETED, TrialState.PRUNED: STOPPED}.get(known.state,
                                                                                FAILED)

    # -- ask --------------------------------------------------------------------------------
    def ask(self) -> Suggestion | None:
        """The next configuration to train, or None when the space is exhausted."""
        while self._resume:
            number = self._resume.pop(0)
            if self._trials[number].state.is_finished():
                continue  # told since (the ledger had its end)
            # A driver killed while sampling leaves a trial with some of its parameters:
            # the space runs again on that same trial; Optuna returns the values it holds
            # and samples the rest.
            trial = optuna.trial.Trial(self.study, self._trial_id(number))
            fixed = self.space(trial) or {}
            params = dict(trial.params)
            self._trials[number].params = params
            self._tried[param_key(params)] = number
            return Suggestion(number, params, {**params, **fixed}, resumed=True)
        if self._all_tried():
            return None
        for attempt in range(self.patience + 64):
            study = self.study if attempt < self.patience else self._random
            trial = study.ask()
            fixed = self.space(trial) or {}
            if self._fresh(trial):
                return self._hand_out(trial, fixed)
        trial = self._untried()
        if trial is None:
            return None
        return self._hand_out(trial, self.space(trial) or {})

    def _hand_out(self, trial: optuna.Trial, fixed: dict) -> Suggestion:
        params = dict(trial.params)
        self._trials[trial.number] = _Known(params, TrialState.RUNNING)
        self._tried[param_key(params)] = trial.number
        return Suggestion(trial.number, params, {**params, **fixed})

    def _all_tried(self) -> bool:
        if math.isinf(self.size) or len(self._tried) < self.size:
            return False
        if self.exhausted is None:
            left = self.num_samples - len(self._trials)
            self.exhausted = (f"search space exhausted: all {len(self._tried)} configurations "
                              f"were tried; {left} of the {self.num_samples} requested trials "
                              "not run")
        return True

    def _fresh(self, trial: optuna.Trial) -> bool:
        """Whether ``trial``'s sampled configuration is new; a repeat is told at once."""
        number = self._tried.get(param_key(trial.params))
        if number is None:
            return True
        self.duplicates += 1
        known = self._trials[number]
        trial.set_user_attr(DUPLICATE_OF, number)
        if known.state == TrialState.COMPLETE and known.value is not None or (
                known.state == TrialState.PRUNED and (known.steps or known.value is not None)):
            if not self.multi:
                for step, value in sorted(known.steps.items()):
                    trial.report(value, step)
            for name, value in (known.constraints or {}).items():
                trial.set_constraint(name, value)
            complete = known.state == TrialState.COMPLETE
            self.study.tell(trial, known.value if complete else None, state=known.state)
        else:  # running now, or failed: nothing to copy; the sampler ignores FAIL
            self.study.tell(trial, state=TrialState.FAIL)
        return False

    def _untried(self) -> optuna.Trial | None:
        """An untried configuration of a finite space, enqueued and asked for."""
        if self._enumerate is None or math.isinf(self.size):
            return None
        untried = [p for p in self._enumerate() if param_key(p) not in self._tried]
        if not untried:
            self._all_tried()
            return None
        self.study.enqueue_trial(self._rng.choice(untried))
        return self.study.ask()

    # -- report and end ---------------------------------------------------------------------
    def _trial_id(self, number: int) -> int:
        """The storage's id of trial ``number`` (looked up once)."""
        if number not in self._ids:
            self._ids[number] = self.storage.get_trial_id_from_study_id_trial_number(
                self._study_id, number)
        return self._ids[number]

    def report(self, number: int, epoch: int, value: float | Sequence[float] | None) -> None:
        """Store ``value`` (the metric at ``epoch``; a tuple with several objectives) as the
        trial's intermediate value; a re-reported epoch (a resumed trial) overwrites the
        earlier one. Several objectives: kept here only (see the class doc)."""
        known = self._trials.get(number)
        if known is None or known.state.is_finished() or value is None:
            return
        if self.multi:
            value = tuple(float(v) for v in value)
            if any(math.isnan(v) for v in value):
                return
            known.steps[int(epoch)] = value
            return
        value = float(value)
        if math.isnan(value) or known.steps.get(int(epoch)) == value:
            return
        known.steps[int(epoch)] = value
        self.storage.set_trial_intermediate_value(self._trial_id(number), int(epoch), value)

    def end(self, number: int, state: str, epoch: int | None = None,
            value: float | Sequence[float] | None = None,
            constraints: dict[str, float] | None = None) -> None:
        """Tell the study how trial ``number`` ended (``completed``, ``stopped_early``,
        ``failed`` or ``diverged``); ``value`` at ``epoch`` is its last report (a tuple
        with several objectives); ``constraints`` its constraint values by name (``<= 0``:
        satisfied), set with ``Trial.set_constraint`` for the sampler. A trial the study
        already holds as finished keeps its record.

        Raises:
            ValueError: ``state`` is not one of the four.
        """
        if state not in _STATES:
            raise ValueError(f"unknown end state {state!r}; one of {', '.join(_STATES)}")
        known = self._trials.get(number)
        if known is None or known.state.is_finished():
            return
        if epoch is not None and value is not None:
            self.report(number, epoch, value)
        target = _STATES[state]
        values: Any = None
        if target == TrialState.COMPLETE:
            vals = _floats(value)
            if vals is None or any(math.isnan(v) for v in vals):
                target = TrialState.FAIL  # nothing to rank it by
            else:
                values = vals if self.multi else vals[0]
        if target == TrialState.PRUNED and not known.steps:
            target = TrialState.FAIL
        if constraints and target != TrialState.FAIL:
            known.constraints = {k: float(v) for k, v in constraints.items()}
            trial = optuna.trial.Trial(self.study, self._trial_id(number))
            for name, v in known.constraints.items():
                trial.set_constraint(name, v)
        frozen = self.study.tell(number, values, state=target, skip_if_finished=True)
        known.state = frozen.state
        known.value = frozen.values if self.multi else frozen.value
        if self.multi and frozen.state == TrialState.PRUNED and known.steps:
            known.value = list(known.steps[max(known.steps)])


def _floats(value) -> list[float] | None:
    """``value`` (a float or a sequence) as a list of floats; None when absent."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return [float(value)]
    return [float(v) for v in value]


def told(study: optuna.Study) -> Sequence[optuna.trial.FrozenTrial]:
    """A study's finished trials of the sweep itself (no warm-start history, no
    duplicates answered from a record)."""
    return [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()
            and WARM_HISTORY not in t.user_attrs and DUPLICATE_OF not in t.user_attrs]
