"""Architecture checks: the stage layering holds, no files import each other in a circle (inside a stage too), every
module imports, every shipped YAML validates."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["preference_data", "reward_models", "align", "leaderboards"]  # a stage imports only earlier ones
GROUND = "prefalign"  # the ground floor: every stage may import it, it imports no stage
CLI = ROOT / "align" / "cli"  # the one place that sees every stage


def _modules() -> list[str]:
    names = []
    for pkg in [GROUND, *STAGES]:
        mod = importlib.import_module(pkg)
        names.append(pkg)
        names.extend(m.name for m in pkgutil.walk_packages(mod.__path__, prefix=pkg + "."))
    return names


def _module_files() -> dict[str, Path]:
    out = {}
    for pkg in [GROUND, *STAGES]:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _module_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports anywhere in its file (function-local imports and `TYPE_CHECKING`
    blocks included: a circle there is still two files that need each other)."""
    files = _module_files()

    def owner(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for n in names:
                target = owner(n)
                if target and target != mod:
                    edges.add(target)
        graph[mod] = edges
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_files_import_each_other_in_a_circle():
    circles = _circles(_module_graph())
    assert not circles, "import circles (each line: modules that need each other):\n" + "\n".join(map(str, circles))


def test_the_stages_import_each_other_in_no_circle():
    """At package level too: `align/cli` imports `leaderboards`, so `leaderboards` never imports `align` (policy
    benchmarks take generation and policy loading from the ground floor, the held-out suite from stage 1)."""
    packages: dict[str, set[str]] = {}
    for mod, edges in _module_graph().items():
        packages.setdefault(mod.split(".")[0], set()).update(e.split(".")[0] for e in edges)
    for p in packages:
        packages[p].discard(p)
    circles = _circles(packages)
    assert not circles, f"the stages import each other in a circle: {circles}"


def test_the_circle_check_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_no_stage_imports_a_later_stage():
    bad = []
    for i, pkg in enumerate(STAGES):
        later = set(STAGES[i + 1 :])
        for path in (ROOT / pkg).rglob("*.py"):
            if CLI in path.parents:
                continue
            for name in _imports(path) & later:
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "stage layering broken:\n" + "\n".join(bad)


def test_ground_floor_imports_no_stage():
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in (ROOT / GROUND).rglob("*.py")
        for name in _imports(path) & set(STAGES)
    ]
    assert not bad, "the ground floor must not import a stage:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", _modules())
def test_every_module_imports(name):
    importlib.import_module(name)


def test_every_shipped_yaml_validates():
    from align.cli.configs import validate_file

    files = sorted((ROOT / "configs").glob("*.yaml"))
    assert files, "configs/ has no YAML recipes"
    for f in files:
        validate_file(str(f))
