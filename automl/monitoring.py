"""Live sweep metrics on Ray's metrics endpoint, for the Ray dashboard and Prometheus.

A driver-side Tune callback publishes, through ``ray.util.metrics``:

* ``automl_trials{sweep, state}``: trials ``running``, ``completed``,
  ``stopped_early`` (by ASHA) and ``failed``;
* ``automl_best_metric{sweep, metric}``: the best value of the search metric so far;
* ``automl_epochs_per_second{sweep}``: epochs reported by all trials / seconds since the
  first trial started.

Ray exports them (prefixed ``ray_``) in Prometheus text format on each node's metrics
port (``RayHandle.metrics_url``) every ``RAY_metrics_report_interval_ms`` (at least 1 s).
Ray's agent drops a gauge that has not been set for two export intervals, so the
callback re-publishes every ``refresh_s`` seconds from a daemon thread: the values stay
visible through long epochs and after the search (while the driver lives).
"""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections.abc import Callable

from ray.tune import Callback

from automl.spec import Experiment
from automl.tracking._callbacks import end_state

STATES = ("running", "completed", "stopped_early", "failed")


class SweepMetrics(Callback):
    """Publishes a sweep's trial counts, best metric and throughput (module docstring)."""

    def __init__(self, sweep: str, exp: Experiment, clock: Callable[[], float] = time.monotonic,
                 refresh_s: float = 1.0):
        self.sweep, self.exp, self.clock, self.refresh_s = sweep, exp, clock, refresh_s
        self.metric, self.mode = exp.search.metric, exp.search.mode
        self.running: set[str] = set()
        self.ended = {s: 0 for s in STATES[1:]}
        self.epochs = 0
        self._synced = False
        self.best = math.nan
        self.t0: float | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._make_gauges()

    def _make_gauges(self) -> None:
        from ray.util.metrics import Gauge

        self._trials = Gauge("automl_trials", description="Trials of a sweep by state.",
                             tag_keys=("sweep", "state"))
        self._best = Gauge("automl_best_metric", tag_keys=("sweep", "metric"),
                           description="Best value of the search metric so far.")
        self._eps = Gauge("automl_epochs_per_second", tag_keys=("sweep",),
                          description="Epochs reported by all trials per second of sweep.")

    def publish(self) -> None:
        with self._lock:
            counts = {"running": len(self.running), **self.ended}
            for state, n in counts.items():
                self._trials.set(n, tags={"sweep": self.sweep, "state": state})
            if not math.isnan(self.best):
                self._best.set(self.best, tags={"sweep": self.sweep, "metric": self.metric})
            self._eps.set(self.epochs_per_second(), tags={"sweep": self.sweep})

    def _refresh(self) -> None:
        """Re-publish until closed, or until the Ray instance it started under is gone
        (a later ``ray.init`` in this process is another node: stale values stay out)."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        while not self._stop.wait(self.refresh_s):
            try:
                if not ray.is_initialized() or ray.get_runtime_context().get_node_id() != node:
                    return
                self.publish()
            except Exception:  # Ray shutting down under us: stop refreshing
                return

    def close(self) -> None:
        """Stop re-publishing (the values then age out of Ray's endpoint)."""
        self._stop.set()

    def epochs_per_second(self) -> float:
        if self.t0 is None:
            return 0.0
        return self.epochs / max(self.clock() - self.t0, 1e-9)

    def on_step_begin(self, iteration, trials, **info):
        """Once, at the first step: count trials that ended before a resumed sweep restarted
        (Tune sends no events for them); their epochs stay out of the throughput."""
        if self._synced:
            return
        self._synced = True
        for t in trials:
            if t.status in ("TERMINATED", "ERROR"):
                self.ended["failed" if t.status == "ERROR" else end_state(t, self.exp)] += 1
                self._consider((t.last_result or {}).get(self.metric))

    def _consider(self, value) -> None:
        if value is not None and (math.isnan(self.best) or
                                  (value > self.best if self.mode == "max" else value < self.best)):
            self.best = float(value)

    def on_trial_start(self, iteration, trials, trial, **info):
        if self.t0 is None:
            self.t0 = self.clock()
        if self._thread is None and self.refresh_s > 0:
            self._thread = threading.Thread(target=self._refresh, daemon=True,
                                            name=f"automl-metrics-{self.sweep}")
            self._thread.start()
        self.running.add(trial.trial_id)
        self.publish()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.epochs += 1
        self._consider(result.get(self.metric))
        self.publish()

    def _end(self, trial, state: str) -> None:
        if trial.trial_id in self.running:
            self.running.discard(trial.trial_id)
            self.ended[state] += 1
        self.publish()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end(trial, end_state(trial, self.exp))

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end(trial, "failed")

    def __getstate__(self) -> dict:
        # Tune pickles callbacks into its experiment state; gauges are process-local.
        return {k: v for k, v in self.__dict__.items()
                if k not in ("_trials", "_best", "_eps", "clock", "_stop", "_lock", "_thread")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.clock, self._thread = time.monotonic, None
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._make_gauges()


def scrape(url: str, timeout: float = 5.0) -> dict[tuple[str, frozenset], float]:
    """Read a Prometheus text endpoint: ``{(sample name, frozenset(label items)): value}``
    (parsed with ``prometheus_client``).

    Raises:
        OSError: the endpoint cannot be reached within ``timeout`` seconds.
    """
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sweep_metrics(samples: dict[tuple[str, frozenset], float], sweep: str) -> dict[str, float]:
    """This package's metrics for ``sweep`` from :func:`scrape`'s result: the trial counts
    by state, ``best_metric`` and ``epochs_per_second`` (keys absent until exported)."""
    out: dict[str, float] = {}
    for (name, labels), value in samples.items():
        tags = dict(labels)
        if tags.get("sweep") != sweep:
            continue
        if name == "ray_automl_trials":
            out[tags["state"]] = value
        elif name == "ray_automl_best_metric":
            out["best_metric"] = value
        elif name == "ray_automl_epochs_per_second":
            out["epochs_per_second"] = value
    return out
