"""The what-if analyzer and seed 001's worked example, under the example Pitzer queue."""

from __future__ import annotations

from datetime import datetime

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import Objective, WorkloadSpec
from tests.tools.planning.conftest import spec_with
from tools.planning.builder import BuildContext, PlanningConfig
from tools.planning.cost import DollarRates
from tools.planning.queue import QueueModel
from tools.planning.results import Infeasible
from tools.planning.selector import plan
from tools.planning.whatif import enumerate_candidates, what_if


def _context(spec: WorkloadSpec, queue: QueueModel | None = None) -> BuildContext:
    return BuildContext(spec=spec, config=PlanningConfig(), rates=DollarRates(), queue=queue)


def test_seed_001_gpu_is_fastest_but_the_cpu_node_finishes_first(
    resnet_spec: WorkloadSpec, catalog: Catalog, pitzer_queue: QueueModel, snapshot_time: datetime
) -> None:
    """Seed 001: ideal GPU plan ~28 h (26 h of wait); availability-based CPU plan ~9 h."""
    selection = plan(resnet_spec, catalog, now=snapshot_time, queue=pitzer_queue)
    fastest, earliest = selection.best["fastest"], selection.best["earliest_finish"]
    assert fastest is not None and earliest is not None
    assert fastest.option.gpus_per_node > 0
    assert fastest.expected_wait_s is not None and fastest.expected_wait_s > 20 * 3600
    assert earliest.option.gpus_per_node == 0
    assert earliest.expected_wait_s == 0.0
    assert 6 * 3600 < earliest.expected_finish_s < 11 * 3600
    assert selection.recommended is earliest  # the example's objective is earliest_finish


