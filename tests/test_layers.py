"""The package's layers point one way (spec -> data/models -> training -> search ->
selection -> compression -> tracking/registry -> report -> pipeline -> nightly -> CLI,
with the cluster layer below search and selection), ``automl/`` has no import cycle, and
``automl.spec`` imports neither torch nor ray. Imports inside functions count too."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO

PKG = REPO / "automl"
#: each top-level module or subpackage of automl and its layer; an import may only point
#: to the same layer or a lower one
LAYER = {
    "errors": 0, "_redact": 0, "_io": 0, "_yaml": 0, "_lazy": 0, "rundir": 0, "_progress": 0,
    "_interrupt": 0,
    "spec": 1,
    "space": 2, "data": 2, "models": 2, "task": 2,
    "parallel": 3, "train": 3, "cluster": 3, "determinism": 3,
    "search": 4,
    "selection": 5,
    "compress": 6,
    "tracking": 7, "monitoring": 7, "registry": 7, "publish": 7, "card": 7,
    "report": 8, "dashboard": 8,
    "pipeline": 9, "reproduce": 9, "budget": 9, "prepare": 9,
    "nightly": 10,
    "jobs": 11, "_cli_jobs": 11, "cli": 11, "api": 11, "__main__": 11, "__init__": 11,
}


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # ``from automl.x import y``: the submodule y when it is one, else x
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods
                         else node.module for a in node.names]
            else:
                continue
            for n in names:
                target = resolve(n) if n.startswith("automl") else None
                if target and target != m:
                    graph[m].add(target)
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYER[parts[1] if len(parts) > 1 else "__init__"]


def test_every_module_has_a_layer():
    missing = {m.split(".")[1] for m in _modules() if "." in m} - set(LAYER)
    assert not missing, f"give these a layer in LAYER: {sorted(missing)}"


def test_imports_point_down_the_layers():
    upward = [f"{a} -> {b}" for a, targets in _graph().items() for b in targets
              if _layer(b) > _layer(a)]
    assert not upward, "imports that point up a layer:\n" + "\n".join(sorted(upward))


def test_no_import_cycle():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_spec_imports_neither_torch_nor_ray():
    code = ("import sys, automl.spec; "
            "print(sorted(m for m in ('torch', 'ray', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
