"""The exception tree and the exit codes the CLI maps it to.

Every user-facing error is one line: where (file, key path or resource), what is
wrong, and what would fix it. The CLI prints ``str(error)`` and exits with
``error.exit_code``; the codes are stable and documented in the README.
"""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK = 0
EXIT_FAILED_RUN = 1
EXIT_BAD_INPUT = 2
EXIT_RESOURCES = 3
EXIT_INTERRUPTED = 130


def cut_list(items: Iterable, keep: int = 5) -> str:
    """``items`` as ``a, b, c, d, e and 195 more``: a list inside a one-line message (the
    columns of a table, the classes) stays short however long the list. Up to ``keep + 1``
    items are all shown (``and 1 more`` would be no shorter); an empty list is ``none``."""
    items = [str(i) for i in items]
    if not items:
        return "none"
    if len(items) <= keep + 1:
        return ", ".join(items)
    return f"{', '.join(items[:keep])} and {len(items) - keep} more"


class AutoMLError(Exception):
    """Base of every error this package raises on purpose."""

    exit_code = EXIT_FAILED_RUN

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None):
        self.message = message
        self.where = where
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [self.where, self.message] if self.where else [self.message]
        line = ": ".join(parts)
        if self.fix:
            line += f" ({self.fix})"
        return " ".join(line.split())


class SpecError(AutoMLError):
    """The experiment spec (YAML) is malformed or invalid; ``where`` is ``file: key.path``."""

    exit_code = EXIT_BAD_INPUT


class DataError(AutoMLError):
    """A data file or data setting cannot be used; ``where`` names the file."""

    exit_code = EXIT_BAD_INPUT


class ResourceError(AutoMLError):
    """A trial can never be placed on the cluster, or the output location is unusable."""

    exit_code = EXIT_RESOURCES


class RunError(AutoMLError):
    """The sweep ran but failed (e.g. every trial failed)."""

    exit_code = EXIT_FAILED_RUN


class RegistryError(AutoMLError):
    """A model-registry reference or entry is invalid or missing; ``where`` is the
    registry folder or the reference (``NAME@VERSION``)."""

    exit_code = EXIT_BAD_INPUT
