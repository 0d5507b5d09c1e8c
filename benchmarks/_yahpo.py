"""Offline YAHPO Gym surrogates (Pfisterer et al. 2022, "YAHPO Gym - An Efficient
Multi-Objective Multi-Fidelity Benchmark for Hyperparameter Optimization", AutoML-Conf):
LCBench (Zimmer et al. 2021: MLP learning curves on OpenML tasks) and rbv2_xgboost (XGBoost
on OpenML tasks, a conditional 14-parameter space), loaded from the copies in
``../shared/benchmarks/yahpo`` (next to the repository; no download).

Usage::

    from benchmarks._yahpo import LCBench, RBv2XGBoost
    b = LCBench("168331")                     # any LCBench task id (b.instances lists them)
    study.optimize(lambda t: ..., ...)        # b.space(trial) is the define-by-run space
    config = dict(b.config_space().sample_configuration())
    b.query(config, 52)  # {"val_accuracy": 81.2 (%), "time": 102.5 (s), ...}
    r = RBv2XGBoost("334")
    r.query(config, 0.5) # {"acc": 0.79 (share), "timetrain": 2.8 (s), ...}

``query`` returns every metric the surrogate predicts, as floats; several objectives
(accuracy and time, say) can be read from one call. The surrogates are deterministic (YAHPO's
``noisy=False``): the same config and fidelity always give the same values.

yahpo-gym 1.0.2 declares ``numpy<2`` and ``ConfigSpace<=0.6.1``; installed with
``--no-deps`` (``make bench-setup``) it works with numpy 2 and ConfigSpace 1.x after one
shim, applied here before ``yahpo_gym`` is imported (see the data folder's README):
``ConfigurationSpace._sort_hyperparameters`` is made a no-op.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._spaces import suggest

REPO = Path(__file__).resolve().parent.parent
#: the surrogate copies: ``<repo>/../shared/benchmarks/yahpo`` (lcbench/, rbv2_xgboost/)
DATA = REPO.parent / "shared" / "benchmarks" / "yahpo"
INSTALL = ("yahpo-gym is not installed: run `make bench-setup` (pip install --no-deps "
           "-c requirements.lock -r requirements-bench.txt)")


@functools.cache
def _yahpo():
    """``yahpo_gym.benchmark_set``, shimmed and pointed at :data:`DATA` (once per process).

    Raises:
        ImportError: yahpo-gym is missing (the message names the fix).
        FileNotFoundError: the surrogate folder is not at :data:`DATA`.
    """
    try:
        import ConfigSpace

        ConfigSpace.ConfigurationSpace._sort_hyperparameters = lambda self: None
        from yahpo_gym import benchmark_set, local_config
    except ImportError as e:
        raise ImportError(INSTALL) from e
    if not (DATA / "lcbench").is_dir():
        raise FileNotFoundError(f"YAHPO surrogates not found at {DATA} (expected lcbench/ "
                                "and rbv2_xgboost/ there; see /work/shared/benchmarks/yahpo)")
    import warnings

    # A settings file of this process's own: yahpo-gym's default (~/.config/yahpo_gym) is
    # rewritten by every process that points it at the data, and a process reading it
    # while another truncates it failed (two benchmark workers starting together).
    fd, own = tempfile.mkstemp(prefix="yahpo_gym-", suffix=".yaml")
    os.close(fd)
    atexit.register(os.remove, own)
    local_config.settings_path = Path(own)
    local_config.init_config(data_path=str(DATA))
    warnings.filterwarnings("ignore", module="ConfigSpace")
    return benchmark_set


class _Surrogate:
    """One YAHPO scenario on one instance (task). Subclasses set the class attributes."""

    scenario: str = ""
    instance_key: str = ""  # the constant parameter naming the task in the config
    fidelity: str = ""
    fixed_fidelity: dict[str, Any] = {}

    def __init__(self, task: str | int):
        bs = _yahpo()
        self.task = str(task)
        with contextlib.redirect_stdout(io.StringIO()):  # YAHPO prints citations
            self._bench = bs.BenchmarkSet(self.scenario, check=False)
        if self.task not in self._bench.instances:
            raise ValueError(f"{self.scenario}: no task {self.task!r}; one of "
                             f"{', '.join(sorted(self._bench.instances, key=int))}")
        self._bench.set_instance(self.task)
        full = self._bench.get_opt_space(drop_fidelity_params=True)
        self._cs = _without(full, self.instance_key)

    @property
    def instances(self) -> list[str]:
        """Every task id this scenario's surrogate models."""
        return list(self._bench.instances)

    @property
    def metrics(self) -> list[str]:
        """The names :meth:`query` returns."""
        return list(self._bench.config.y_names)

    def config_space(self):
        """The searched parameters as a ``ConfigSpace.ConfigurationSpace`` (no fidelity,
        no task constant), conditions included: what SMAC3 and DEHB take."""
        return self._cs

    def space(self, trial) -> None:
        """Optuna define-by-run over :meth:`config_space` (inactive conditional
        parameters are not suggested)."""
        suggest(self._cs, trial)

    def query(self, config: dict[str, Any], fidelity: float) -> dict[str, float]:
        """All metrics the surrogate predicts for ``config`` (active parameters only)
        trained at ``fidelity``; see the subclass for units.

        Raises:
            ValueError: ``fidelity`` is outside ``[min_t, max_t]``.
        """
        if not self.min_t <= fidelity <= self.max_t:
            raise ValueError(f"{self.fidelity} must be in [{self.min_t}, {self.max_t}], "
                             f"got {fidelity}")
        point = {**config, self.instance_key: self.task, self.fidelity: fidelity,
                 **self.fixed_fidelity}
        out = self._bench.objective_function(point)[0]
        return {k: float(v) for k, v in out.items()}


