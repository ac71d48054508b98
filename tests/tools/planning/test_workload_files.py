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


def test_a_script_the_command_names_beside_the_workload_file_is_found_from_any_folder(
    tmp_path: Path,
) -> None:
    """Jobs run in their plan's folder under RIGHTSIZE_HOME, not where the user typed the
    command: `python train.py` beside plan.yaml failed there ("can't open file") before."""
    project = tmp_path / "my project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    spec = (
        "name: t\nuser: u\nworkload:\n  kind: dnn_training\n  model: resnet18\n"
        "  dataset_samples: 10\n  epochs: 1\n  batch_sizes: [8]\n  command: {command}\n"
    )
    plain = project / "plan.yaml"
    plain.write_text(spec.format(command="python train.py --epochs 3"))
    shell = project / "shell.yaml"
    shell.write_text(spec.format(command="'python train.py > log.txt'"))

    workload = load_workload(plain).workload
    assert isinstance(workload, DNNTraining)
    assert workload.command == f"python '{project / 'train.py'}' --epochs 3"
    untouched = load_workload(shell).workload
    assert isinstance(untouched, DNNTraining)
    assert untouched.command == "python train.py > log.txt"  # shell text: the user's
