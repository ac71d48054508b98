"""Workload files: the examples load, and a bad file names the file, the field and the value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import DNNTraining, GenericJob, Objective
from tests.tools.planning.conftest import EXAMPLES
from tools.planning.workload_files import load_workload


def test_the_resnet50_example_is_seed_001s_scenario() -> None:
    spec = load_workload(EXAMPLES / "resnet50.yaml")
    assert isinstance(spec.workload, DNNTraining)
    assert (spec.workload.model, spec.workload.dataset_samples, spec.workload.epochs) == (
        "resnet50",
        20000,
        50,
    )
    assert spec.workload.batch_sizes == [32, 64]
    assert spec.goals.systems == ["pitzer"]
    assert spec.goals.objective is Objective.EARLIEST_FINISH


def test_the_generic_example_reads_units_written_out() -> None:
    spec = load_workload(EXAMPLES / "generic.yaml")
    assert isinstance(spec.workload, GenericJob)
    assert spec.workload.memory_mb == 64 * 1024
    assert spec.workload.walltime_s == 6 * 3600


def test_json_workloads_load_too(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    document = {
        "name": "j",
        "user": "u",
        "workload": {"kind": "generic", "application": "a.out", "walltime_s": "90 min"},
    }
    path.write_text(json.dumps(document))
    assert load_workload(path).workload.walltime_s == 5400  # type: ignore[union-attr]


def test_a_bad_field_names_file_field_and_value(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    text = (EXAMPLES / "resnet50.yaml").read_text().replace("[32, 64]", "[32, -64]")
    path.write_text(text)
    with pytest.raises(InvalidInputError) as caught:
        load_workload(path)
    message = str(caught.value)
    assert str(path) in message
    assert caught.value.field == "workload"
    assert "-64" in message


def test_a_wrong_type_names_the_nested_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text((EXAMPLES / "resnet50.yaml").read_text().replace("epochs: 50", "epochs: many"))
    with pytest.raises(InvalidInputError) as caught:
        load_workload(path)
    assert caught.value.field == "workload.epochs"
    assert caught.value.value == "many"


def test_memory_without_a_unit_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text((EXAMPLES / "generic.yaml").read_text().replace("64 GB", "'64'"))
    with pytest.raises(InvalidInputError, match="memory_mb"):
        load_workload(path)


def test_yaml_syntax_errors_say_where(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(InvalidInputError, match=r"not YAML at line \d"):
        load_workload(path)


def test_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cannot read"):
        load_workload(tmp_path / "nope.yaml")
