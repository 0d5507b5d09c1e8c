"""The documentation site: the spec reference lists every key of the spec models, and
``mkdocs build --strict`` passes (no broken link or anchor, no docstring warning)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing

from conftest import REPO
from pydantic import BaseModel

from automl.spec import CategoricalDomain, Experiment, FloatDomain, IntDomain
from automl.spec._reference import reference_markdown

DOMAINS = {FloatDomain: "float", IntDomain: "int", CategoricalDomain: "categorical"}


def _nested(ann, suffix=""):
    """The models an annotation holds (through Annotated, unions, Optional and lists), with
    ``[]`` for each list around them. Written apart from the generator's own walk."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        yield ann, suffix
        return
    list_like = typing.get_origin(ann) in (list, tuple)
    for arg in typing.get_args(ann):
        yield from _nested(arg, suffix + "[]" if list_like else suffix)


def _walk(model=Experiment, path="", domains=None):
    """``(dotted path, model)`` of every section model below ``model``; domain models found
    on the way are added to ``domains``."""
    yield path, model
    for name, info in model.model_fields.items():
        for sub, suffix in _nested(info.annotation):
            if sub in DOMAINS:
                domains.add(sub)
            else:
                yield from _walk(sub, f"{path}.{name}{suffix}" if path else name + suffix,
                                 domains)


def _tables(markdown: str) -> list[tuple[str, dict[str, str]]]:
    """``(heading, {key: description})`` for each heading of the page and its table."""
    out: list[tuple[str, dict[str, str]]] = []
    for line in markdown.splitlines():
        if line.startswith("#"):
            out.append((line, {}))
        elif line.startswith("| `") and out:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out[-1][1][cells[0].strip("`")] = cells[-1]
    return out


def test_the_spec_reference_lists_every_key_of_every_spec_model():
    tables = _tables(reference_markdown())
    domains: set = set()
    walked = list(_walk(domains=domains))
    assert len(walked) >= 30 and domains == set(DOMAINS)  # the walk itself reached them
    for path, model in walked:
        title = f"`{path}`" if path else "Top level"
        keys = {f"{path}.{f}" if path else f for f in model.model_fields}
        found = [rows for heading, rows in tables if heading.split(" ", 1)[1].startswith(title)
                 and keys <= set(rows)]
        missing = keys - set().union(*(rows for h, rows in tables if title in h))
        assert found, f"{model.__name__} at {title}: keys missing from the reference: {missing}"
    for domain, tag in DOMAINS.items():
        rows = next(r for h, r in tables if h.startswith(f"### `type: {tag}`"))
        assert set(domain.model_fields) <= set(rows), domain.__name__


def test_every_key_in_the_spec_reference_has_a_description():
    """A key added without ``Field(description=...)`` or a ``#:`` comment above it fails
    here, naming it."""
    empty = [key for _, rows in _tables(reference_markdown()) for key, text in rows.items()
             if not text]
    assert not empty, f"no description (add a #: comment above the field): {empty}"


def test_mkdocs_build_strict(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    spec_page = (site / "spec-reference" / "index.html").read_text()
    assert "search.num_samples" in spec_page and 'id="spec-domains"' in spec_page
    assert "infer_task" in (site / "api" / "index.html").read_text()
    assert (site / "benchmarks" / "results" / "orchestration" / "index.html").is_file()
