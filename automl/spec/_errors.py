"""Pydantic's validation errors in the project's one-line form: the key path, what must
hold, what was received, and the fix (with "did you mean" where a choice is close).

``Input should be less than 1`` becomes ``data.test_size: must be less than 1, got 1.5``
with the fix ``use a value below 1``; a union's errors at one key (``scheduler.brackets``:
``'auto'`` or an integer) become one message naming every form the key takes.
"""

from __future__ import annotations

import difflib
import re
import reprlib
from typing import Any

from pydantic import BaseModel, ValidationError

from automl.spec._compression import STAGE_NAMES, STAGE_SPECS
from automl.spec._domains import DOMAIN_TAGS, CategoricalDomain, FloatDomain, IntDomain

#: what a value of each pydantic error type must be
_EXPECTED = {
    "int_parsing": "a whole number", "int_type": "a whole number",
    "int_from_float": "a whole number", "float_parsing": "a number", "float_type": "a number",
    "finite_number": "a finite number", "bool_parsing": "true or false",
    "bool_type": "true or false", "string_type": "text", "model_type": "a section of keys",
    "model_attributes_type": "a section of keys", "dict_type": "a section of keys",
    "list_type": "a list", "tuple_type": "a list",
}
#: the fix for each error type (``{leaf}``: the key's own name)
_FIXES = {
    "int_parsing": "write a whole number, without quotes", "int_type": "write a whole number",
    "int_from_float": "round it to a whole number",
    "float_parsing": "write a number, such as 0.5 or 1e-3, without quotes",
    "float_type": "write a number, such as 0.5 or 1e-3", "finite_number": "write a finite number",
    "bool_parsing": "write true or false", "bool_type": "write true or false",
    "string_type": "write text; quote it if it looks like a number",
    "model_type": "write {leaf}: with its keys indented below it",
    "model_attributes_type": "write {leaf}: with its keys indented below it",
    "dict_type": "write {leaf}: with its keys indented below it",
    "list_type": "write a list: [a, b], or one '- item' per line",
    "tuple_type": "write a list: [a, b], or one '- item' per line",
}
#: the spec's patterns in words: (what a value must be, the fix)
_NAME = ("a name of letters, digits, '_', '.' and '-' (starting with a {first}, at most {n} "
         "characters)")
_PATTERNS = {
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$": (_NAME.format(first="letter or digit", n=64),
                                           "rename it"),
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$": (_NAME.format(first="letter or digit", n=128),
                                            "rename it"),
    r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$": (_NAME.format(first="letter", n=64), "rename it"),
    r"^[a-z][a-z0-9+.-]*://\S+$": ("a URI with a scheme", "write s3://bucket/path, "
                                   "gs://bucket/path or file:///absolute/path"),
}
_SHOWN = reprlib.Repr()  # (keyword arguments need Python 3.12) received values, cut
_SHOWN.maxstring = _SHOWN.maxother = 40
_SHOWN.maxlist = _SHOWN.maxdict = 4
_SHOWN.maxlevel = 2


def first_error(error: ValidationError, data: dict,
                root: type[BaseModel]) -> tuple[str, str | None]:
    """The first error of ``error`` (an unknown key first: it explains the errors it
    causes) as ``(message, fix)``: the message starts with the key path; the fix is None
    when the message says it (a check of our own, an unknown key's "did you mean").

    Args:
        data: the spec as loaded from YAML, to suggest the nearest key for an unknown one.
        root: the model ``data`` was validated as (``Experiment``).
    """
    errors = error.errors(include_url=False)
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    loc = _loc(errors[0])
    same = [e for e in errors if _loc(e) == loc]  # a union's members, all at one key
    more = len(errors) - len(same)
    key = ".".join(loc) or "(top level)"
    msg, fix = _describe(same, loc, data, root)
    if more:
        s = "s" * (more != 1)
        if fix:
            fix += f"; {more} more error{s} after this one"
        else:
            msg += f" (and {more} more)"
    head = msg.split(":", 1)[0]
    if "." in head and " " not in head and (not loc or head.startswith(loc[0])):
        return msg, fix  # a cross-field check that names its own key path
    return f"{key}: {msg}", fix


def _loc(err: dict) -> list[str]:
    """The key path the user wrote: without domain, union-member and stage tags."""
    loc = [str(p) for p in err["loc"] if not (isinstance(p, str) and p in DOMAIN_TAGS)]
    loc = [p for p in loc if not p.startswith(("function-after", "function-before",
                                                "constrained-", "literal["))
           and p not in ("str", "bool", "float", "list", "dict", "none")]
    # a compression stage's tag (compression.stages.1.prune.ratio) is not a key the user
    # wrote, nor is the field that holds the sections keyed by import paths
    return [p for i, p in enumerate(loc) if not (p in STAGE_NAMES and i and loc[i - 1].isdigit())
            and not (p == "user_sections" and i and loc[i - 1] == "model")]


