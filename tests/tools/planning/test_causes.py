"""A cause every option gives is found once (pure)."""

from __future__ import annotations

from tools.planning.causes import reason_text, shared_causes
from tools.planning.results import Infeasible

UNKNOWN = "no estimator knows workload.model='mine'"


def _item(partition: str, constraint: str, reason: str) -> Infeasible:
    return Infeasible(system="pitzer", partition=partition, constraint=constraint, reason=reason)


def test_an_estimator_refusal_every_estimated_option_got_is_one_cause() -> None:
    options = [
        _item("parallel", "nodes", "pitzer/parallel needs at least 2 nodes"),
        _item("serial", "estimator", UNKNOWN),
        _item("gpuserial", "estimator", UNKNOWN),
    ]
    assert shared_causes(options, feasible_count=0) == [UNKNOWN]
    assert reason_text(options[0]) == "needs at least 2 nodes"


def test_no_cause_when_something_runs_or_reasons_differ() -> None:
    same = [_item("a", "estimator", UNKNOWN), _item("b", "estimator", UNKNOWN)]
    assert shared_causes(same, feasible_count=1) == []
    mixed = [_item("a", "estimator", UNKNOWN), _item("b", "estimator", "other")]
    assert shared_causes(mixed, feasible_count=0) == []


def test_one_reason_for_every_option_is_the_cause_whatever_its_kind() -> None:
    options = [
        _item("a", "walltime", "pitzer/a: longer than 7 days"),
        _item("b", "walltime", "pitzer/b: longer than 7 days"),
    ]
    assert shared_causes(options, feasible_count=0) == ["longer than 7 days"]
