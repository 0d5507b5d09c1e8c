"""The cluster layer, below both the search and selection: connecting to Ray (a local
instance or a cluster), admission control (how many trials or folds fit at once),
autoscaling clusters' capacity, Ray token authentication, and the local instance a run
started (recorded so a resume stops what a killed driver left).

Every private Ray API the package uses sits in :mod:`automl.cluster._ray_private`.
"""

from automl.cluster._admission import (
    DRIVER,
    Admission,
    admit,
    admit_bundles,
    admit_data_parallel,
    admit_trials,
    keep_cpus,
    trial_bundles,
)
from automl.cluster._autoscale import Autoscaling, NodeType, capacity, detect, drop_undeclared
from automl.cluster._connect import (
    TRAIN_ENV,
    RayHandle,
    connect,
    free_port,
    is_loopback,
    port_free,
    shutdown,
    spilled_bytes,
)
from automl.cluster._instance import forget_instance, record_instance, stop_leftover
from automl.cluster._token import TOKEN_FIX, token_available, use_cluster_token

__all__ = [
    "DRIVER", "TOKEN_FIX", "TRAIN_ENV", "Admission", "Autoscaling", "NodeType", "RayHandle", "admit",
    "admit_data_parallel",
    "admit_bundles", "admit_trials", "keep_cpus", "spilled_bytes", "capacity", "connect", "detect", "drop_undeclared",
    "forget_instance", "free_port", "is_loopback", "port_free", "record_instance", "shutdown",
    "stop_leftover", "token_available", "trial_bundles", "use_cluster_token",
]
