"""Data snapshots: every run records its data's sha256, row count and class counts
(``summary.json: data``); a run that builds on an earlier one (warm start, champion)
says what changed since. Pure functions on ``Dataset.describe()`` dicts."""

from __future__ import annotations

from typing import Any

from automl.errors import cut_list


def data_change(before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any] | None:
    """What changed between two data descriptions (``Dataset.describe()``; ``before`` may
    hold only ``sha256``, as a registry lineage does).

    Returns:
        None when ``before`` is unknown; else ``{"changed": bool, "sha256": [before,
        after], "rows": [before, after] (None when unknown), "classes_added",
        "classes_removed", "class_counts": {class: [before, after]} for classes whose
        count changed, "line": one sentence}``.
    """
    if not before or not before.get("sha256"):
        return None
    old_sha, new_sha = before.get("sha256"), after.get("sha256")
    rows = [before.get("rows"), after.get("rows")]
    old_counts = before.get("class_counts") or {}
    new_counts = after.get("class_counts") or {}
    added = sorted(set(new_counts) - set(old_counts)) if old_counts else []
    removed = sorted(set(old_counts) - set(new_counts)) if old_counts else []
    moved = {c: [old_counts.get(c, 0), new_counts.get(c, 0)]
             for c in sorted(set(old_counts) | set(new_counts))
             if old_counts and old_counts.get(c, 0) != new_counts.get(c, 0)}
    changed = old_sha != new_sha
    if not changed:
        line = f"data unchanged (sha256 {_short(new_sha)}, {after.get('rows')} rows)"
    else:
        parts = [f"sha256 {_short(old_sha)}→{_short(new_sha)}"]
        if rows[0] is not None:
            parts.append(f"rows {rows[0]}→{rows[1]}")
        if added:
            parts.append(f"new classes {cut_list(added)}")
        if removed:
            parts.append(f"classes gone {cut_list(removed)}")
        shifts = [f"{c} {a}→{b}" for c, (a, b) in moved.items()
                  if c not in added and c not in removed]
        if shifts:
            parts.append("class counts " + ", ".join(shifts[:6])
                         + (f" (+{len(shifts) - 6} more)" if len(shifts) > 6 else ""))
        line = "data changed: " + ", ".join(parts)
    return {"changed": changed, "sha256": [old_sha, new_sha], "rows": rows,
            "classes_added": added, "classes_removed": removed, "class_counts": moved,
            "line": line}


def _short(sha: str | None) -> str:
    return (sha or "?")[:12]
