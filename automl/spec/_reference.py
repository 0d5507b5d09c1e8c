"""The spec reference, generated from the pydantic models so it cannot drift from them.

:func:`reference_markdown` walks :class:`~automl.spec.Experiment` and every section model
it holds, recursively (lists of sections and the compression stages included), and writes
one Markdown table per model: each key's dotted path (``search.num_samples``), type,
default, constraints (``ge``/``le``/``gt``/``lt``, patterns, ``Literal`` choices and the
choices a validator checks) and description. Then the search-space domains
(:class:`FloatDomain`, :class:`IntDomain`, :class:`CategoricalDomain`).

A key's description is, in this order: its ``Field(description=...)``; the ``#:`` (or
``#``) comment lines right above it in the source; an attribute docstring right below it;
a comment at the end of its line; a clause of its model's docstring that starts with the
key in double backquotes and a colon; for a section, the first sentence of its model's
docstring. Each model's docstring opens its table.

The documentation site calls it at build time (``docs/hooks/spec_reference.py``);
``tests/test_docs.py`` checks that every key of every model is listed. Imports neither
torch nor ray.
"""

from __future__ import annotations

import ast
import functools
import inspect
import io
import re
import tokenize
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any, Literal, Union

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from automl.spec import (
    BUNDLED_DATASETS,
    FAMILIES,
    FILE_SOURCES,
    INITS,
    OBJECTIVE_METRICS,
    OPTIMIZERS,
    REPORTED_METRICS,
    SIGNAL_DATASETS,
    TASK_CV_METRICS,
    TASK_LOSSES,
    CategoricalDomain,
    ConstraintSpec,
    DataSpec,
    Domain,
    Experiment,
    FloatDomain,
    IntDomain,
    ModelSpec,
    ObjectiveSpec,
    SearchSpec,
    SelectionSpec,
    TrainingSpec,
)

__all__ = ["DOMAINS", "Section", "reference_markdown", "sections"]

#: the search-space domains, each with the ``type:`` that selects it
DOMAINS: dict[str, type[BaseModel]] = {"float": FloatDomain, "int": IntDomain,
                                       "categorical": CategoricalDomain}

#: choices a field validator checks (the annotation only says ``str`` or ``Domain``)
VALIDATED_CHOICES: dict[tuple[type[BaseModel], str], tuple[str, ...]] = {
    (DataSpec, "source"): BUNDLED_DATASETS + SIGNAL_DATASETS + FILE_SOURCES,
    (ModelSpec, "family"): FAMILIES,
    (TrainingSpec, "optimizer"): OPTIMIZERS,
    (TrainingSpec, "init"): INITS,
    (TrainingSpec, "loss"): tuple(dict.fromkeys(x for xs in TASK_LOSSES.values() for x in xs)),
    (SearchSpec, "metric"): tuple(REPORTED_METRICS),
    (SelectionSpec, "metric"): tuple(dict.fromkeys(
        m for ms in TASK_CV_METRICS.values() for m in ms)),
    (ObjectiveSpec, "metric"): tuple(OBJECTIVE_METRICS),
    (ConstraintSpec, "metric"): tuple(OBJECTIVE_METRICS),
}
for _model, _field in VALIDATED_CHOICES:  # a renamed field must not leave a stale entry
    if _field not in _model.model_fields:
        raise ValueError(f"VALIDATED_CHOICES names {_model.__name__}.{_field}, which is not a "
                         "field; update automl/spec/_reference.py")

_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string",
            NoneType: "null"}
_BOUNDS = ((at.Ge, "ge", "≥"), (at.Gt, "gt", ">"), (at.Le, "le", "≤"), (at.Lt, "lt", "<"))


