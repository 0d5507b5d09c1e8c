"""Admission control: how many trials may run at once, derived from what one trial
needs (its driver plus every worker) and what the cluster's alive nodes have, so a
sweep never waits on a placement that cannot happen (FIELD-NOTES: 2 trials x 2
workers on 4 CPUs deadlocked when concurrency ignored the workers)."""

from __future__ import annotations

from dataclasses import dataclass

from automl.errors import ResourceError

_EPS = 1e-9
DRIVER = {"CPU": 0.01}  # a distributed trial's own Tune process; Tune refuses CPU 0


@dataclass(frozen=True)
class Admission:
    """The outcome of :func:`admit`.

    Attributes:
        trial_resources: one trial's full demand summed over its bundles, e.g. ``{"CPU": 2.01}``.
        max_concurrent: trials that fit at once (packed node by node).
        cluster: total resources of alive nodes.
        largest_node: resources of the node with the most CPUs.
        nodes: number of alive nodes.
    """

    trial_resources: dict[str, float]
    max_concurrent: int
    cluster: dict[str, float]
    largest_node: dict[str, float]
    nodes: int = 1


def _alive_nodes() -> list[dict[str, float]]:
    """The alive nodes' resources; on an autoscaling cluster, the nodes it can grow to
    (:func:`automl.cluster.capacity`), so trials wait for the autoscaler instead of
    failing, while a request no node type can hold still fails fast."""
    import ray

    from automl.cluster._autoscale import capacity, detect

    alive = [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
    return capacity(alive, detect())


def _keep(nodes: list[dict[str, float]]) -> list[dict[str, float]]:
    """``nodes`` with the CPUs :func:`keep_cpus` keeps taken off the largest (a node keeps
    at least 1 CPU for tasks)."""
    nodes = [dict(n) for n in nodes]
    if _KEPT["CPU"] and nodes:
        largest = max(nodes, key=lambda n: n.get("CPU", 0.0))
        largest["CPU"] = max(min(1.0, largest.get("CPU", 0.0)),
                             largest.get("CPU", 0.0) - _KEPT["CPU"])
    return nodes


def _place(free: list[dict[str, float]], bundles: list[dict[str, float]]) -> bool:
    """Place every bundle on some node (fullest-fitting first); commit only if all fit."""
    trial = [dict(n) for n in free]
    for bundle in bundles:
        need = {k: v for k, v in bundle.items() if v > 0}
        for node in sorted(trial, key=lambda n: -n.get("CPU", 0.0)):
            if all(node.get(k, 0.0) + _EPS >= v for k, v in need.items()):
                for k, v in need.items():
                    node[k] = node.get(k, 0.0) - v
                break
        else:
            return False
    free[:] = trial
    return True


def _fmt(res: dict[str, float]) -> str:
    return ", ".join(f"memory={v / 2**20:.0f}MiB" if k == "memory" else f"{k}={v:g}"
                     for k, v in res.items())


def admit_bundles(
    bundles: list[dict[str, float]],
    requested: int | str = "auto",
    nodes: list[dict[str, float]] | None = None,
    fix: str = "lower resources.cpus_per_worker / workers_per_trial, or add nodes",
) -> Admission:
    """Concurrency for trials that each need all of ``bundles`` at once.

    Args:
        bundles: one trial's resource bundles, e.g. ``[{"CPU": 0.01}, {"CPU": 1}, {"CPU": 1}]``
            (driver, then one per worker); each bundle must fit on one node.
        requested: ``"auto"`` (as many as fit) or an upper bound.
        nodes: resource dicts of the alive nodes; default ``ray.nodes()``.

    Raises:
        ResourceError: one trial can never be placed; names what a trial needs, what
            the cluster and its largest node have. Raised before any trial is queued.
    """
    nodes = _keep(_alive_nodes() if nodes is None else nodes)
    if not nodes:
        raise ResourceError("the Ray cluster has no alive nodes", where="ray")
    keys = sorted({k for b in bundles for k, v in b.items() if v > 0}, key=lambda k: (k == "memory", k))
    total_need = {k: sum(b.get(k, 0.0) for b in bundles) for k in keys}
    cluster = {k: sum(n.get(k, 0.0) for n in nodes) for k in sorted(set(keys) | {"CPU"})}
    largest = max(nodes, key=lambda n: (n.get("CPU", 0.0), n.get("GPU", 0.0)))
    free = [dict(n) for n in nodes]
    slots = 0
    while slots < 10_000 and _place(free, bundles):
        slots += 1
    if slots == 0:
        shape = (f"{len(bundles)} bundles ({'; '.join(_fmt(b) for b in bundles)})"
                 if len(bundles) > 1 else "")
        raise ResourceError(
            f"a trial needs {_fmt(total_need)} {'in all' if shape else 'on one node'}"
            f"{' as ' + shape if shape else ''}, but the largest node has "
            f"{_fmt({k: largest.get(k, 0.0) for k in keys})} and the cluster "
            f"{_fmt({k: cluster.get(k, 0.0) for k in keys})}",
            where="resources", fix=fix,
        )
    limit = slots if requested == "auto" else min(int(requested), slots)
    return Admission(total_need, max(1, limit), cluster,
                     {k: largest.get(k, 0.0) for k in cluster}, len(nodes))


def admit(
    demand: dict[str, float], requested: int | str = "auto", nodes: list[dict] | None = None
) -> Admission:
    """Concurrency for single-process tasks that each need ``demand`` on one node
    (in-process trials, cross-validation folds). See :func:`admit_bundles`."""
    return admit_bundles([demand], requested, nodes)


def trial_bundles(resources) -> list[dict[str, float]]:
    """One trial's bundles from a ``ResourcesSpec``: the trial process alone when it has
    one worker; else a tiny driver plus one bundle per Ray Train worker."""
    worker = {"CPU": resources.cpus_per_worker,
              "memory": float(resources.memory_per_worker_mb * 1024 * 1024)}
    if resources.gpus_per_worker:
        worker["GPU"] = resources.gpus_per_worker
    # an autoscaler cannot add nodes for resources its node types do not declare
    from automl.cluster._autoscale import detect, drop_undeclared

    worker = drop_undeclared(worker, detect())
    if not resources.distributed:
        return [worker]
    return [dict(DRIVER)] + [dict(worker) for _ in range(resources.workers_per_trial)]


def admit_trials(resources, nodes: list[dict] | None = None) -> Admission:
    """Admission for the search's trials as a ``ResourcesSpec`` describes them."""
    return admit_bundles(trial_bundles(resources), resources.concurrent_trials, nodes)


#: CPUs of the largest node that admission keeps free of trials, folds and refits
_KEPT = {"CPU": 0.0}


def keep_cpus(cpus: float) -> None:
    """Keep ``cpus`` CPUs of the largest node free of every task this driver admits from
    now on (trials, CV folds, the refit): streaming data's Ray Data tasks need them, and
    tasks holding every CPU would starve them (ray#29662, ray#24304, ray#41603). A node
    keeps at least 1 CPU for tasks. ``keep_cpus(0)`` ends it."""
    _KEPT["CPU"] = float(cpus)


#: the fix for a cluster without the State API that data-parallel trials need
STATE_API_FIX = ("start the cluster's head with the dashboard, `ray start --head "
                 "--include-dashboard=true` (it needs ray[default]), or run one worker per "
                 "trial: resources.workers_per_trial: 1")


def admit_data_parallel(resources, handle) -> None:
    """Refuse data-parallel trials on a cluster they cannot run on, before anything runs.

    Ray Train frees the placement group of a trial whose controller did not shut down
    itself (Tune stopping the trial: ASHA, the budget, Ctrl-C) through a cleaner that asks
    the State API whether the controller still lives; the State API is served by the
    dashboard. On a cluster started without it the cleaner never learns, the placement
    group stays, and the next trial's workers wait forever (issue 42; ray#54305,
    ray#65447). ``handle`` is the :class:`~automl.cluster.RayHandle` of the connection:
    a cluster whose dashboard is not known to be missing is admitted.

    Raises:
        ResourceError: ``resources`` asks for data-parallel trials and the cluster runs
            without the dashboard.
    """
    if not resources.distributed or not handle.dashboard_known or handle.dashboard_url:
        return
    raise ResourceError(
        f"data-parallel trials (resources.workers_per_trial: {resources.workers_per_trial}) "
        "need the cluster's State API, which Ray Train's placement-group cleanup asks, but "
        "the cluster runs without the dashboard that serves it", where=f"ray {handle.address}",
        fix=STATE_API_FIX)
