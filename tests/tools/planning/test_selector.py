"""Hard constraints and impossible requests: no plan, and the reasons, closest first."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import ResourceEstimate
from knowledge_base.workload import Objective, WorkloadSpec
from tests.tools.planning.conftest import spec_with
from tools.planning.analytic import AnalyticDNNEstimator
from tools.planning.cost import DollarRates
from tools.planning.estimation import Candidate, NoEstimate, Workload
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


class _GpuModel:
    """Answers GPU options only (as the per-operator GPU model does), with the analytic
    numbers under its own id: what is checked is the note, not the numbers."""

    estimator_id = "gpu-model"

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not candidate.gpus_per_node:
            return NoEstimate("not a GPU option")
        answer = AnalyticDNNEstimator().estimate(workload, candidate)
        if isinstance(answer, NoEstimate):
            return answer
        return answer.model_copy(update={"estimator_id": "gpu-model", "label": "a GPU model"})


def test_the_analytic_note_says_which_options_it_estimated(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    """Before, the note said the fallback is off by 28% on Gavel's GPUs while every GPU
    option came from another model."""
    mixed = plan(
        resnet_spec, catalog, now=snapshot_time, estimators=[_GpuModel(), AnalyticDNNEstimator()]
    )
    cpu = sum(1 for p in mixed.ranked if not p.option.gpus_per_node)
    gpu = len(mixed.ranked) - cpu
    assert cpu and gpu
    [note] = [n for n in mixed.notes if "analytic fallback" in n]
    assert note.startswith(
        f"estimates from the analytic fallback (untrained) for {cpu} CPU-only options "
        f"(of {len(mixed.ranked)}):"
    )
    assert "Gavel" not in note and "CPU efficiency" in note
    assert note.endswith(f"the other {gpu} from gpu-model")

    alone = plan(resnet_spec, catalog, now=snapshot_time, estimators=[AnalyticDNNEstimator()])
    [note] = [n for n in alone.notes if "analytic fallback" in n]
    cpu = sum(1 for p in alone.ranked if not p.option.gpus_per_node)
    everything = (
        f"all {len(alone.ranked)} options ({cpu} CPU-only and {len(alone.ranked) - cpu} GPU)"
    )
    assert note.startswith(f"estimates from the analytic fallback (untrained) for {everything}:")
    assert "Gavel" in note and "CPU efficiency" in note and "the other" not in note
