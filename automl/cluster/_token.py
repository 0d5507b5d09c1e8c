"""Ray token authentication for clients of an existing cluster.

Ray 2.60 turns token authentication on by default for clusters started with
``ray start --head`` (``RAY_AUTH_MODE`` unset), but a *client* (``ray.init(address=...)``,
the Jobs SDK) only sends a token when ``RAY_AUTH_MODE=token`` is set in its own
environment. :func:`use_cluster_token` does what Ray's CLI does for a local cluster:
when the mode is unset and a token is available (``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``), turn token mode on for this process
and its children. An explicit ``RAY_AUTH_MODE`` is always respected.
"""

from __future__ import annotations

import os

from automl.cluster._ray_private import reload_auth_config, token_loader_has_token

AUTH_MODE = "RAY_AUTH_MODE"
TOKEN_FIX = ("put the cluster's token in ~/.ray/auth_token or $RAY_AUTH_TOKEN "
             "(`ray get-auth-token` on the head prints it) and set RAY_AUTH_MODE=token")


def token_available() -> bool:
    """True when Ray's token loader finds a token (env var, token file or default path)."""
    found = token_loader_has_token()
    if found is not None:
        return found
    if os.environ.get("RAY_AUTH_TOKEN"):  # a Ray without that loader: look ourselves
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    return os.path.isfile(path)


def use_cluster_token() -> bool:
    """Send the token to the cluster when one is available and ``RAY_AUTH_MODE`` is unset.

    Returns:
        True when this process now uses token authentication.
    """
    mode = os.environ.get(AUTH_MODE)
    if mode is not None:
        return mode.lower() == "token"
    if not token_available():
        return False
    os.environ[AUTH_MODE] = "token"
    reload_auth_config()  # Ray caches its config at first use: let this process see the mode
    return True
