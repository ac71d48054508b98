"""The domain model rejects what can never be valid, naming the field and the value."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from knowledge_base.catalog import Catalog, NodeType, Partition, System
from knowledge_base.records import Interval
from knowledge_base.units import parse_duration_s, parse_memory_mb
from knowledge_base.workload import DNNTraining, GenericJob, Goals, WorkloadSpec


def _partition(**overrides: object) -> Partition:
    fields: dict[str, object] = dict(
        name="q", max_nodes=4, max_cores_per_node=48, max_memory_mb=1000, max_minutes=60
    )
    fields.update(overrides)
    return Partition.model_validate(fields)


@pytest.mark.parametrize(
    ("low", "high"),
    [
        ("min_nodes", "max_nodes"),
        ("min_cores_per_node", "max_cores_per_node"),
        ("min_memory_mb", "max_memory_mb"),
        ("min_minutes", "max_minutes"),
    ],
)
def test_partition_with_max_below_min_is_rejected_naming_both(low: str, high: str) -> None:
    with pytest.raises(ValidationError, match=f"{high}=1 is below {low}=2"):
        _partition(**{low: 2, high: 1})


def test_negative_memory_is_rejected_with_the_value() -> None:
    with pytest.raises(ValidationError, match="cannot be negative, got -5"):
        _partition(max_memory_mb=-5)


def test_unitless_memory_string_is_rejected_but_units_are_understood() -> None:
    with pytest.raises(ValidationError, match="'16' has no unit"):
        _partition(max_memory_mb="16")
    assert _partition(max_memory_mb="16 GB").max_memory_mb == 16384
    assert _partition(max_memory_mb="512MiB").max_memory_mb == 512


def test_unknown_field_is_rejected() -> None:
    with pytest.raises(ValidationError, match="max_walltime"):
        _partition(max_walltime=5)


def test_duplicate_system_names_are_rejected() -> None:
    system = System(name="a", center="X")
    with pytest.raises(ValidationError, match="duplicate system 'a'"):
        Catalog(systems=[system, system])


def test_partition_must_name_a_node_type_its_system_defines() -> None:
    with pytest.raises(ValidationError, match="'gpu' which the system does not define|'gpu'"):
        System(name="a", center="X", partitions=[_partition(node_type="gpu")])


def test_gpu_node_type_needs_a_gpu_model() -> None:
    with pytest.raises(ValidationError, match="no gpu model"):
        NodeType(name="n", gpus=2)


def test_interval_must_contain_its_point() -> None:
    with pytest.raises(ValidationError, match="low <= point <= high"):
        Interval(point=5, low=6, high=7)


def test_durations_parse_units_and_slurm_clocks() -> None:
    assert parse_duration_s("90 min") == 5400
    assert parse_duration_s("1-12:00:00") == 129600
    assert parse_duration_s("00:10:00") == 600
    assert parse_duration_s(42) == 42
    with pytest.raises(ValueError, match="'soon' is not a duration"):
        parse_duration_s("soon")


def test_memory_parse_rejects_booleans_and_unknown_units() -> None:
    with pytest.raises(ValueError, match="boolean"):
        parse_memory_mb(True)
    with pytest.raises(ValueError, match="unknown memory unit 'parsecs'"):
        parse_memory_mb("3 parsecs")


def test_workload_spec_is_discriminated_by_kind() -> None:
    spec = WorkloadSpec.model_validate(
        {
            "name": "r50",
            "user": "u",
            "workload": {
                "kind": "dnn_training",
                "model": "resnet50",
                "dataset_samples": 20000,
                "epochs": 50,
                "batch_sizes": [32, 64],
                "input_shape": [3, 224, 224],
            },
        }
    )
    assert isinstance(spec.workload, DNNTraining)
    generic = WorkloadSpec.model_validate(
        {
            "name": "md",
            "user": "u",
            "workload": {
                "kind": "generic",
                "application": "lammps",
                "walltime_s": "2 h",
                "memory_mb": "8 GB",
            },
        }
    )
    assert isinstance(generic.workload, GenericJob)
    assert (generic.workload.walltime_s, generic.workload.memory_mb) == (7200, 8192)


def test_workload_rejects_impossible_requests() -> None:
    with pytest.raises(ValidationError, match="batch_sizes"):
        DNNTraining(model="m", dataset_samples=10, epochs=1, batch_sizes=[32, 0])
    with pytest.raises(ValidationError, match="gpu_only and cpu_only"):
        Goals(gpu_only=True, cpu_only=True)
    with pytest.raises(ValidationError, match="budget_unit"):
        Goals(budget=200)
