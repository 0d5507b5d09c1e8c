"""Griffe extension for the API reference: the project's docstrings are Google style with
a few reStructuredText habits, written here as the Markdown that mkdocstrings renders.

- cross-reference roles, ``:func:`load_spec``` or ``:class:`~automl.models.TargetScale```,
  become code spans (```load_spec```, ```TargetScale```);
- a paragraph ending in ``::`` before an indented literal block ends in ``:`` (the block
  is a Markdown code block already);
- a reST simple table (rows between ``====  ====`` rules) is shown as preformatted text.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`<]+?)`")
_RULE = re.compile(r"^ *=+( +=+)+ *$")


def markdown(text: str) -> str:
    """``text`` (a docstring) with the reST habits above written as Markdown."""
    # ``~a.b.C`` shows ``C``, as Sphinx does
    text = _ROLE.sub(lambda m: f"``{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}``", text)
    text = re.sub(r"::\n(\n +\S)", r":\n\1", text)
    lines, out, rules = text.split("\n"), [], 0
    for line in lines:
        if _RULE.match(line):
            if rules == 0:
                out.append("```text")
            rules += 1
            out.append(line)
            if rules == 3:
                out.append("```")
                rules = 0
            continue
        out.append(line)
    return "\n".join(out)


class SphinxHabits(griffe.Extension):
    """Rewrites each docstring once the object tree is loaded (module doc)."""

    def on_object(self, *, obj: griffe.Object, loader: Any = None, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
