"""``tools.estimators`` loads its submodules on use: planning a DNN never loads XGBoost."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import tools.estimators


def test_the_dnn_planner_does_not_load_the_history_estimator_or_xgboost() -> None:
    code = (
        "import sys, tools.estimators.dnn, tools.planning.service\n"
        "print(sorted(m for m in ('xgboost', 'tools.estimators.history', "
        "'tools.estimators.replay') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_public_names_still_resolve_from_their_submodules() -> None:
    from tools.estimators.baselines import LastTwo
    from tools.estimators.history import HistoryEstimator

    assert tools.estimators.LastTwo is LastTwo
    assert tools.estimators.HistoryEstimator is HistoryEstimator
    for name in tools.estimators.__all__:
        assert getattr(tools.estimators, name) is not None


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'no_such_thing'"):
        _ = tools.estimators.no_such_thing


def test_replay_is_the_function_even_after_its_submodule_is_imported() -> None:
    module = importlib.import_module("tools.estimators.replay")

    assert tools.estimators.replay is module.replay
    assert callable(tools.estimators.replay)
