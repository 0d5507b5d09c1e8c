"""Names of a package imported from its submodules when first used (PEP 562), so that a
Ray worker importing one light submodule does not pay for the heavy ones beside it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``):
    ``where`` maps each public name to the submodule that defines it (``"_cv"`` for
    ``package._cv``). A name is imported on first access and then kept in the package's
    namespace, so later accesses are plain lookups.

    Raises (from ``__getattr__``):
        AttributeError: the name is not in ``where``.
    """

    def __getattr__(name: str) -> Any:
        sub = where.get(name)
        if sub is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{sub}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted([*vars(sys.modules[package]), *where])

    return __getattr__, __dir__
