"""What an autoscaling Ray cluster can grow to, so admission control counts the nodes
the autoscaler may still add (a head with ``CPU: 0`` and no workers yet, as in
``cluster/aws.yaml``, must not make every sweep fail), while a request no node type can
ever hold still fails fast, and a fixed cluster is judged on its alive nodes only.

The node types come from, first that answers:

1. ``$AUTOML_AUTOSCALING_CONFIG``: a cluster-launcher style config (a file path, or the
   YAML/JSON text itself) with ``available_node_types`` (``resources``, ``max_workers``),
   for setups where the autoscaler runs out of sight (KubeRay's autoscaler sidecar);
2. the cluster config the autoscaler reports to GCS (autoscaler v2), read with
   :func:`automl.cluster._ray_private.gcs_cluster_config` (private in Ray; ray#37838);
3. the ``--autoscaling-config`` file of the v1 autoscaler (``monitor.py``) serving this
   cluster's GCS, found among this machine's processes: the driver of a sweep runs on the
   head (``automl submit``, ``ray exec``), where the cluster launcher's autoscaler runs.

No answer (no autoscaler, or one this process cannot see) means a fixed cluster.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

HEAD_MARKER = "node:__internal_head__"
UNLIMITED = 100  # node groups with no upper bound (max_count -1) count as this many nodes


@dataclass(frozen=True)
class NodeType:
    """A worker node type: its logical ``resources`` and how many the autoscaler may run."""

    name: str
    resources: dict[str, float]
    max_workers: int


@dataclass(frozen=True)
class Autoscaling:
    """The worker types of an autoscaling cluster, the cap on all workers together
    (``max_workers``), and where this was read (``source``)."""

    types: tuple[NodeType, ...]
    max_workers: int
    source: str


def from_cluster_config(config: dict, source: str) -> Autoscaling | None:
    """Worker types of a cluster-launcher config (``available_node_types``,
    ``head_node_type``, ``max_workers``); None when it defines none that can scale.
    Types whose ``resources`` are left to auto-detection are skipped (they are unknown
    until a node of that type runs)."""
    head = config.get("head_node_type")
    types = []
    for name, spec in (config.get("available_node_types") or {}).items():
        res = {k: float(v) for k, v in (spec.get("resources") or {}).items()}
        top = int(spec.get("max_workers", config.get("max_workers", 0)) or 0)
        if name == head or top <= 0 or not res:
            continue
        types.append(NodeType(name, res, top))
    if not types:
        return None
    cap = int(config.get("max_workers", sum(t.max_workers for t in types)))
    return Autoscaling(tuple(types), cap, source)


def _from_gcs() -> Autoscaling | None:
    from automl.cluster._ray_private import gcs_cluster_config

    cfg = gcs_cluster_config()
    if cfg is None:
        return None
    types = []
    for group in cfg.node_group_configs:
        res = {k: float(v) for k, v in dict(group.resources).items()}
        top = UNLIMITED if group.max_count == -1 else int(group.max_count)
        if top > 0 and res:
            types.append(NodeType(group.name, res, top))
    if not types:
        return None
    return Autoscaling(tuple(types), sum(t.max_workers for t in types), "gcs cluster config")


def monitor_config_path(gcs_address: str) -> Path | None:
    """The ``--autoscaling-config`` of the v1 autoscaler process on this machine that
    serves the GCS at ``gcs_address`` (``ip:port``; matched on the port, which no two
    clusters on one machine share)."""
    import psutil

    port = gcs_address.rsplit(":", 1)[-1]
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if not any(a.endswith("autoscaler/_private/monitor.py") for a in cmd[:4]):
            continue
        opts = dict(a[2:].split("=", 1) for a in cmd if a.startswith("--") and "=" in a)
        if opts.get("gcs-address", "").rsplit(":", 1)[-1] == port and opts.get(
                "autoscaling-config"):
            return Path(opts["autoscaling-config"]).expanduser()
    return None


ENV = "AUTOML_AUTOSCALING_CONFIG"


def _from_env() -> Autoscaling | None:
    import os

    import yaml

    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    try:
        text = value if value.startswith("{") else Path(value).expanduser().read_text()
        config = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as e:
        logger.warning("$%s is unreadable (%s); treating the cluster as fixed", ENV, e)
        return None
    if not isinstance(config, dict):
        return None
    return from_cluster_config(config, f"${ENV}")


def _from_monitor() -> Autoscaling | None:
    import ray
    import yaml

    try:
        path = monitor_config_path(ray.get_runtime_context().gcs_address)
    except Exception as e:  # psutil refused, or not connected
        logger.debug("cannot look for the autoscaler process: %s", e)
        return None
    if path is None or not path.is_file():
        return None
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        logger.warning("cannot read the autoscaler config %s: %s", path, e)
        return None
    return from_cluster_config(config, str(path)) if isinstance(config, dict) else None


def detect() -> Autoscaling | None:
    """The connected cluster's autoscaling node types, or None for a fixed cluster (or
    when this process is not connected to Ray)."""
    import ray

    if not ray.is_initialized():
        return None
    return _from_env() or _from_gcs() or _from_monitor()


def drop_undeclared(bundle: dict[str, float], scaling: Autoscaling | None) -> dict[str, float]:
    """``bundle`` without the resources (typically ``memory``) that no node type of an
    autoscaling cluster declares: the v1 autoscaler finds such a request infeasible and
    never adds a node for it (``memory`` is filled in for AWS and KubeRay node types, not
    for GCP or hand-written ones), so the sweep would wait forever. Warns once per key."""
    if scaling is None:
        return bundle
    declared = {k for t in scaling.types for k in t.resources}
    dropped = [k for k, v in bundle.items() if v and k not in declared and k not in ("CPU",)]
    for key in dropped:
        if key not in _warned:
            _warned.add(key)
            logger.warning("the autoscaler's node types (%s) declare no %r: trials do not "
                           "request it, or no node would ever be added for them; declare it "
                           "under available_node_types.<type>.resources to have it counted",
                           scaling.source, key)
    return {k: v for k, v in bundle.items() if k not in dropped}


_warned: set[str] = set()


def capacity(alive: list[dict[str, float]], scaling: Autoscaling | None) -> list[dict[str, float]]:
    """Resource dicts of the nodes a sweep can count on: the alive nodes of a fixed
    cluster; for an autoscaling one, the head plus every worker the autoscaler may run
    (each type up to its ``max_workers``, largest first, all together up to the cluster's
    ``max_workers``). Alive workers are among those, so they are not added twice; when
    the alive workers are more than that (workers joined by hand), they are kept instead.
    """
    if scaling is None:
        return alive
    heads = [n for n in alive if HEAD_MARKER in n][:1]
    others = [n for n in alive if HEAD_MARKER not in n]
    potential = [dict(t.resources) for t in scaling.types for _ in range(t.max_workers)]
    potential.sort(key=lambda n: (-n.get("CPU", 0.0), -n.get("GPU", 0.0)))
    potential = potential[: max(scaling.max_workers, 0)]

    def cpus(nodes: list[dict]) -> float:
        return sum(n.get("CPU", 0.0) for n in nodes)

    workers = potential if cpus(potential) >= cpus(others) else others
    return heads + workers