@dataclass(frozen=True)
class Section:
    """One model of the spec at one place in it.

    Attributes:
        path: the dotted key path of the model (``""`` for the top level,
            ``search.objectives[]`` for the entries of a list, ``data.augment``).
        model: the pydantic model.
        label: what tells this model apart at ``path`` (``stage: distill``), or ``""``.
    """

    path: str
    model: type[BaseModel]
    label: str = ""

    @property
    def anchor(self) -> str:
        """The heading's id on the reference page (``spec-data-augment``)."""
        words = re.findall(r"[a-z0-9_]+", f"{self.path} {self.label.split(':')[-1]}".lower())
        return "spec-" + ("-".join(w.replace("_", "-") for w in words) or "top-level")

    def key(self, field: str) -> str:
        """The dotted path of ``field`` in this model."""
        return f"{self.path}.{field}" if self.path else field


def sections(model: type[BaseModel] = Experiment, path: str = "",
             label: str = "") -> Iterator[Section]:
    """``model`` and every section model below it, depth first, in field order. Domains are
    not sections (they are listed once, :data:`DOMAINS`)."""
    yield Section(path, model, label)
    for name, info in model.model_fields.items():
        key = f"{path}.{name}" if path else name
        for sub, suffix in _models_in(info.annotation):
            sub_label = _label(sub) if _is_union_of_models(info.annotation) else ""
            yield from sections(sub, key + suffix, sub_label)


