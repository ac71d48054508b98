"""``rightsize catalog`` through the real console script's app, on a temporary SQLite file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RIGHTSIZE_KB_URL", raising=False)
    monkeypatch.delenv("RIGHTSIZE_MONGO_URL", raising=False)


def _json(*args: str) -> dict[str, object]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_catalog_list_json_has_6_systems_and_119_partitions_with_limits() -> None:
    data = _json("catalog", "list")
    systems = data["systems"]
    assert isinstance(systems, list)
    assert len(systems) == 6
    partitions = [p for s in systems for p in s["partitions"]]
    assert len(partitions) == 119
    first = systems[0]["partitions"][0]
    assert {"name", "max_nodes", "max_minutes", "max_cores_per_node", "max_memory_mb"} <= set(first)


def test_catalog_list_prints_a_table_for_people() -> None:
    result = runner.invoke(app, ["catalog", "list"])
    assert result.exit_code == 0
    assert "6 systems, 119 partitions" in result.stdout
    assert "stampede2" in result.stdout


def test_catalog_show_one_system_and_unknown_system_error() -> None:
    assert _json("catalog", "show", "frontera")["center"] == "TACC"
    result = runner.invoke(app, ["catalog", "show", "nosuch"])
    assert result.exit_code == 2
    assert "no system 'nosuch'" in result.stderr


def test_bad_import_names_the_field_and_leaves_the_catalog_untouched(
    shared_data: Path, tmp_path: Path
) -> None:
    before = _json("catalog", "list")
    docs = json.loads((shared_data / "centers" / "queue_limits.json").read_text())
    docs[100]["maxMinutes"] = -3
    bad = tmp_path / "queues.json"
    bad.write_text(json.dumps(docs))
    result = runner.invoke(app, ["catalog", "import", "queues", str(bad)])
    assert result.exit_code == 2
    assert "maxMinutes" in result.stderr and "-3" in result.stderr
    assert _json("catalog", "list") == before


def test_duplicate_system_across_tapis_files_is_rejected(shared_data: Path, tmp_path: Path) -> None:
    source = shared_data / "centers" / "tapis_systems" / "osc-pitzer.json"
    copy = tmp_path / "pitzer-again.json"
    copy.write_text(source.read_text())
    result = runner.invoke(app, ["catalog", "import", "tapis", str(source), str(copy)])
    assert result.exit_code == 2
    assert "duplicate system" in result.stderr and "'pitzer'" in result.stderr


def test_import_export_import_gives_the_same_catalog(shared_data: Path, tmp_path: Path) -> None:
    tapis = sorted(str(p) for p in (shared_data / "centers" / "tapis_systems").glob("*.json"))
    assert runner.invoke(app, ["catalog", "import", "tapis", *tapis]).exit_code == 0
    imported = _json("catalog", "list")
    exported = tmp_path / "catalog.json"
    assert runner.invoke(app, ["catalog", "export", str(exported)]).exit_code == 0
    assert runner.invoke(app, ["catalog", "seed"]).exit_code == 0
    assert _json("catalog", "list") != imported
    assert runner.invoke(app, ["catalog", "import", "catalog", str(exported)]).exit_code == 0
    assert _json("catalog", "list") == imported


def test_export_formats_read_back_by_their_importers(tmp_path: Path) -> None:
    queues = tmp_path / "queues.json"
    tapis_dir = tmp_path / "tapis"
    assert (
        runner.invoke(app, ["catalog", "export", str(queues), "--format", "queues"]).exit_code == 0
    )
    assert len(json.loads(queues.read_text())) == 119
    result = runner.invoke(
        app, ["catalog", "export", str(tapis_dir), "--format", "tapis", "--system", "lonestar6"]
    )
    assert result.exit_code == 0
    summary = _json("catalog", "import", "tapis", str(tapis_dir / "lonestar6.json"))
    assert summary["total_partitions"] == 119


def test_import_hardware_adds_stampede3(shared_data: Path) -> None:
    summary = _json(
        "catalog",
        "import",
        "hardware",
        str(shared_data / "centers" / "hardware.json"),
        "--system",
        "stampede3",
    )
    assert summary["total_systems"] == 7


def test_version_flag() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout.startswith("rightsize ")


@pytest.mark.slurm
def test_catalog_import_slurm_names_the_cluster_as_the_center_runs_it(
    slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --name the local SLURM is imported as RIGHTSIZE_LOCAL_SYSTEM ('local'), the
    name the embedded center runs its jobs under, so `plan` and `submit` agree on it (found
    by the researcher's e2e test: --name was required, and a plan for any other name has
    no executor); another name is imported with a note saying so."""
    if "SLURM_CONF" in slurm_cluster:
        monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])
    monkeypatch.delenv("RIGHTSIZE_LOCAL_SYSTEM", raising=False)
    imported = _json("catalog", "import", "slurm")
    assert "local" in str(imported)
    systems = _json("catalog", "list")["systems"]
    assert isinstance(systems, list)
    names = [s["name"] for s in systems]
    assert "local" in names

    other = runner.invoke(app, ["catalog", "import", "slurm", "--name", "mycluster"])
    assert other.exit_code == 0, other.output
    assert "RIGHTSIZE_LOCAL_SYSTEM=mycluster" in " ".join(other.stdout.split())


def test_imports_show_progress_for_people_and_none_under_json(
    shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import contextlib
    from collections.abc import Iterator

    import rightsize.commands.catalog as catalog_command
    from rightsize.progress import progress as real_progress

    shown: list[tuple[str, float | None, bool]] = []

    @contextlib.contextmanager
    def recording(
        description: str, *, total: float | None = None, quiet: bool = False
    ) -> Iterator[object]:
        shown.append((description, total, quiet))
        with real_progress(description, total=total, quiet=quiet) as steps:
            yield steps

    monkeypatch.setattr(catalog_command, "progress", recording)
    tapis = sorted(str(p) for p in (shared_data / "centers" / "tapis_systems").glob("*.json"))
    result = runner.invoke(app, ["catalog", "import", "tapis", *tapis])
    assert result.exit_code == 0, result.output
    assert ("reading Tapis systems", len(tapis), False) in shown
    assert any(d.startswith("storing the catalog") and not q for d, _, q in shown)
    shown.clear()
    result = runner.invoke(app, ["catalog", "import", "tapis", *tapis, "--json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)  # nothing but the answer on stdout
    assert shown and all(quiet for _, _, quiet in shown)
