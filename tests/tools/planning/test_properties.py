"""Properties over random workloads and the whole seeded catalog (119 partitions).

- no emitted plan breaks a partition limit (checked independently of the builder, and
  with the actuators' own ``violations``);
- every infeasible option has a reason, and every option is either planned or explained;
- cascade segments each fit the partition and their work adds up to the planned run;
- charges are never negative and the expected charge never exceeds the maximum.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge_base.catalog import Catalog
from knowledge_base.workload import WorkloadSpec
from tools.actuators.policy import violations
from tools.planning.builder import BuildContext, PlanningConfig, job_request
from tools.planning.cost import DollarRates
from tools.planning.selector import select
from tools.planning.whatif import enumerate_candidates, what_if
from tools.planning.zoo import ZOO

NOW = datetime(2024, 4, 16, 14, 0, tzinfo=UTC)
SETTINGS = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

_goals = st.fixed_dictionaries(
    {},
    optional={
        "gpu_only": st.booleans(),
        "objective": st.sampled_from(["fastest", "cheapest", "earliest_finish", "balanced"]),
    },
)
_dnn = st.fixed_dictionaries(
    {
        "kind": st.just("dnn_training"),
        "model": st.sampled_from([f.name for f in ZOO] + ["ResNet-50", "BERT"]),
        "dataset_samples": st.integers(1, 2_000_000),
        "epochs": st.integers(1, 300),
        "batch_sizes": st.lists(st.integers(1, 2048), min_size=1, max_size=3, unique=True),
    },
    optional={
        "precision": st.sampled_from(["fp32", "amp", "bf16"]),
        "optimizer": st.sampled_from(["sgd", "adam"]),
        "checkpointable": st.booleans(),
        "max_nodes": st.integers(1, 8),
    },
)
_generic = st.fixed_dictionaries(
    {
        "kind": st.just("generic"),
        "application": st.just("./a.out"),
        "walltime_s": st.integers(60, 40 * 86400),
    },
    optional={
        "nodes": st.integers(1, 16),
        "cores": st.integers(1, 512),
        "gpus": st.integers(0, 8),
        "memory_mb": st.integers(1, 1_000_000),
    },
)
_specs = st.builds(
    lambda workload, goals: WorkloadSpec.model_validate(
        {"name": "prop", "user": "u", "account": "acct", "workload": workload, "goals": goals}
    ),
    st.one_of(_dnn, _generic),
    _goals,
)


def _context(spec: WorkloadSpec) -> BuildContext:
    return BuildContext(spec=spec, config=PlanningConfig(), rates=DollarRates(usd_per_su=1.0))


@SETTINGS
@given(spec=_specs)
def test_no_emitted_plan_breaks_a_partition_limit(spec: WorkloadSpec, catalog: Catalog) -> None:
    whatif = what_if(spec, catalog, _context(spec))
    for plan in whatif.feasible:
        system = catalog.system(plan.option.system)
        partition = system.partition(plan.option.partition)
        node_type = system.node_type_of(partition)
        option = plan.option
        assert max(partition.min_nodes, 1) <= option.nodes <= partition.max_nodes
        assert partition.min_cores_per_node <= option.cores_per_node <= partition.max_cores_per_node
        if node_type is not None and node_type.cores is not None:
            assert option.cores_per_node <= node_type.cores
        assert partition.min_memory_mb <= option.memory_mb <= partition.max_memory_mb
        assert option.gpus_per_node <= partition.gpus_per_node
        for walltime_s in plan.segment_walltimes_s:
            assert partition.min_minutes * 60 <= walltime_s <= partition.max_minutes * 60
            request = job_request(spec, option, plan.qos, walltime_s)
            assert violations(request, system) == []
        if plan.cost is not None and plan.cost_max is not None:
            assert 0 <= plan.cost.amount <= plan.cost_max.amount + 1e-9


@SETTINGS
@given(spec=_specs)
def test_every_option_is_planned_or_explained(spec: WorkloadSpec, catalog: Catalog) -> None:
    options = sum(1 for _ in enumerate_candidates(spec, catalog))
    whatif = what_if(spec, catalog, _context(spec))
    assert len(whatif.feasible) + len(whatif.infeasible) == options
    for item in whatif.infeasible:
        assert item.reason.strip() and item.constraint
        assert item.shortfall is None or item.shortfall >= 0
    selection = select(whatif, spec, objective=None, now=NOW)
    if selection.recommended is None:
        assert selection.notes and selection.notes[0].startswith("no plan")
    else:
        assert selection.ranked[0] is selection.recommended


@SETTINGS
@given(spec=_specs)
def test_cascade_segments_fit_and_add_up_to_the_run(spec: WorkloadSpec, catalog: Catalog) -> None:
    config = PlanningConfig()
    for plan in what_if(spec, catalog, _context(spec)).feasible:
        partition = catalog.system(plan.option.system).partition(plan.option.partition)
        planned = max(
            math.ceil(plan.estimate.runtime_s.high * config.safety_factor),
            partition.min_minutes * 60,
            60,
        )
        if planned > partition.max_minutes * 60 and len(plan.segment_work_s) == 1:
            # a job that cannot checkpoint, whose margin (not its point) is over the limit
            assert list(plan.segment_work_s) == [partition.max_minutes * 60]
            assert plan.estimate.runtime_s.point <= partition.max_minutes * 60
            assert any("asks for the limit" in note for note in plan.notes)
            continue
        assert sum(plan.segment_work_s) == planned
        cascaded = len(plan.segment_walltimes_s) > 1
        for work, walltime in zip(plan.segment_work_s, plan.segment_walltimes_s, strict=True):
            assert walltime <= partition.max_minutes * 60
            assert walltime >= work + (config.checkpoint_overhead_s if cascaded else 0)
        if cascaded:
            workload: Any = spec.workload
            assert workload.checkpointable
