"""Secret redaction for everything this package writes (specs, summaries, registry
entries, reports) and for text it shows.

Two sources of secrets are recognised:

* values of environment variables whose *name* looks secret (``WANDB_API_KEY``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``*_TOKEN``, ``*_PASSWORD``,
  ``GOOGLE_APPLICATION_CREDENTIALS``, ...), read at call time, at least 8 characters;
  the W&B key stored in ``.netrc`` is added by :func:`add_secret`;
* patterns that are secrets wherever they appear: AWS access key ids
  (``AKIA``/``ASIA`` + 16 characters), PEM private-key blocks (GCP service-account
  JSON embeds one), ``"private_key": "..."`` fields.

Mapping keys that name a secret (``api_key``, ``password``, ``secret_access_key``...)
have their values replaced whatever they are. Stdlib only: imported by ``_io``.
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "[REDACTED]"
#: environment-variable or mapping-key names whose values are secrets
SECRET_NAME = re.compile(
    r"(?i)(api[_-]?key|secret|passw(or)?d|token|credential|private[_-]?key|access[_-]?key"
    r"|session[_-]?key)"
)
_PATTERNS = (
    re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r'("private_key"\s*:\s*")[^"]+(")'),
)
_MIN_LEN = 8
_extra: set[str] = set()


def add_secret(value: str | None) -> None:
    """Treat ``value`` (e.g. a key read from a key file) as a secret from now on."""
    if value and len(value) >= _MIN_LEN:
        _extra.add(value)


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values to redact: secret-named environment variables plus :func:`add_secret`'s,
    longest first (so a key containing another is replaced whole)."""
    env = os.environ if environ is None else environ
    found = {v for k, v in env.items() if SECRET_NAME.search(k) and len(v) >= _MIN_LEN}
    return sorted(found | _extra, key=len, reverse=True)


def redact_text(text: str, environ: dict[str, str] | None = None) -> str:
    """``text`` with every secret value and secret pattern replaced by ``[REDACTED]``."""
    for value in secret_values(environ):
        if value in text:
            text = text.replace(value, REDACTED)
    text = _PATTERNS[0].sub(REDACTED, text)
    text = _PATTERNS[1].sub(REDACTED, text)
    return _PATTERNS[2].sub(rf"\g<1>{REDACTED}\g<2>", text)


def redact(obj: Any, environ: dict[str, str] | None = None) -> Any:
    """A copy of ``obj`` (dicts, lists, tuples, strings, scalars) with secrets replaced:
    strings through :func:`redact_text`, string values under secret-named keys wholesale."""
    if isinstance(obj, str):
        return redact_text(obj, environ)
    if isinstance(obj, dict):
        return {k: (REDACTED if isinstance(k, str) and SECRET_NAME.search(k)
                    and isinstance(v, str) and v else redact(v, environ))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, environ) for v in obj)
    return obj
