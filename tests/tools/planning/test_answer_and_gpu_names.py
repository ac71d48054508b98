"""The one answer object's intervals, and GPU names resolved exactly or refused."""

from __future__ import annotations

import pytest

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import Interval, PlanOption, ResourceEstimate
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import DNNTraining
from tools.planning.answer import Quantiles, answer_of
from tools.planning.gpu_names import resolve_gpu

CATALOG = load_seed_catalog()


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA A100 80GB", "NVIDIA A100 80GB"),  # whole, the catalog's
        ("nvidia a100 80gb", "NVIDIA A100 80GB"),  # any case
        ("H100 SXM", "NVIDIA H100 SXM 80GB HBM3"),  # a listed alias
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM 80GB HBM3"),  # torch's name for it
        ("h100 pcie", "NVIDIA H100 PCIe 80GB"),  # the catalog's (lonestar6), not a sheet
        ("A100 80GB PCIe", "NVIDIA A100 80GB PCIe"),
        ("Tesla_P100-PCIE-16GB", "NVIDIA Tesla P100 (Pascal)"),  # NeuSight's: the catalog's
        ("L4", "NVIDIA L4"),
        ("T4", "NVIDIA Tesla T4"),
    ],
)
def test_gpu_names_resolve_to_exactly_one(name: str, model: str) -> None:
    gpu = resolve_gpu(name, CATALOG, required=True)
    assert gpu is not None and gpu.model == model


@pytest.mark.parametrize(
    ("name", "candidates"),
    [
        ("h100", ["NVIDIA H100 PCIe 80GB", "NVIDIA H100 SXM 80GB HBM3"]),
        ("A100", ["NVIDIA A100 40GB", "NVIDIA A100 80GB", "NVIDIA A100 80GB PCIe",
                  "NVIDIA A100 PCIe 40GB"]),
        ("A100 80GB", ["NVIDIA A100 80GB", "NVIDIA A100 80GB PCIe"]),  # SXM4 or PCIe
        ("V100", ["NVIDIA Tesla V100 (Volta)", "NVIDIA Tesla V100 SXM2 16GB",
                  "NVIDIA Tesla V100 (Volta), NVLink (per third-party guide)"]),
        ("RTX", ["NVIDIA Quadro RTX 5000"]),  # a part of one name is not that name
    ],
)  # fmt: skip
def test_a_name_several_gpus_share_is_refused_with_every_candidate(
    name: str, candidates: list[str]
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        resolve_gpu(name, CATALOG, required=True)
    text = str(caught.value)
    assert all(candidate in text for candidate in candidates), text
    listed = text[text.index("(") + 1 : text.index("): give one whole")]
    assert len(listed.split("; ")) == len(candidates), text  # every one, and no other
    assert caught.value.value == name and caught.value.field == "hardware"


def test_an_unknown_gpu_lists_the_known_ones() -> None:
    with pytest.raises(InvalidInputError, match="unknown GPU.*NVIDIA L4"):
        resolve_gpu("Voodoo 5", CATALOG, required=True, field="--gpu")


def test_a_system_is_not_a_gpu_and_a_name_that_is_neither_is_refused() -> None:
    assert resolve_gpu("pitzer", CATALOG) is None
    assert resolve_gpu("pitzer/serial", CATALOG) is None
    with pytest.raises(InvalidInputError, match="neither a system"):
        resolve_gpu("nosuch", CATALOG)


def test_quantiles_are_ordered_and_refuse_disorder() -> None:
    with pytest.raises(ValueError, match="p10 <= p50 <= p90"):
        Quantiles(p10=2, p50=1, p90=3)
    # an upper bound at the point of an estimate that is not exact moves above it
    moved = Quantiles.around(982, 1082, 1082)
    assert moved.p90 > moved.p50 == 1082 and moved.p90 == pytest.approx(1182)


def test_answer_of_takes_the_start_up_off_the_run_for_the_iteration_time() -> None:
    workload = DNNTraining(model="resnet50", dataset_samples=1000, epochs=2, batch_sizes=[100])
    option = PlanOption(
        system="s", partition="p", node_type="n", nodes=1, cores_per_node=4, gpus_per_node=0,
        memory_mb=2000, walltime_s=500, batch_size=100,
    )  # fmt: skip
    estimate = ResourceEstimate(
        option=option,
        runtime_s=Interval(point=30 + 20 * 2.0, low=10 + 20 * 1.0, high=120 + 20 * 4.0),
        memory_mb=Interval(point=1000, low=900, high=1500),
        estimator_id="x",
    )
    answer = answer_of(estimate, workload)
    assert answer.iteration_time_s == Quantiles(p10=1.0, p50=2.0, p90=4.0)
    assert answer.run_s.p50 == 70 and answer.peak_memory_mb.p90 == 1500
    assert answer.coverage_basis.interval == "assumed" and answer.coverage_basis.unreported


def test_the_answer_says_how_the_traced_work_was_priced_where_the_estimator_reports_it() -> None:
    from knowledge_base.records import WorkPriced

    workload = DNNTraining(model="resnet50", dataset_samples=1000, epochs=2, batch_sizes=[100])
    option = PlanOption(
        system="s", partition="p", node_type="n", nodes=1, cores_per_node=4, gpus_per_node=0,
        memory_mb=2000, walltime_s=500, batch_size=100,
    )  # fmt: skip
    estimate = ResourceEstimate(
        option=option,
        runtime_s=Interval(point=70, low=30, high=200, coverage_basis="held_out"),
        memory_mb=Interval(point=1000, low=900, high=1500),
        estimator_id="cpu-opcost",
        work_priced=WorkPriced(learned=0.3, analytic=0.6, unpriced=0.1),
    )
    basis = answer_of(estimate, workload).coverage_basis
    assert (basis.learned_share, basis.analytic_share, basis.unpriced_share) == (0.3, 0.6, 0.1)
    assert basis.interval == "held_out" and not basis.unreported
