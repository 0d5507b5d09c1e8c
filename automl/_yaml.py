"""YAML loading without PyYAML's YAML 1.1 traps.

* ``1e-3`` (no dot) is a float, not the string PyYAML 1.1 makes of it.
* Only ``true``/``false`` are booleans; ``yes``, ``no``, ``on``, ``off`` stay
  strings (YAML 1.2 core schema), so ``choices: [on, off]`` means two strings.
* A repeated key is an error instead of a silent overwrite.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from automl.errors import SpecError


class _Loader(yaml.SafeLoader):
    pass


_Loader.yaml_implicit_resolvers = {
    ch: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for ch, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'; keep one", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml(path: Path) -> Any:
    """Parse one YAML document.

    Raises:
        SpecError: missing or unreadable file, bytes that are not UTF-8, or a
            YAML syntax error (with line and column).
    """
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError("file not found", where=str(path), fix="check the path") from None
    except IsADirectoryError:
        raise SpecError("is a directory, not a spec file", where=str(path)) from None
    except UnicodeDecodeError as e:
        raise SpecError(f"not UTF-8 text (byte {e.start})", where=str(path)) from None
    except OSError as e:
        raise SpecError(f"cannot read: {e.strerror}", where=str(path)) from None
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = e.problem or e.context or "invalid YAML"
        raise SpecError(f"{at}{problem}", where=str(path), fix="fix the YAML syntax") from None
    except yaml.YAMLError as e:
        raise SpecError(f"invalid YAML: {e}", where=str(path)) from None
