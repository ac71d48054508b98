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


# -- rules inside tools/ (issue #40) -------------------------------------------------------

# Settings reach tools as arguments (rightsize.settings.Settings -> ChainConfig,
# ServerDeps, a script's own options), never from the environment: the rule holds for
# every module of tools/.


def _environment_reads(tree: ast.AST) -> list[str]:
    """``os.environ.get("RIGHTSIZE_...")``, ``os.environ["RIGHTSIZE_..."]``, ``os.getenv``,
    ``"RIGHTSIZE_..." in os.environ`` (any name not written out counts too)."""
    readers = {"os.environ.get", "os.getenv", "environ.get", "getenv", "os.environ.setdefault"}
    found = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and node.args:
            if ast.unparse(node.func) in readers:
                target = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in {"os.environ"}:
            target = node.slice
        elif isinstance(node, ast.Compare) and ast.unparse(node.comparators[-1]) in {
            "os.environ",
            "environ",
        }:
            target = node.left
        if target is None:
            continue
        text = ast.unparse(target)
        if "RIGHTSIZE" in text or not isinstance(target, ast.Constant):
            found.append(text)
    return found


def test_tools_take_settings_as_arguments_not_from_the_environment() -> None:
    for path in _modules("tools"):
        reads = _environment_reads(ast.parse(path.read_text(encoding="utf-8")))
        assert not reads, f"{path.relative_to(REPO)} reads {reads} from the environment"


def test_the_environment_rule_sees_every_way_of_reading_it() -> None:
    reads = _environment_reads(
        ast.parse(
            'os.environ.get("RIGHTSIZE_HOME"); os.getenv("RIGHTSIZE_X")\n'
            'os.environ["RIGHTSIZE_Y"]; os.environ.get(NAME); os.environ.get("PATH")\n'
            'if "RIGHTSIZE_Z" in os.environ: pass'
        )
    )
    assert sorted(reads) == [
        "'RIGHTSIZE_HOME'",
        "'RIGHTSIZE_X'",
        "'RIGHTSIZE_Y'",
        "'RIGHTSIZE_Z'",
        "NAME",
    ]


def test_tools_swap_no_module_class_and_test_no_type_by_its_name() -> None:
    for path in _modules("tools"):
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO)
        assert ".__class__ = " not in text, f"{where} swaps a module's class"
        assert "type(estimator).__name__" not in text, f"{where} tests a type by its name"
        assert ").__name__ ==" not in text, f"{where} tests a type by its name"


def test_a_process_keeps_no_configuration_a_later_caller_can_change() -> None:
    """``shared_chain`` gives a caller with other settings a chain of its own."""
    from tools.planning import service

    source = Path(service.__file__).read_text(encoding="utf-8")
    assert "chain.config = " not in source


# -- agents keep the decision loop (issue #40) ----------------------------------------------

# Fitting, saving and loading models is estimator work in tools/ (``tools.estimators
# .promoted``, ``tools.estimators.gpu.retrain``); an agent senses, decides and acts on
# what those return.
_MODEL_LIBRARIES = {"xgboost", "torch", "sklearn", "lightgbm"}
_MODEL_WORK_CALLS = {"fit", "save_model", "load_model", "write_text", "write_bytes"}


def _model_work(tree: ast.AST) -> list[str]:
    """Imports of model libraries, calls of ``.fit(``/``fit_*(``, and files written."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in _MODEL_LIBRARIES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in _MODEL_LIBRARIES:
                found.append(node.module)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _MODEL_WORK_CALLS or name.startswith("fit_"):
                found.append(f"{ast.unparse(func)}(...)")
    return found


def test_agents_fit_save_or_load_no_model_themselves() -> None:
    for path in _modules("agents"):
        work = _model_work(ast.parse(path.read_text(encoding="utf-8")))
        assert not work, f"{path.relative_to(REPO)} does estimator work: {work}"


def test_the_agents_rule_sees_fitting_and_writing() -> None:
    source = (
        "import xgboost\nfrom torch import nn\nmodel.fit(x)\nfit_correction(rows)\n"
        "path.write_text(s)\nplan(x)"
    )
    assert _model_work(ast.parse(source)) == [
        "xgboost",
        "torch",
        "model.fit(...)",
        "fit_correction(...)",
        "path.write_text(...)",
    ]
