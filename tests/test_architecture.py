"""The import graph points one way, and every ``__all__`` names what its module defines."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A package may import only the packages listed for it (and itself, and third parties).
ALLOWED = {
    "knowledge_base": set(),
    "tools": {"knowledge_base"},
    "agents": {"knowledge_base", "tools"},
    "simulations": {"knowledge_base", "tools", "agents"},
    "mcp_server": {"knowledge_base", "tools", "agents"},
}
OURS = {"knowledge_base", "tools", "agents", "simulations", "mcp_server", "rightsize"}


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below_it(package: str) -> None:
    for path in _modules(package):
        wrong = _imported_packages(path) - ALLOWED[package] - {package}
        assert not wrong, f"{path.relative_to(REPO)} imports {sorted(wrong)}"


def _public_modules() -> list[str]:
    names = []
    for package in sorted(OURS):
        for path in _modules(package):
            if path.name == "__main__.py":
                continue
            parts = path.relative_to(REPO).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("module_name", _public_modules())
def test_all_names_exist_in_their_module(module_name: str) -> None:
    module = importlib.import_module(module_name)
    for name in getattr(module, "__all__", []):
        assert hasattr(module, name), f"{module_name}.__all__ lists missing {name!r}"
