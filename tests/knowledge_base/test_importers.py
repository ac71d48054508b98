"""Importers on the real shared center files, their round trips, and their bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.importers.hardware import read_hardware
from knowledge_base.importers.merge import merge_partitions
from knowledge_base.importers.queue_limits import (
    export_queue_limits,
    parse_queue_limits,
    read_queue_limits,
)
from knowledge_base.importers.slurm import (
    parse_nodes_json,
    parse_nodes_text,
    parse_partitions_json,
    parse_partitions_text,
    system_from_slurm,
)
from knowledge_base.importers.tapis import (
    export_tapis_system,
    parse_tapis_system,
    read_tapis_system,
)
from knowledge_base.seed import load_seed_catalog, system_from_hardware
from tests.conftest import FIXTURES
from tools.actuators.slurm_catalog import import_slurm_system
from tools.actuators.slurm_commands import SlurmCommands

SLURM = FIXTURES / "slurm"


def _queue_docs(shared_data: Path) -> list[dict[str, object]]:
    docs: list[dict[str, object]] = json.loads(
        (shared_data / "centers" / "queue_limits.json").read_text()
    )
    return docs


# -- queue_limits.json -------------------------------------------------------------------


def test_queue_limits_file_gives_119_queues_on_6_systems(shared_data: Path) -> None:
    by_system = read_queue_limits(shared_data / "centers" / "queue_limits.json")
    assert {k: len(v) for k, v in by_system.items()} == {
        "ascend": 8,
        "owens": 19,
        "pitzer": 68,
        "frontera": 10,
        "lonestar6": 6,
        "stampede2": 8,
    }
    serial = next(p for p in by_system["pitzer"] if p.name == "serial")
    assert (serial.max_nodes, serial.max_cores_per_node, serial.max_minutes) == (1, 48, 10080)
    assert serial.max_memory_mb == 452903


def test_queue_limits_round_trip_gives_the_same_catalog(shared_data: Path, tmp_path: Path) -> None:
    first = merge_partitions(
        Catalog(),
        read_queue_limits(shared_data / "centers" / "queue_limits.json"),
        source="queue_limits.json",
    )
    exported = tmp_path / "queue_limits.json"
    exported.write_text(json.dumps(export_queue_limits(first)))
    second = merge_partitions(Catalog(), read_queue_limits(exported), source="queue_limits.json")
    assert second == first


def test_queue_with_max_below_min_names_file_queue_field_and_values(shared_data: Path) -> None:
    docs = _queue_docs(shared_data)
    docs[5] = {**docs[5], "minNodeCount": 9, "maxNodeCount": 2}
    with pytest.raises(InvalidInputError) as caught:
        parse_queue_limits(docs, "queue_limits.json")
    message = str(caught.value)
    assert "queue_limits.json" in message
    assert "[5] (ascend/gpu-mixed)" in message
    assert "max_nodes=2 is below min_nodes=9" in message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"maxMemoryMB": -1}, "maxMemoryMB"),
        ({"maxMemoryMB": "16"}, "maxMemoryMB"),  # a unit-less string
        ({"maxMinutes": True}, "maxMinutes"),
        ({"maxWallclock": 5}, "unknown field"),
    ],
)
def test_bad_queue_documents_are_rejected_naming_the_field(
    shared_data: Path, change: dict[str, object], expected: str
) -> None:
    docs = _queue_docs(shared_data)
    docs[0] = {**docs[0], **change}
    with pytest.raises(InvalidInputError, match=expected):
        parse_queue_limits(docs, "q.json")


def test_duplicate_queue_is_rejected(shared_data: Path) -> None:
    docs = _queue_docs(shared_data)
    with pytest.raises(InvalidInputError, match="duplicate queue.*'batch'"):
        parse_queue_limits([*docs, docs[0]], "q.json")


def test_truncated_json_file_names_the_position(shared_data: Path, tmp_path: Path) -> None:
    text = (shared_data / "centers" / "queue_limits.json").read_text()
    broken = tmp_path / "queue_limits.json"
    broken.write_text(text[: len(text) // 2])
    with pytest.raises(InvalidInputError, match=r"queue_limits.json: malformed JSON at line \d+"):
        read_queue_limits(broken)


# -- Tapis -------------------------------------------------------------------------------


def test_every_shared_tapis_file_imports(shared_data: Path) -> None:
    systems = {
        s.name: s
        for s in (
            read_tapis_system(f)
            for f in sorted((shared_data / "centers" / "tapis_systems").glob("*.json"))
        )
    }
    assert sorted(systems) == ["frontera", "pitzer", "stampede2"]
    assert [p.name for p in systems["pitzer"].partitions] == [
        "serial",
        "parallel",
        "gpuserial-40core",
    ]
    assert systems["pitzer"].max_jobs == 12000
    assert systems["frontera"].default_partition == "normal"
    assert systems["stampede2"].partition("skx-large").max_nodes == 868


def test_tapis_round_trip_gives_the_same_system(shared_data: Path, tmp_path: Path) -> None:
    for file in sorted((shared_data / "centers" / "tapis_systems").glob("*.json")):
        system = read_tapis_system(file)
        exported = tmp_path / file.name
        exported.write_text(json.dumps(export_tapis_system(system)))
        assert read_tapis_system(exported) == system


def test_tapis_string_booleans_are_read_and_nonsense_rejected(shared_data: Path) -> None:
    doc = json.loads((shared_data / "centers" / "tapis_systems" / "osc-pitzer.json").read_text())
    assert parse_tapis_system(doc, "p.json").name == "pitzer"  # "True"/"False" strings
    with pytest.raises(InvalidInputError, match="canExec.*'yes please'"):
        parse_tapis_system({**doc, "canExec": "yes please"}, "p.json")


def test_tapis_typo_in_field_name_is_an_error_not_an_empty_system(shared_data: Path) -> None:
    doc = json.loads((shared_data / "centers" / "tapis_systems" / "tacc-frontera.json").read_text())
    doc["batchLogicalQueue"] = doc.pop("batchLogicalQueues")
    with pytest.raises(InvalidInputError, match="batchLogicalQueue: unknown field"):
        parse_tapis_system(doc, "f.json")


def test_tapis_queue_with_bad_limits_names_the_queue(shared_data: Path) -> None:
    doc = json.loads(
        (shared_data / "centers" / "tapis_systems" / "tacc-stampede2.json").read_text()
    )
    doc["batchLogicalQueues"][2]["maxMinutes"] = 0
    with pytest.raises(InvalidInputError, match=r"batchLogicalQueues\.2\.maxMinutes"):
        parse_tapis_system(doc, "s.json")


def test_truncated_tapis_file_is_rejected(shared_data: Path, tmp_path: Path) -> None:
    text = (shared_data / "centers" / "tapis_systems" / "osc-pitzer.json").read_text()
    broken = tmp_path / "osc-pitzer.json"
    broken.write_text(text[:300])
    with pytest.raises(InvalidInputError, match="osc-pitzer.json: malformed JSON"):
        read_tapis_system(broken)


def test_tapis_placeholder_id_without_host_needs_a_name() -> None:
    with pytest.raises(InvalidInputError, match="placeholder"):
        parse_tapis_system({"id": "$system_id_hpc"}, "t.json")
    assert parse_tapis_system({"id": "$x"}, "t.json", name="mine", center="lab").name == "mine"


def test_tapis_limits_over_the_seed_keep_hardware_and_charges(shared_data: Path) -> None:
    pitzer = read_tapis_system(shared_data / "centers" / "tapis_systems" / "osc-pitzer.json")
    merged = merge_partitions(
        load_seed_catalog(), {"pitzer": pitzer.partitions}, source="osc-pitzer.json"
    )
    serial = merged.system("pitzer").partition("serial")
    assert serial.max_cores_per_node == 40  # Tapis's limit wins
    assert serial.node_type == "cascadelake-48core-regular"  # the seed's hardware stays
    assert serial.charge is not None and serial.charge.unit == "core-hour"
    assert len(merged.system("pitzer").partitions) == 68


# -- hardware.json -----------------------------------------------------------------------


def test_hardware_file_adds_stampede3_but_not_queue_less_cardinal(shared_data: Path) -> None:
    path = shared_data / "centers" / "hardware.json"
    hardware = read_hardware(path)
    stampede3 = system_from_hardware(hardware, "stampede3", str(path))
    h100 = stampede3.partition("h100")
    assert (h100.gpus_per_node, h100.max_minutes) == (4, 2880)
    assert h100.charge is not None and h100.charge.rate == 4.0
    with pytest.raises(InvalidInputError, match="no queues.*'cardinal'"):
        system_from_hardware(hardware, "cardinal", str(path))


# -- SLURM -------------------------------------------------------------------------------


def test_slurm_text_and_json_layouts_agree_on_the_captured_cluster() -> None:
    """Fixtures captured from a real SLURM 22.05 (see tests/fixtures/slurm/README.md)."""
    text = parse_partitions_text((SLURM / "scontrol_show_partition.txt").read_text(), "t")
    restd = parse_partitions_json((SLURM / "slurmrestd_v0.0.38_partitions.json").read_text(), "j")
    assert text == restd
    debug = text[0]
    assert (debug.name, debug.max_minutes, debug.max_nodes, debug.default) == ("debug", 10, 1, True)
    assert text[1].max_minutes == 2880 and text[1].max_nodes is None
    nodes_text = parse_nodes_text((SLURM / "scontrol_show_node.txt").read_text(), "t")
    nodes_json = parse_nodes_json((SLURM / "sinfo.json").read_text(), "j")
    assert nodes_text == nodes_json
    system = system_from_slurm("local", "lab", text, nodes_text, "fixture")
    assert system.default_partition == "debug"
    assert system.partition("debug").max_memory_mb == 4096
    assert system.partition("long").max_nodes == 1  # UNLIMITED: the nodes it has


def test_slurm_2302_json_layout_with_gpu_nodes_is_understood() -> None:
    """Hand-written in the 23.02+ layout (numbers as {set, infinite, number}); no such
    SLURM can be installed here, so this document follows the SLURM data_parser source."""
    partitions = parse_partitions_json(
        json.dumps(
            {
                "partitions": [
                    {
                        "name": "gpu",
                        "maximums": {
                            "time": {"set": True, "infinite": False, "number": 2880},
                            "nodes": {"set": True, "infinite": True, "number": 0},
                            "partition_memory_per_node": {
                                "set": True,
                                "infinite": False,
                                "number": 500000,
                            },
                        },
                        "minimums": {"nodes": 1},
                        "partition": {"state": ["UP"]},
                        "flags": ["DEFAULT"],
                    }
                ]
            }
        ),
        "23.02",
    )
    nodes = parse_nodes_json(
        json.dumps(
            {
                "nodes": [
                    {
                        "name": f"g{i}",
                        "cpus": 64,
                        "real_memory": 512000,
                        "gres": "gpu:a100:4(S:0-1)",
                        "state": ["IDLE"],
                        "partitions": ["gpu"],
                    }
                    for i in range(3)
                ]
            }
        ),
        "23.02",
    )
    system = system_from_slurm("big", "lab", partitions, nodes, "23.02")
    gpu = system.partition("gpu")
    assert (gpu.max_minutes, gpu.max_nodes, gpu.gpus_per_node, gpu.max_memory_mb) == (
        2880,
        3,
        4,
        500000,
    )
    assert system.node_types[0].gpu is not None and system.node_types[0].gpu.model == "a100"
    assert system.default_partition == "gpu"


def test_malformed_slurm_json_is_an_input_error() -> None:
    with pytest.raises(InvalidInputError, match="malformed JSON"):
        parse_partitions_json('{"partitions": [', "scontrol")
    with pytest.raises(InvalidInputError, match=r"nodes\[0\]"):
        parse_nodes_json('{"nodes": [{"name": "n"}]}', "sinfo")


@pytest.mark.slurm
def test_live_slurm_cluster_imports_its_partitions(slurm_cluster: dict[str, str]) -> None:
    system = import_slurm_system("local", "lab", SlurmCommands(timeout_s=30))
    names = {p.name for p in system.partitions}
    assert {"debug", "batch"} <= names
    assert system.partition("debug").max_minutes == 1
    live = subprocess.run(
        ["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert {n.rstrip("*") for n in live} == names
