"""``tools.estimators`` imports nothing itself: planning a DNN never loads XGBoost."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import tools.estimators


def test_the_dnn_planner_does_not_load_the_history_estimator_or_xgboost() -> None:
    code = (
        "import sys, tools.estimators.cpu, tools.planning.service\n"
        "print(sorted(m for m in ('xgboost', 'tools.estimators.history.estimator', "
        "'tools.estimators.history.replay') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_package_exports_nothing_and_its_submodules_are_modules() -> None:
    """No module-class swap: ``tools.estimators.history.replay`` is the module Python binds."""
    module = importlib.import_module("tools.estimators.history.replay")

    assert tools.estimators.__all__ == []
    assert tools.estimators.history.replay is module
    assert type(tools.estimators) is type(importlib)  # a plain module
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = tools.estimators.no_such_thing  # type: ignore[attr-defined]