class LCBench(_Surrogate):
    """YAHPO ``lcbench`` on OpenML task ``task``: an MLP (funnel-shaped, SGD) trained
    ``epoch`` = 1..52 epochs (integers; resumable, a learning curve). 7 parameters.

    :meth:`query` returns ``val_accuracy`` and ``val_balanced_accuracy`` (percent and
    share), ``val_cross_entropy``, the ``test_*`` equivalents and ``time`` (seconds of
    training up to that epoch, cumulative). Maximise ``val_accuracy``.

    Raises:
        ImportError: yahpo-gym is missing. ValueError: not an LCBench task id.
    """

    scenario, instance_key, fidelity = "lcbench", "OpenML_task_id", "epoch"
    min_t, max_t = 1, 52
    metric, mode = "val_accuracy", "max"

    def query(self, config: dict[str, Any], epoch: int) -> dict[str, float]:  # noqa: D102
        if int(epoch) != epoch:
            raise ValueError(f"epoch must be an integer, got {epoch}")
        return super().query(config, int(epoch))


class RBv2XGBoost(_Surrogate):
    """YAHPO ``rbv2_xgboost`` on OpenML task ``task``: XGBoost (booster gblinear, gbtree
    or dart; 14 parameters, 8 of them conditional on the booster) trained on a share
    ``trainsize`` = 0.03..1 of the training data (``repl`` fixed at 10). A training at a
    smaller ``trainsize`` is a separate fit: the fidelity is not resumable.

    :meth:`query` returns ``acc``, ``bac``, ``auc``, ``f1`` (shares), ``brier``,
    ``logloss``, ``timetrain``, ``timepredict`` (seconds) and ``memory`` (MB). Maximise
    ``acc``.

    Raises:
        ImportError: yahpo-gym is missing. ValueError: not an rbv2_xgboost task id.
    """

    scenario, instance_key, fidelity = "rbv2_xgboost", "task_id", "trainsize"
    fixed_fidelity = {"repl": 10}
    min_t, max_t = 0.03, 1.0
    metric, mode = "acc", "max"


def _without(cs, name: str):
    """A copy of ``cs`` without the constant parameter ``name`` (conditions kept)."""
    import ConfigSpace as CS

    out = CS.ConfigurationSpace(seed=0)
    out.add([hp for hp in cs.values() if hp.name != name])
    out.add([c for c in cs.conditions if name not in (c.child.name, c.parent.name)])
    return out