def test_both_batch_sizes_fit_a_32gb_v100(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    """Seed 001 says only batch 32 fits; Gavel measured batch 128 running on a 16 GB P100."""
    selection = plan(resnet_spec, catalog, now=snapshot_time)
    batches = {p.option.batch_size for p in selection.ranked if p.option.partition == "gpuserial"}
    assert batches == {32, 64}


def test_every_partition_in_scope_is_either_planned_or_explained(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    whatif = what_if(resnet_spec, catalog, _context(resnet_spec))
    seen = {p.option.partition for p in whatif.feasible} | {i.partition for i in whatif.infeasible}
    in_scope = {
        p.name
        for p in catalog.system("pitzer").partitions
        if not p.name.startswith("condo-") and p.name != "systems"
    }
    assert seen == in_scope
    assert all(i.reason for i in whatif.infeasible)


def test_partitions_outside_the_goals_are_not_options(
    resnet_spec: WorkloadSpec, catalog: Catalog
) -> None:
    spec = spec_with(resnet_spec, goals__partitions=["gpu*"], goals__exclude_partitions=["*quad"])
    names = {
        c.partition.name
        for c in enumerate_candidates(spec, catalog)
        if not isinstance(c, Infeasible)
    }
    assert names and all(n.startswith("gpu") and not n.endswith("quad") for n in names)


def test_gpu_only_explains_every_cpu_partition(resnet_spec: WorkloadSpec, catalog: Catalog) -> None:
    spec = spec_with(resnet_spec, goals__gpu_only=True)
    whatif = what_if(spec, catalog, _context(spec))
    assert all(p.option.gpus_per_node for p in whatif.feasible)
    goals = [i for i in whatif.infeasible if i.constraint == "goals"]
    assert goals and all("gpu_only" in i.reason for i in goals)


def test_a_workload_that_cannot_checkpoint_gets_no_cascade(
    resnet_spec: WorkloadSpec, catalog: Catalog
) -> None:
    spec = spec_with(resnet_spec, workload__checkpointable=False, goals__cpu_only=True)
    whatif = what_if(spec, catalog, _context(spec))
    assert all(len(p.segment_walltimes_s) == 1 for p in whatif.feasible)
    debug = [i for i in whatif.infeasible if i.partition == "debug"]
    assert debug and "cannot checkpoint" in debug[0].reason
    assert debug[0].shortfall is not None and debug[0].shortfall > 1


def test_a_checkpointing_workload_cascades_through_the_debug_queue(
    resnet_spec: WorkloadSpec, catalog: Catalog
) -> None:
    whatif = what_if(resnet_spec, catalog, _context(resnet_spec))
    debug = [p for p in whatif.feasible if p.option.partition == "debug"]
    assert debug
    for p in debug:
        assert len(p.segment_walltimes_s) > 1
        assert max(p.segment_walltimes_s) <= 60 * 60
        assert p.expected_segments <= len(p.segment_walltimes_s)


def test_an_unknown_system_in_the_goals_names_the_field(
    resnet_spec: WorkloadSpec, catalog: Catalog
) -> None:
    spec = spec_with(resnet_spec, goals__systems=["summit"])
    with pytest.raises(InvalidInputError) as caught:
        what_if(spec, catalog, _context(spec))
    assert caught.value.field == "goals.systems[0]"
    assert caught.value.value == "summit"


def test_objectives_reorder_the_same_plans(
    resnet_spec: WorkloadSpec, catalog: Catalog, pitzer_queue: QueueModel, snapshot_time: datetime
) -> None:
    orders = {
        objective: plan(
            resnet_spec, catalog, now=snapshot_time, queue=pitzer_queue, objective=objective
        ).ranked
        for objective in (Objective.FASTEST, Objective.EARLIEST_FINISH, Objective.BALANCED)
    }
    fastest = orders[Objective.FASTEST]
    assert [p.expected_run_s for p in fastest] == sorted(p.expected_run_s for p in fastest)
    earliest = orders[Objective.EARLIEST_FINISH]
    known = [p.expected_finish_s for p in earliest if p.expected_wait_s is not None]
    assert known == sorted(known)
    assert {id(p) for p in orders[Objective.BALANCED]} != set()
    assert len({len(o) for o in orders.values()}) == 1


def test_a_generic_job_is_laid_out_on_each_partitions_nodes(catalog: Catalog) -> None:
    spec = WorkloadSpec.model_validate(
        {
            "name": "lammps",
            "user": "u",
            "workload": {"kind": "generic", "application": "lmp", "cores": 112,
                         "walltime_s": "6 h", "memory_mb": "64 GB"},
            "goals": {"systems": ["owens", "frontera"]},
        }
    )  # fmt: skip
    whatif = what_if(spec, catalog, _context(spec))
    shapes = {(p.option.system, p.option.nodes, p.option.cores_per_node) for p in whatif.feasible}
    assert ("owens", 4, 28) in shapes
    assert ("frontera", 2, 56) in shapes
    assert all(p.estimate.estimator_id == "user-guess-fallback" for p in whatif.feasible)


def test_a_plan_becomes_the_knowledge_bases_plan_record(
    resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime
) -> None:
    chosen = plan(resnet_spec, catalog, now=snapshot_time).recommended
    assert chosen is not None
    record = chosen.to_record(resnet_spec, "plan-1", reason="earliest finish")
    assert (record.id, record.user, record.option) == ("plan-1", "alice", chosen.option)
    assert record.expected_cost is not None and chosen.cost is not None
    assert record.expected_cost.amount == chosen.cost.amount
    assert [s.walltime_s for s in record.segments] == chosen.segment_walltimes_s


def test_control_characters_in_the_account_are_refused_by_name(
    resnet_spec: WorkloadSpec, catalog: Catalog
) -> None:
    spec = resnet_spec.model_copy(update={"account": "PAS1\n#SBATCH --qos=high"})
    with pytest.raises(InvalidInputError) as caught:
        what_if(spec, catalog, _context(spec))
    assert caught.value.field == "account"


@pytest.mark.parametrize(
    ("shape", "words"),
    [([407, 574, 574], "3 input channels"), ([5], "(channels, height, width)")],
)
def test_an_input_a_zoo_model_cannot_take_is_refused_by_name(
    resnet_spec: WorkloadSpec, catalog: Catalog, shape: list[int], words: str
) -> None:
    """Before, ResNet-50 at [407, 574, 574] was traced and planned as 3 x 574 x 574 (and
    the MCP fuzz spent its time tracing such shapes), at [5] as its reference input."""
    spec = spec_with(resnet_spec, workload__input_shape=shape)
    with pytest.raises(InvalidInputError, match=words) as caught:
        what_if(spec, catalog, _context(spec))
    assert caught.value.field == "workload.input_shape" and caught.value.value == shape
    bert = spec_with(resnet_spec, workload__model="bert_base", workload__input_shape=[3, 64, 64])
    with pytest.raises(InvalidInputError, match=r"\(tokens,\)"):
        what_if(bert, catalog, _context(bert))
    for fine in ([3, 448, 448], []):  # another size of the same input, or the reference
        what_if(spec_with(resnet_spec, workload__input_shape=fine), catalog, _context(spec))
