"""Admission control: how many trials may run at once, derived from what one trial
needs and what the cluster's alive nodes have, so a sweep never waits on a
placement that cannot happen."""

from __future__ import annotations

import math
from dataclasses import dataclass

from automl.errors import ResourceError


@dataclass(frozen=True)
class Admission:
    """The outcome of :func:`admit`.

    Attributes:
        trial_resources: one trial's full demand, e.g. ``{"CPU": 1.0}``.
        max_concurrent: trials that fit at once (packed per node).
        cluster: total resources of alive nodes.
        largest_node: resources of the node with the most CPUs.
    """

    trial_resources: dict[str, float]
    max_concurrent: int
    cluster: dict[str, float]
    largest_node: dict[str, float]


def _fits(node: dict[str, float], demand: dict[str, float]) -> int:
    """How many copies of ``demand`` fit on ``node``."""
    counts = [math.floor(node.get(k, 0.0) / v + 1e-9) for k, v in demand.items() if v > 0]
    return min(counts) if counts else 0


def admit(
    demand: dict[str, float], requested: int | str = "auto", nodes: list[dict] | None = None
) -> Admission:
    """Decide concurrency for trials that each need ``demand`` (e.g. ``{"CPU": 1}``).

    Args:
        demand: resources of one trial, all of it on one node.
        requested: ``"auto"`` (as many as fit) or an upper bound.
        nodes: resource dicts of the alive nodes; default ``ray.nodes()``.

    Raises:
        ResourceError: no node can ever hold one trial; says what a trial needs
            and what the largest node has. Raised before any trial is queued.
    """
    if nodes is None:
        import ray

        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if not nodes:
        raise ResourceError("the Ray cluster has no alive nodes", where="ray")
    cluster: dict[str, float] = {}
    for node in nodes:
        for k, v in node.items():
            cluster[k] = cluster.get(k, 0.0) + v
    largest = max(nodes, key=lambda n: (n.get("CPU", 0.0), n.get("GPU", 0.0)))
    slots = sum(_fits(node, demand) for node in nodes)
    if slots == 0:
        need = ", ".join(f"{k}={v:g}" for k, v in demand.items())
        have = ", ".join(f"{k}={largest.get(k, 0.0):g}" for k in demand)
        raise ResourceError(
            f"a trial needs {need} on one node, but the largest node has {have}",
            where="resources",
            fix="lower resources.cpus_per_trial or add a bigger node",
        )
    limit = slots if requested == "auto" else min(int(requested), slots)
    keep = {k: v for k, v in cluster.items() if k in ("CPU", "GPU", "memory")}
    return Admission(dict(demand), max(1, limit), keep, {k: largest.get(k, 0.0) for k in keep})
