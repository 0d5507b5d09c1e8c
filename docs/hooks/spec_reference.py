"""MkDocs hook: the spec reference page, generated from the pydantic models at build time.

``docs/spec-reference.md`` holds the hand-written introduction and the marker line
``<!-- spec-reference -->``; this hook replaces the marker with
:func:`automl.spec._reference.reference_markdown` (one table per section model, every
key). A page without the marker fails the build, so the reference cannot silently go
missing.
"""

from __future__ import annotations

from automl.spec._reference import reference_markdown

PAGE = "spec-reference.md"
MARKER = "<!-- spec-reference -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its marker line {MARKER}; put it back where "
                         "the generated reference goes")
    return markdown.replace(MARKER, reference_markdown())