def _describe(errors: list[dict], loc: list[str], data: dict,
              root: type[BaseModel]) -> tuple[str, str | None]:
    err = errors[0]
    kind, leaf = err["type"], loc[-1] if loc else "the spec"
    if kind == "extra_forbidden":
        return f"unknown key '{leaf}'" + _suggest(loc, data, root), None
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return (f"unknown domain type {(err.get('input') or {}).get('type')!r}; use type: "
                "float, int or categorical, or write a plain value"), None
    if kind == "missing":
        return "required key is missing", f"add {leaf}:"
    expected = [_expected(e) for e in errors]
    if None in expected:  # a check of our own, which says what must hold and the fix
        return err["msg"].removeprefix("Value error, "), None
    got = _shown(err.get("input"))
    fix = _fix(err, leaf)
    return f"must be {' or '.join(dict.fromkeys(expected))}, got {got}", fix


def _expected(err: dict) -> str | None:
    """What the value must be, in words; None for a type this module does not phrase."""
    kind, ctx = err["type"], err.get("ctx") or {}
    bounds = {"less_than": ("less than", "lt"), "greater_than": ("greater than", "gt"),
              "less_than_equal": ("at most", "le"), "greater_than_equal": ("at least", "ge"),
              "multiple_of": ("a multiple of", "multiple_of")}
    if kind in bounds:
        words, name = bounds[kind]
        return f"{words} {_number(ctx[name])}"
    if kind in ("literal_error", "enum"):
        many = len(_choices(ctx.get("expected", ""))) > 2
        return ("one of " if many else "") + ctx.get("expected", "")
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern")
        return _PATTERNS.get(pattern, (f"text matching {pattern}",))[0]
    if kind in ("too_short", "too_long"):
        n = ctx.get("min_length" if kind == "too_short" else "max_length")
        return f"{'at least' if kind == 'too_short' else 'at most'} {n} item{'s' * (n != 1)}"
    if kind in ("string_too_short", "string_too_long"):
        n = ctx.get("min_length" if kind == "string_too_short" else "max_length")
        return (f"{'at least' if kind == 'string_too_short' else 'at most'} {n} "
                f"character{'s' * (n != 1)}")
    return _EXPECTED.get(kind)


def _fix(err: dict, leaf: str) -> str | None:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind in ("literal_error", "enum"):
        near = difflib.get_close_matches(str(value), _choices(ctx.get("expected", "")), n=1,
                                         cutoff=0.7)
        return f"did you mean '{near[0]}'?" if near else None
    if kind == "string_pattern_mismatch":
        return _PATTERNS.get(ctx.get("pattern"), (None, "change it to match"))[1]
    fixed = {"less_than": "use a value below {lt}", "greater_than": "use a value above {gt}",
             "less_than_equal": "use {le} or less", "greater_than_equal": "use {ge} or more",
             "multiple_of": "use a multiple of {multiple_of}",
             "too_short": "give at least {min_length}", "too_long": "give at most {max_length}",
             "string_too_short": "use at least {min_length} characters",
             "string_too_long": "use at most {max_length} characters"}.get(kind) or _FIXES.get(kind)
    numbers = {k: _number(v) for k, v in ctx.items()}
    return fixed.format(leaf=leaf, **numbers) if fixed else None


def _number(value: Any) -> str:
    """``1.0`` -> ``1``, ``0.001`` -> ``0.001``; anything else as it is."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _choices(expected: str) -> list[str]:
    """``'a', 'b' or 'c'`` (pydantic's ``expected``) -> ``['a', 'b', 'c']``."""
    quoted = re.findall(r"'([^']*)'", expected)
    return quoted or [p.strip() for p in re.split(r",| or ", expected) if p.strip()]


def _shown(value: Any) -> str:
    """``value`` as the user wrote it in YAML: ``null``, ``true``, ``'fast'``, ``[1, 2]``,
    cut when long."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return _SHOWN.repr(value)


def _suggest(loc: list[str], data: dict, root: type[BaseModel]) -> str:
    """Nearest valid key name for an unknown key at ``loc``."""
    model: Any = root
    node: Any = data
    for part in loc[:-1]:
        if isinstance(node, list) and part.isdigit():  # compression.stages.<i>
            node = node[int(part)] if int(part) < len(node) else None
            model = STAGE_SPECS.get(node.get("stage")) if isinstance(node, dict) else None
            continue
        node = node.get(part) if isinstance(node, dict) else None
        field = model.model_fields.get(part) if model else None
        ann = field.annotation if field else None
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if model is None and isinstance(node, dict):
            model = {"float": FloatDomain, "int": IntDomain, "categorical": CategoricalDomain}.get(
                node.get("type")
            )
    valid = [f for f in model.model_fields if f != "user_sections"] if model else []
    near = difflib.get_close_matches(loc[-1], valid, n=1, cutoff=0.5)
    if near:
        return f"; did you mean '{near[0]}'?"
    return f" (valid: {', '.join(valid)})" if valid else ""
