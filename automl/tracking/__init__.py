"""Experiment tracking: W&B (one run per trial, one group per sweep, model artifacts),
TensorBoard event files per trial, and secret redaction.

``tracking.backend: none`` turns W&B off; ``tracking.mode: auto`` logs online when an
API key is configured and offline otherwise (``wandb sync <run_dir>/wandb`` uploads
later). The Tune callbacks live in ``automl.tracking._callbacks`` (they import ray);
importing this package imports neither ray nor wandb.
"""

from automl._redact import REDACTED, add_secret, redact, redact_text, secret_values
from automl.tracking._wandb import (
    WandbTarget,
    api_key_source,
    resolve_mode,
    run_id,
    start_run,
    wandb_target,
)
from automl.tracking._winner import log_alias, log_winner

__all__ = [
    "REDACTED",
    "WandbTarget",
    "add_secret",
    "api_key_source",
    "log_alias",
    "log_winner",
    "redact",
    "redact_text",
    "resolve_mode",
    "run_id",
    "secret_values",
    "start_run",
    "wandb_target",
]