def _models_in(ann: Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The section models an annotation holds, with ``[]`` for each list around them."""
    if _is_domain(ann):
        return
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        yield ann, suffix
        return
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Annotated:
        yield from _models_in(args[0], suffix)
    elif origin in (list, tuple):
        for a in args:
            yield from _models_in(a, suffix + "[]")
    elif origin in (Union, UnionType):
        for a in args:
            yield from _models_in(a, suffix)


def _is_union_of_models(ann: Any) -> bool:
    return len(list(_models_in(ann))) > 1


def _label(model: type[BaseModel]) -> str:
    """``stage: distill`` for a model with a one-value ``Literal`` field (a union member)."""
    for name, info in model.model_fields.items():
        if typing.get_origin(info.annotation) is Literal and len(typing.get_args(
                info.annotation)) == 1:
            return f"{name}: {typing.get_args(info.annotation)[0]}"
    return model.__name__


def _is_domain(ann: Any) -> bool:
    # pydantic keeps a bare ``Domain`` field's union and moves its discriminator to metadata
    return ann == Domain or ann == typing.get_args(Domain)[0]


# --------------------------------------------------------------------------- types
def _strip(ann: Any) -> tuple[Any, list]:
    """``(inner type, constraint metadata)`` of an ``Annotated`` type."""
    meta: list = []
    while typing.get_origin(ann) is typing.Annotated and not _is_domain(ann):
        args = typing.get_args(ann)
        ann = args[0]
        for m in args[1:]:
            meta.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    return ann, meta


def _members(ann: Any) -> list:
    ann, _ = _strip(ann)
    if typing.get_origin(ann) in (Union, UnionType):
        return [m for a in typing.get_args(ann) for m in _members(a)]
    return [ann]


def _type_text(ann: Any, anchors: dict[type[BaseModel], str]) -> str:
    """The type in words, sections and domains linked."""
    if _is_domain(ann):
        return "[domain](#spec-domains)"
    inner, _ = _strip(ann)
    origin = typing.get_origin(inner)
    if origin in (Union, UnionType):
        args = typing.get_args(inner)
        literals = [v for a in args if typing.get_origin(a) is Literal for v in typing.get_args(a)]
        parts = [_type_text(a, anchors) for a in args
                 if typing.get_origin(a) is not Literal and a is not NoneType]
        if literals and parts:  # "auto" or an integer: the literal values are the type
            parts.insert(0, " or ".join(f"`{_yaml(v)}`" for v in literals))
        elif literals:  # the choices are listed as constraints
            parts.insert(0, _type_text(Literal[tuple(literals)], anchors))
        if NoneType in args:
            parts.append("null")
        return " or ".join(dict.fromkeys(parts))
    if origin in (list, tuple):
        return "list of " + " or ".join(_type_text(a, anchors) for a in typing.get_args(inner))
    if origin is Literal:
        kinds = {_SCALARS.get(type(v), type(v).__name__) for v in typing.get_args(inner)}
        return " or ".join(sorted(kinds))
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        if inner in anchors:
            return f"[section](#{anchors[inner]})"
        return "section"
    return _SCALARS.get(inner, getattr(inner, "__name__", str(inner)))  # bounds: constraints


def _bound_text(meta: list) -> str:
    out = []
    for m in meta:
        for kind, attr, sign in _BOUNDS:
            if isinstance(m, kind):
                out.append(f"{sign} {_yaml(getattr(m, attr))}")
    return ", ".join(out)


def _constraints(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    """Bounds, length, pattern and choices of one field, in words."""
    out = []
    meta = list(info.metadata)
    for m in meta:
        for kind, attr, sign in _BOUNDS:
            if isinstance(m, kind):
                out.append(f"{sign} {_yaml(getattr(m, attr))}")
        if isinstance(m, at.MinLen):
            out.append(f"length ≥ {m.min_length}")
        if isinstance(m, at.MaxLen):
            out.append(f"length ≤ {m.max_length}")
        pattern = getattr(m, "pattern", None)
        if pattern:
            out.append(f"pattern `{pattern}`")
    literals = [v for a in _members(info.annotation) if typing.get_origin(a) is Literal
                for v in typing.get_args(a)]
    others = [a for a in _members(info.annotation)
              if typing.get_origin(a) is not Literal and a is not NoneType]
    if literals and not others:
        out.append("one of " + ", ".join(f"`{_yaml(v)}`" for v in literals))
    # bounds inside a union member: brackets: "auto" or an integer >= 1
    for a in typing.get_args(_strip(info.annotation)[0]):
        inner, member_meta = _strip(a)
        bounds = _bound_text(member_meta)
        if bounds:
            out.append(f"{_SCALARS.get(inner, inner)} {bounds}")
    choices = VALIDATED_CHOICES.get((model, name))
    if choices:
        out.append("one of " + ", ".join(f"`{c}`" for c in choices))
    return "; ".join(out)


def _yaml(value: Any) -> str:
    """A default or bound as it is written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{value:.1f}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    return str(value)


def _default(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return ""
    return f"`{_yaml(value)}`"


# --------------------------------------------------------------------------- descriptions
@functools.cache
def _source_notes(path: str) -> dict[tuple[str, str], dict[str, str]]:
    """``(class, field) -> {"above"|"docstring"|"inline": text}`` from one source file."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    lines = source.splitlines()
    comments = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(
        io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    notes: dict[tuple[str, str], dict[str, str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for i, stmt in enumerate(node.body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            found: dict[str, str] = {}
            above, row = [], stmt.lineno - 1
            while row >= 1 and lines[row - 1].lstrip().startswith("#"):
                above.insert(0, re.sub(r"^#:?\s?", "", lines[row - 1].strip()))
                row -= 1
            if above:
                found["above"] = " ".join(above)
            nxt = node.body[i + 1] if i + 1 < len(node.body) else None
            if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                found["docstring"] = " ".join(nxt.value.value.split())
            for line in range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1):
                if line in comments and not lines[line - 1].lstrip().startswith("#"):
                    found["inline"] = comments[line].lstrip("#").strip()
            notes[(node.name, stmt.target.id)] = found
    return notes


def _docstring_definitions(model: type[BaseModel]) -> dict[str, str]:
    """``key -> text`` for each ````key````: definition in the model's docstring, up to the
    next key's definition or the end of the paragraph."""
    doc = inspect.getdoc(model) or ""
    names = "|".join(re.escape(n) for n in model.model_fields)
    out: dict[str, str] = {}
    for para in re.split(r"\n\s*\n", doc):
        para = " ".join(para.split())
        end = rf"[;.]?\s*``(?:{names})``:|\.\s+(?=[A-Z`])|$"  # the next key, or a sentence
        for m in re.finditer(rf"``({names})``:\s*(.+?)(?={end})", para):
            out.setdefault(m.group(1), m.group(2).rstrip(" ;."))
    return out


def describe(model: type[BaseModel], name: str) -> str:
    """The description of field ``name`` of ``model`` (module doc: where it comes from)."""
    info = model.model_fields[name]
    if info.description:
        return info.description
    cls = next((c for c in model.__mro__ if name in vars(c).get("__annotations__", {})), None)
    path = inspect.getsourcefile(cls) if cls is not None else None
    found = _source_notes(path).get((cls.__name__, name), {}) if path else {}
    for kind in ("above", "docstring", "inline"):
        if kind in found:
            return found[kind]
    text = _docstring_definitions(model).get(name, "")
    if not text:  # a section: the first sentence of its model's docstring
        subs = [m for m, _ in _models_in(info.annotation)]
        if len(subs) == 1:
            text = _first_sentence(inspect.getdoc(subs[0]) or "")
    return text


def _first_sentence(doc: str) -> str:
    para = " ".join(re.split(r"\n\s*\n", doc)[0].split())
    return re.split(r"(?<=[a-z)])\.\s+(?=[A-Z`])", para)[0].rstrip(".")


def _markdown(text: str) -> str:
    """reStructuredText roles and literals of a docstring as Markdown."""
    text = re.sub(r":[a-z]+:`~?(?:[\w.]*\.)?([\w]+)`", r"`\1`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text, flags=re.S)


def _cell(text: str) -> str:
    return " ".join(_markdown(text).split()).replace("|", "\\|")


# --------------------------------------------------------------------------- page
def reference_markdown(model: type[BaseModel] = Experiment) -> str:
    """The reference of every key of ``model`` and the models below it, as Markdown (one
    ``##``/``###`` heading with an ``{#id}`` and a table per model; needs the
    ``attr_list`` Markdown extension)."""
    found = list(sections(model))
    anchors = {s.model: s.anchor for s in found}
    out = []
    for s in found:
        depth = min(2 + max(0, s.path.count(".")), 4)
        title = f"`{s.path}`" if s.path else "Top level"
        if s.label:
            title += f" with `{s.label}`"
        out.append(f"{'#' * depth} {title} {{#{s.anchor}}}\n")
        out.extend(_model_block(s, anchors))
    out.append("## Search-space domains {#spec-domains}\n")
    out.append("A key whose type is *domain* takes a fixed value (a number, string or "
               "boolean) or one of these mappings, chosen by `type:`; the names follow "
               "Optuna's `suggest_*` API.\n")
    for tag, domain in DOMAINS.items():
        s = Section(f"{{type: {tag}}}", domain)
        out.append(f"### `type: {tag}` {{#spec-domain-{tag}}}\n")
        out.extend(_model_block(s, anchors, keys_only=True))
    return "\n".join(out)


def _model_block(s: Section, anchors: dict[type[BaseModel], str],
                 keys_only: bool = False) -> list[str]:
    out = []
    doc = inspect.getdoc(s.model)
    if doc and not doc.startswith(s.model.__name__ + "("):  # pydantic's generated docstring
        out.append(_markdown(doc) + "\n")
    out.append("| key | type | default | constraints | description |")
    out.append("|---|---|---|---|---|")
    for name, info in s.model.model_fields.items():
        key = name if keys_only else s.key(name)
        out.append("| " + " | ".join((
            f"`{key}`", _cell(_type_text(info.annotation, anchors)), _cell(_default(info)),
            _cell(_constraints(s.model, name, info)), _cell(describe(s.model, name)))) + " |")
    out.append("")
    return out
