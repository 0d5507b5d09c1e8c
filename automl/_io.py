"""Atomic file writes: a reader never sees half a file, a crash never loses the old one.

Everything written here passes through :func:`automl._redact.redact_text`, so an API key
or cloud credential in the environment never lands in a saved spec, summary or report.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from automl._redact import redact_text

# mkstemp creates 0600 files; written files get the usual 0666 & ~umask instead
UMASK = os.umask(0)
os.umask(UMASK)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (secrets redacted) to ``path`` via a temporary file in the same folder
    and ``os.replace``."""
    path = Path(path)
    text = redact_text(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON (non-finite floats become null)."""
    return write_text(path, json.dumps(_finite(obj), indent=2, sort_keys=False) + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def append_jsonl(path: str | Path, obj: Any) -> None:
    """Append ``obj`` as one JSON line (secrets redacted) to ``path``, ending a torn last
    line first (a killed writer), so a reader skips at most that one line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = redact_text(json.dumps(_finite(obj), default=str)) + "\n"
    with open(path, "ab+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(line.encode("utf-8"))


def shown(path: str | Path) -> str:
    """``path`` as printed to the user: relative to the working directory when it lies
    inside it (``runs/resnet-digits/wandb``), else as it is; files keep their absolute
    paths in the run's records."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)
