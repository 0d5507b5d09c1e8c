"""Live sweep metrics on Ray's metrics endpoint, for the Ray dashboard and Prometheus.

A sink of the sweep's ledger publishes from the driver, through ``ray.util.metrics``:

* ``automl_trials{sweep, state}``: trials ``running``, ``completed``,
  ``stopped_early`` (by ASHA) and ``failed``;
* ``automl_best_metric{sweep, metric}``: the best value of the search metric so far;
* ``automl_epochs_per_second{sweep}``: epochs reported by all trials / seconds since the
  sweep (this session) started;
* ``automl_stage_done{sweep, stage}``, ``automl_stage_total{sweep, stage}``,
  ``automl_stage_eta_seconds{sweep, stage}``, ``automl_stage_eta_low_seconds{sweep,
  stage}``, ``automl_stage_eta_high_seconds{sweep, stage}``: the job's progress per stage
  (``sweep``: trials; ``cv``: fold trainings; ``refit``; ``compress``: its steps), the
  ETA in seconds and its 80% range (``automl._progress.Eta``).
  Compression runs after the job's Ray instance is released, so only the stages before
  it show there.

Ray exports them (prefixed ``ray_``) in Prometheus text format on each node's metrics
port (``RayHandle.metrics_url``) every ``RAY_metrics_report_interval_ms`` (at least 1 s).
Ray's agent drops a gauge that has not been set for two export intervals, so the
callback re-publishes every ``refresh_s`` seconds from a daemon thread: the values stay
visible through long epochs and after the search (while the driver lives).
"""

from __future__ import annotations

import threading
import urllib.request

from automl._progress import Eta
from automl.search import SweepView, TrialLog

STATES = ("running", "completed", "stopped_early", "failed")


class SweepMetrics:
    """Publishes a sweep's trial counts, best metric and throughput (module docstring).

    A :class:`automl.search.TrialSink`: the counts are the ledger's (:class:`SweepView`),
    diverged trials counted as failed.
    """

    def __init__(self, sweep: str, refresh_s: float = 1.0):
        self.sweep, self.refresh_s = sweep, refresh_s
        self.view: SweepView | None = None
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
        self._stage = {fig: Gauge(f"automl_stage_{fig}", tag_keys=("sweep", "stage"),
                                  description=f"The job's progress per stage: {fig}.")
                       for fig in ("done", "total", "eta_seconds", "eta_low_seconds",
                                   "eta_high_seconds")}
        self.stages: dict[str, tuple[int, int, Eta | None]] = {}

    def counts(self) -> dict[str, int]:
        """Trials per state of the last view (``running``, ``completed``, ``stopped_early``,
        ``failed``; diverged counted as failed)."""
        v = self.view
        if v is None:
            return dict.fromkeys(STATES, 0)
        e = v.ended
        return {"running": v.running, "completed": e["completed"],
                "stopped_early": e["stopped_early"], "failed": e["failed"] + e["diverged"]}

    def epochs_per_second(self) -> float:
        v = self.view
        return v.epochs / v.elapsed_s if v is not None and v.elapsed_s > 0 else 0.0

    def publish(self) -> None:
        with self._lock:
            for state, n in self.counts().items():
                self._trials.set(n, tags={"sweep": self.sweep, "state": state})
            if self.view is not None and self.view.best is not None:
                self._best.set(self.view.best, tags={"sweep": self.sweep,
                                                     "metric": self.view.metric})
            self._eps.set(self.epochs_per_second(), tags={"sweep": self.sweep})
            if self.view is not None:
                v = self.view
                self.stages["sweep"] = (v.done, v.total, v.eta)
            for stage, (done, total, eta) in self.stages.items():
                tags = {"sweep": self.sweep, "stage": stage}
                self._stage["done"].set(done, tags=tags)
                self._stage["total"].set(total, tags=tags)
                if eta is not None:
                    self._stage["eta_seconds"].set(eta.s, tags=tags)
                    self._stage["eta_low_seconds"].set(eta.low, tags=tags)
                    self._stage["eta_high_seconds"].set(eta.high, tags=tags)

    def publish_stage(self, stage: str, done: int, total: int, eta: Eta | None,
                      elapsed_s: float = 0.0) -> None:
        """One stage's progress after the sweep (``automl._progress.StageProgress``'s
        :data:`~automl._progress.Publish` hook); re-published with the rest until Ray
        stops."""
        with self._lock:
            self.stages[stage] = (done, total, eta)
        if self._stop.is_set():  # the sweep's sink closed: re-publish on a new thread
            self._stop = threading.Event()
            self._thread = None
        self._update(self.view)

    def _refresh(self, stop: threading.Event) -> None:
        """Re-publish until ``stop`` is set (closed), or until the Ray instance it started under is gone
        (a later ``ray.init`` in this process is another node: stale values stay out)."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        while not stop.wait(self.refresh_s):
            try:
                if not ray.is_initialized() or ray.get_runtime_context().get_node_id() != node:
                    return
                self.publish()
            except Exception:  # Ray shutting down under us: stop refreshing
                return

    def _update(self, sweep: SweepView | None) -> None:
        self.view = sweep
        if self._thread is None and self.refresh_s > 0:
            self._thread = threading.Thread(target=self._refresh, args=(self._stop,),
                                            daemon=True, name=f"automl-metrics-{self.sweep}")
            self._thread.start()
        self.publish()

    def start(self, trial: TrialLog, sweep: SweepView) -> None:
        self._update(sweep)

    def log(self, trial: TrialLog, row: dict, sweep: SweepView) -> None:
        self._update(sweep)

    def finish(self, trial: TrialLog, sweep: SweepView) -> None:
        self._update(sweep)

    def close(self, sweep: SweepView | None = None) -> None:
        """Stop re-publishing (the values then age out of Ray's endpoint)."""
        if sweep is not None:
            self.view = sweep
        self._stop.set()


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
    by state, ``best_metric``, ``epochs_per_second`` and per stage ``done:<stage>``,
    ``total:<stage>``, ``eta_seconds:<stage>``, ``eta_low_seconds:<stage>``,
    ``eta_high_seconds:<stage>`` (keys absent until exported)."""
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
        elif name.startswith("ray_automl_stage_") and "stage" in tags:
            out[f"{name.removeprefix('ray_automl_stage_')}:{tags['stage']}"] = value
    return out
