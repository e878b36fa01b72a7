"""Architecture checks: the stage layering holds, every module imports, every shipped YAML validates."""

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
