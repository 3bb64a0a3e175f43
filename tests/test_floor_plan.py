"""The floor plan: every module sits in one layer and imports only downward, never in a
loop. Read from the source with ``ast``; nothing is imported or run.

Layers, bottom to top (a layer may import its own modules and any layer below it; the
two layers of one floor do not import each other):

1. ground: names, constants, errors, configuration models, routing vocabulary, CCSIDs
2. MQ client: ``bridge.mq``
3. runtime: ``mqgather.runtime`` (Temporal connection, telemetry)
4. gather: ``workflows``, ``activities``
5. Temporal-facing bridge: ``bridge`` (identify, inbound, fanout)
6. processes: ``workers``  |  analytics: ``analytics``
7. CLI: ``mqgather.cli``
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("mqgather", "bridge", "workflows", "activities", "workers", "analytics")


@dataclass(frozen=True)
class Layer:
    """A layer: its modules are ``exact`` names or anything inside ``packages``."""

    name: str
    floor: int
    exact: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()


GROUND = (
    "mqgather",
    "mqgather.names",
    "mqgather.constants",
    "mqgather.errors",
    "mqgather.config",
    "mqgather.collector_config",
    "mqgather.limits",
    "mqgather.completion",
    "mqgather.routing",
    "mqgather.ccsid",
    "mqgather.secretfiles",
)
LAYERS = (
    Layer("ground", 1, exact=GROUND),
    Layer("MQ client", 2, packages=("bridge.mq",)),
    Layer("runtime", 3, packages=("mqgather.runtime",)),
    Layer("gather", 4, packages=("workflows", "activities")),
    Layer("bridge", 5, packages=("bridge",)),
    Layer("processes", 6, packages=("workers",)),
    Layer("analytics", 6, packages=("analytics",)),
    Layer("CLI", 7, packages=("mqgather.cli",)),
)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: Sequence[str]) -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


def imports_of(name: str, path: Path, modules: Iterable[str]) -> list[tuple[str, int]]:
    """The project modules ``name`` imports (anywhere in the file), with line numbers."""
    known = set(modules)
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        for target in targets:
            # `import a.b.c` names a.b.c; the closest module of the project is the target.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append((target, node.lineno))
    return out


def layer_of(module: str, layers: Sequence[Layer]) -> Layer | None:
    best: tuple[int, Layer] | None = None
    for layer in layers:
        if module in layer.exact:
            return layer
        for package in layer.packages:
            if (module == package or module.startswith(package + ".")) and (
                best is None or len(package) > best[0]
            ):
                best = (len(package), layer)
    return best[1] if best else None


def violations(root: Path, packages: Sequence[str], layers: Sequence[Layer]) -> list[str]:
    """Every upward or sideways import, unplaced module, importing package ``__init__``
    and import loop, each as one line naming the file, line and import."""
    modules = project_modules(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    problems = []
    for module, path in modules.items():
        here = layer_of(module, layers)
        where = path.relative_to(root)
        found = sorted(set(imports_of(module, path, modules)), key=lambda item: item[1])
        graph[module].update(target for target, _ in found)
        if here is None:
            problems.append(f"{where}: module {module} is in no layer")
            continue
        for target, line in found:
            there = layer_of(target, layers)
            if path.name == "__init__.py":
                problems.append(
                    f"{where}:{line}: package {module} imports {target}; a package's "
                    "__init__ runs before any of its modules, so it imports nothing"
                )
            elif there is None or there is here:
                continue
            elif there.floor > here.floor:
                problems.append(
                    f"{where}:{line}: {module} ({here.name}) imports {target} "
                    f"({there.name}), a higher layer"
                )
            elif there.floor == here.floor:
                problems.append(
                    f"{where}:{line}: {module} ({here.name}) imports {target} "
                    f"({there.name}), a layer beside it"
                )
    problems += [f"import loop: {' -> '.join(loop)}" for loop in loops(graph)]
    return problems


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (or a module
    importing itself), each closed on its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(_cycle(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    path, seen = [start], {start}
    node = start
    while True:
        nxt = min(n for n in graph[node] if n in component)
        path.append(nxt)
        if nxt in seen:
            return path[path.index(nxt) :]
        seen.add(nxt)
        node = nxt


# ---------------------------------------------------------------------- the plan


def test_every_import_points_down_and_none_loops():
    problems = violations(ROOT, PACKAGES, LAYERS)
    assert not problems, "\n".join(problems)


def test_every_package_is_measured():
    modules = project_modules(ROOT, PACKAGES)
    assert {"mqgather.cli.main", "bridge.mq.transport", "workflows.logic"} <= set(modules)
    assert len(modules) > 40


# ------------------------------------------------------- the checker catches them


def _tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


TOY_LAYERS = (
    Layer("low", 1, packages=("low",)),
    Layer("left", 2, packages=("left",)),
    Layer("right", 2, packages=("right",)),
    Layer("top", 3, packages=("top",)),
)


def test_checker_names_an_upward_import(tmp_path):
    _tree(tmp_path, {
        "low/__init__.py": "",
        "low/base.py": "def f():\n    from top.cli import main\n",
        "top/__init__.py": "",
        "top/cli.py": "from low.base import f\n",
    })  # fmt: skip
    problems = violations(tmp_path, ("low", "top"), TOY_LAYERS)
    assert any(
        p.startswith("low/base.py:2: low.base (low) imports top.cli (top), a higher layer")
        for p in problems
    ), problems


def test_checker_names_a_sideways_import_and_a_loop(tmp_path):
    _tree(tmp_path, {
        "left/__init__.py": "",
        "left/a.py": "from . import b\n",
        "left/b.py": "import left.a\nfrom right import c\n",
        "right/__init__.py": "",
        "right/c.py": "",
    })  # fmt: skip
    problems = violations(tmp_path, ("left", "right"), TOY_LAYERS)
    assert "left/b.py:2: left.b (left) imports right.c (right), a layer beside it" in problems
    assert "import loop: left.a -> left.b -> left.a" in problems


def test_checker_names_an_importing_package_init_and_an_unplaced_module(tmp_path):
    _tree(tmp_path, {
        "low/__init__.py": "from low import base\n",
        "low/base.py": "",
        "stray/__init__.py": "",
    })  # fmt: skip
    problems = violations(tmp_path, ("low", "stray"), TOY_LAYERS)
    assert any(p.startswith("low/__init__.py:1: package low imports low.base") for p in problems)
    assert "stray/__init__.py: module stray is in no layer" in problems


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("mqgather", "ground"),
        ("mqgather.config", "ground"),
        ("bridge.mq.local_qm", "MQ client"),
        ("mqgather.runtime.temporal", "runtime"),
        ("activities.mq", "gather"),
        ("bridge.inbound", "bridge"),
        ("workers.demo.stack", "processes"),
        ("mqgather.cli.main", "CLI"),
    ],
)
def test_layer_of(module, layer):
    found = layer_of(module, LAYERS)
    assert found is not None and found.name == layer
