"""Transfer learning: trials start from the champion's weights and fine-tune.

The champion's weights are loaded once on the driver (``Registry.load``: sha256 checked,
``torch.load(weights_only=True)``) and travel with the trial data through the object
store. A trial uses them only when its architecture is the champion's (same ``arch``
dict, and every weight tensor has the same name and shape, so the input shape and the
number of classes match too); every other trial starts from its own initialisation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from automl.errors import RegistryError
from automl.spec import Experiment


def champion_weights(exp: Experiment, registry_root: Path) -> dict[str, Any] | None:
    """``{"ref", "arch", "state_dict"}`` of ``<registry.name>@<nightly.champion_alias>``,
    or None when there is no champion yet.

    Raises:
        RegistryError: the champion's files changed since registration, or it is not a
            plain-weights checkpoint (a compressed export cannot seed a trial).
    """
    from automl.nightly._champion import champion_version
    from automl.registry import CHECKPOINT, Registry

    version = champion_version(exp, registry_root)
    if version is None:
        return None
    if version.format != CHECKPOINT:
        raise RegistryError(f"champion {version.ref} is a {version.format} export, not a "
                            "checkpoint", where=version.ref,
                            fix="promote a winner version (NAME@N of kind winner)")
    model, version = Registry(registry_root).load(version.ref)
    return {"ref": version.ref, "arch": dict(version.lineage["config"]["arch"]),
            "state_dict": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}}
