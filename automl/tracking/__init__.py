"""Experiment tracking: W&B (one run per trial, one group per sweep, model artifacts),
TensorBoard event files per trial, and secret redaction.

``tracking.backend: none`` turns W&B off; ``tracking.mode: auto`` logs online when an
API key is configured and offline otherwise (``wandb sync <run_dir>/wandb`` uploads
later; an online server that does not answer in 5 s turns the sweep offline). The
sweep's sinks live in ``automl.tracking._sinks`` (they import ray through
``automl.search``); importing this package imports neither ray nor wandb.
"""

from automl._redact import REDACTED, add_secret, redact, redact_text, secret_values
from automl.tracking._wandb import (
    WandbTarget,
    api_key_source,
    go_offline,
    resolve_mode,
    run_id,
    start_run,
    unreachable,
    wandb_target,
)
from automl.tracking._winner import log_alias, log_winner

__all__ = [
    "REDACTED",
    "WandbTarget",
    "add_secret",
    "api_key_source",
    "go_offline",
    "log_alias",
    "log_winner",
    "redact",
    "redact_text",
    "resolve_mode",
    "run_id",
    "secret_values",
    "start_run",
    "unreachable",
    "wandb_target",
]
