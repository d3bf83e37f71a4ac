"""The package's floor plan (docs/design.md, "Layout"): subpackages import only downwards, never in a cycle, and no
module reaches into another module's private names (perf/ and workflow/scripts/ included)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "wneurons"
# Lower floors first; a module may import its own subpackage and any lower floor, never a higher or equal one.
FLOORS = {"store": 0, "core": 1, "experiment": 1, "lm": 2, "report": 3, "jobs": 4, "api": 5, "cli": 5}


def _module_name(path: Path) -> str:
    parts = ("wneurons", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, str]]:
    """(module imported from, name) for every ``wneurons`` import of a file, wherever it stands (functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "wneurons":
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.split(".")[0] == "wneurons"]
    return found


def _target(module: str, name: str) -> str:
    """The module an import reaches: ``from wneurons.core import stats`` reaches wneurons.core.stats."""
    candidate = f"{module}.{name}"
    path = PACKAGE.joinpath(*candidate.split(".")[1:])
    return candidate if path.with_suffix(".py").exists() or (path / "__init__.py").exists() else module


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): {_target(m, n) for m, n in _imports(p)} - {_module_name(p)} for p in PACKAGE.rglob("*.py")}


def test_every_subpackage_is_on_a_floor():
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(FLOORS)
    assert not [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"], "modules belong in a subpackage"


def test_imports_run_downwards_only():
    against = []
    for module, targets in _graph().items():
        floor = module.split(".")[1] if module.count(".") else None
        for target in targets:
            to = target.split(".")[1] if target.count(".") else None
            if floor in FLOORS and to in FLOORS and to != floor and FLOORS[to] >= FLOORS[floor]:
                against.append(f"{module} -> {target}")
    assert not against, against


def test_no_import_cycle():
    graph, done, cycles = _graph(), set(), []

    def visit(module: str, path: list[str]) -> None:
        for target in graph.get(module, ()):
            if target in path:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in done:
                visit(target, [*path, target])
        done.add(module)

    for module in graph:
        if module not in done:
            visit(module, [module])
    assert not cycles, cycles


def test_no_private_name_crosses_a_module():
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "perf").glob("*.py"), *(ROOT / "workflow" / "scripts").glob("*.py")]
    private = [
        f"{path.relative_to(ROOT)}: {module}.{name}"
        for path in files
        for module, name in _imports(path)
        if name.startswith("_") and name != "__version__"
    ]
    assert not private, private
