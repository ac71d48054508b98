"""Rendering plans: golden sbatch scripts and Tapis requests, one per job of a cascade.

Golden files live in ``golden/``; after a deliberate change, regenerate them with
``RIGHTSIZE_UPDATE_GOLDEN=1 pytest tests/tools/planning/test_render.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.workload import Objective, WorkloadSpec
from tools.actuators.policy import violations
from tools.planning.queue import QueueModel
from tools.planning.render import job_requests, sbatch_scripts, tapis_requests
from tools.planning.results import PlannedOption
from tools.planning.selector import plan

GOLDEN = Path(__file__).parent / "golden"


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("RIGHTSIZE_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from its golden file"


@pytest.fixture
def cheapest(
    resnet_spec: WorkloadSpec, catalog: Catalog, pitzer_queue: QueueModel, snapshot_time: datetime
) -> PlannedOption:
    selection = plan(
        resnet_spec, catalog, now=snapshot_time, queue=pitzer_queue, objective=Objective.CHEAPEST
    )
    assert selection.recommended is not None
    return selection.recommended


@pytest.fixture
def cascade(resnet_spec: WorkloadSpec, catalog: Catalog, snapshot_time: datetime) -> PlannedOption:
    selection = plan(resnet_spec, catalog, now=snapshot_time)
    return next(
        p for p in selection.ranked if p.option.partition == "debug" and p.option.batch_size == 64
    )


def test_the_cheapest_seed_001_plan_renders_its_golden_script(
    cheapest: PlannedOption, resnet_spec: WorkloadSpec
) -> None:
    [script] = sbatch_scripts(cheapest, resnet_spec, plan_id="plan-001")
    _golden("resnet50_cheapest.sbatch", script)


def test_a_cascade_renders_one_script_per_segment(
    cascade: PlannedOption, resnet_spec: WorkloadSpec
) -> None:
    scripts = sbatch_scripts(cascade, resnet_spec)
    assert len(scripts) == len(cascade.segment_walltimes_s) > 1
    _golden("resnet50_debug_cascade_first.sbatch", scripts[0])
    _golden("resnet50_debug_cascade_last.sbatch", scripts[-1])


def test_rendered_jobs_pass_the_executors_own_check(
    cascade: PlannedOption, resnet_spec: WorkloadSpec, catalog: Catalog
) -> None:
    for request in job_requests(cascade, resnet_spec):
        assert violations(request, catalog.system("pitzer")) == []
        assert request.environment["RIGHTSIZE_SEGMENTS"] == str(len(cascade.segment_walltimes_s))


def test_the_tapis_request_matches_its_golden_file(
    cheapest: PlannedOption, resnet_spec: WorkloadSpec
) -> None:
    [body] = tapis_requests(
        cheapest,
        resnet_spec,
        exec_system_id="osc-pitzer",
        app_id="rightsize-run",
        app_version="1.0",
        plan_id="plan-001",
    )
    assert body["execSystemLogicalQueue"] == cheapest.option.partition
    assert body["maxMinutes"] == -(-cheapest.option.walltime_s // 60)
    _golden("resnet50_cheapest.tapis.json", json.dumps(body, indent=2, sort_keys=True) + "\n")
