"""Adding GPUs must pay (issue #19 item 4): options past the point where an added GPU
gives under 70% of its share of speedup are left out, for every objective."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from knowledge_base.catalog import Catalog
from knowledge_base.workload import Objective
from tools.planning.builder import PlanningConfig
from tools.planning.gpu_scaling import gpus
from tools.planning.selector import plan
from tools.planning.workload_files import parse_workload

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _spec(model: str, samples: int, epochs: int) -> Any:
    document = {
        "name": "scaling", "user": "alice",
        "workload": {"kind": "dnn_training", "model": model, "dataset_samples": samples,
                     "epochs": epochs, "batch_sizes": [64]},
        "goals": {"systems": ["pitzer"], "gpu_only": True},
    }  # fmt: skip
    return parse_workload(document, "test")


def test_a_small_job_gets_one_gpu_whatever_the_objective(catalog: Catalog) -> None:
    spec = _spec("transformer", 2_000, 1)  # start-up dominates: more GPUs cannot help
    for objective in (Objective.EARLIEST_FINISH, Objective.FASTEST, Objective.BALANCED):
        selection = plan(spec, catalog, now=NOW, objective=objective)
        assert selection.recommended is not None
        assert gpus(selection.recommended) == 1, objective
    left_out = [i for i in selection.infeasible if i.constraint == "gpu_efficiency"]
    assert left_out and "efficiency" in left_out[0].reason
    assert any("PlanningConfig.gpu_efficiency" in n for n in selection.notes)


def test_every_kept_step_pays_and_no_limit_brings_the_gpus_back(catalog: Catalog) -> None:
    spec = _spec("resnet50", 200_000, 50)  # scales: the quad node stays
    selection = plan(spec, catalog, now=NOW)
    assert selection.recommended is not None and gpus(selection.recommended) == 4
    places: dict[tuple[object, ...], list[Any]] = {}
    for p in selection.ranked:
        o = p.option
        places.setdefault((o.system, o.partition, o.node_type, o.batch_size), []).append(p)
    for group in places.values():
        group.sort(key=gpus)
        for fewer, more in pairwise(group):
            if gpus(more) > gpus(fewer):
                speedup = fewer.expected_run_s / more.expected_run_s
                assert speedup / (gpus(more) / gpus(fewer)) >= 0.7 - 1e-9
    small = _spec("transformer", 2_000, 1)
    unlimited = plan(small, catalog, now=NOW, config=PlanningConfig(gpu_efficiency=0))
    assert max(gpus(p) for p in unlimited.ranked) > 1
    assert not any(i.constraint == "gpu_efficiency" for i in unlimited.infeasible)


def test_an_efficiency_just_under_the_bar_does_not_read_as_the_bar() -> None:
    from tools.planning.gpu_scaling import _percent

    assert _percent(0.695, 0.7) == "69.5%"  # whole percents said "70% efficiency; must give 70%"
    assert _percent(0.68, 0.7) == "68%"
