"""Hard constraints and impossible requests: no plan, and the reasons, closest first."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import Objective, WorkloadSpec
from tests.tools.planning.conftest import spec_with
from tools.planning.cost import DollarRates
from tools.planning.queue import QueueModel
from tools.planning.selector import Selection, plan


def _shortfalls(selection: Selection, constraint: str) -> list[float]:
    values = [i.shortfall for i in selection.infeasible if i.constraint == constraint]
    assert all(v is not None for v in values)
    return [v for v in values if v is not None]


def test_more_gpu_memory_than_any_node_has_gives_no_plan_and_says_why(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    spec = spec_with(
        resnet_spec, workload__batch_sizes=[4096], goals__gpu_only=True, goals__systems=None
    )
    selection = plan(spec, catalog, now=snapshot_time)
    assert selection.recommended is None and selection.ranked == []
    gpu = [i for i in selection.infeasible if i.constraint == "gpu_memory"]
    assert gpu
    assert "GB of GPU memory" in gpu[0].reason and " has " in gpu[0].reason
    ranked = _shortfalls(selection, "gpu_memory")
    assert ranked == sorted(ranked)  # closest first
    # the closest is the biggest GPU: an 80 GB A100/H100 spread over the most GPUs
    assert "80 GB" in gpu[0].reason
    assert selection.notes[0].startswith("no plan")


def test_a_deadline_nothing_can_meet_gives_no_plan_ranked_by_lateness(
    resnet_spec: WorkloadSpec, catalog: Catalog, pitzer_queue: QueueModel, snapshot_time: datetime
) -> None:
    deadline = snapshot_time + timedelta(minutes=10)
    spec = spec_with(resnet_spec, goals__deadline=deadline.isoformat())
    selection = plan(spec, catalog, now=snapshot_time, queue=pitzer_queue)
    assert selection.recommended is None
    late = _shortfalls(selection, "deadline")
    assert late and late == sorted(late)
    closest = next(i for i in selection.infeasible if i.constraint == "deadline")
    assert "the deadline is in 0.2 h" in closest.reason


def test_a_reachable_deadline_keeps_only_plans_that_meet_it(
    resnet_spec: WorkloadSpec, catalog: Catalog, pitzer_queue: QueueModel, snapshot_time: datetime
) -> None:
    deadline = snapshot_time + timedelta(hours=24)
    spec = spec_with(resnet_spec, goals__deadline=deadline.isoformat())
    selection = plan(
        spec, catalog, now=snapshot_time, queue=pitzer_queue, objective=Objective.DEADLINE
    )
    assert selection.recommended is not None
    assert all(p.finish_high_s <= 24 * 3600 for p in selection.ranked)
    assert any(i.constraint == "deadline" for i in selection.infeasible)  # the GPU queue


def test_a_budget_below_the_cheapest_plan_gives_no_plan_ranked_by_overspend(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    spec = spec_with(resnet_spec, goals__budget=1.0, goals__budget_unit="core-hours")
    selection = plan(spec, catalog, now=snapshot_time)
    assert selection.recommended is None
    over = _shortfalls(selection, "budget")
    assert over and over == sorted(over)
    first = next(i for i in selection.infeasible if i.constraint == "budget")
    assert "the budget is 1.00 core-hour" in first.reason


def test_a_budget_in_su_cannot_vouch_for_core_hours(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    spec = spec_with(resnet_spec, goals__budget=1e9, goals__budget_unit="SU")
    selection = plan(spec, catalog, now=snapshot_time)
    assert selection.recommended is None
    assert any("the budget is in SU" in i.reason for i in selection.infeasible)


def test_a_dollar_budget_uses_only_configured_rates(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    spec = spec_with(
        resnet_spec, goals__budget=10.0, goals__budget_unit="USD", goals__cpu_only=True
    )
    unpriced = plan(spec, catalog, now=snapshot_time)
    assert unpriced.recommended is None
    priced = plan(spec, catalog, now=snapshot_time, rates=DollarRates(usd_per_core_hour=0.005))
    assert priced.recommended is not None
    assert priced.recommended.cost_usd_max is not None
    assert priced.recommended.cost_usd_max <= 10.0
    assert any("dollar figures are assumptions" in n for n in priced.notes)


def test_the_deadline_objective_needs_a_deadline(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        plan(resnet_spec, catalog, now=snapshot_time, objective=Objective.DEADLINE)
    assert caught.value.field == "goals.deadline"


def test_cheapest_never_compares_su_with_core_hours_without_dollars(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    spec = spec_with(resnet_spec, goals__systems=["pitzer", "frontera"], goals__cpu_only=True)
    selection = plan(spec, catalog, now=snapshot_time, objective=Objective.CHEAPEST)
    assert {p.cost.unit for p in selection.ranked if p.cost} == {"SU", "core-hour"}
    assert any("cannot be compared without dollar rates" in n for n in selection.notes)
    cheapest_su = min(p.cost.amount for p in selection.ranked if p.cost and p.cost.unit == "SU")
    cheapest_ch = min(
        p.cost.amount for p in selection.ranked if p.cost and p.cost.unit == "core-hour"
    )
    assert selection.recommended is not None and selection.recommended.cost is not None
    assert selection.recommended.cost.amount in (cheapest_su, cheapest_ch)
