"""Files and flags every command shares (issue #19 item 8): safe script names, ``--json``
as a plain flag on every command, files that are not what a command reads refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer._click import Command
from typer.core import TyperGroup as Group
from typer.testing import CliRunner

from rightsize.cli import COMMANDS, app, load_command

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL", "USD_PER_SU", "USD_PER_CORE_HOUR", "USD_PER_GPU_HOUR"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def _leaves(command: Command, path: list[str]) -> Iterator[tuple[list[str], Command]]:
    if isinstance(command, Group):
        if command.invoke_without_command:
            yield path, command
        for name, sub in command.commands.items():
            yield from _leaves(sub, [*path, name])
    else:
        yield path, command


ALL = [
    (path, command)
    for name, entry in COMMANDS.items()
    for path, command in _leaves(load_command(name, entry), [name])
]


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_every_command_has_json_as_a_plain_flag(path: list[str], command: Command) -> None:
    flags = {o: p for p in command.params for o in getattr(p, "opts", [])}
    assert "--json" in flags, f"rightsize {' '.join(path)} has no --json"
    assert getattr(flags["--json"], "is_flag", False)
    shown = runner.invoke(app, [*path, "--help"])
    assert shown.exit_code == 0, shown.output
    assert "<bool>" not in shown.output
    [line] = [x for x in shown.output.splitlines() if x.strip().startswith("--json")]
    words = line.split()
    assert words[0] == "--json" and not (len(words) > 1 and words[1].startswith("<")), line
    assert len(words) > 1, f"rightsize {' '.join(path)}: --json has no help text"


def test_root_help_shows_flags_without_a_value(tmp_path: Path) -> None:
    shown = runner.invoke(app, ["--help"])
    assert shown.exit_code == 0
    assert "<bool>" not in shown.output
    assert all(name in shown.output for name in COMMANDS)


def _workload_named(tmp_path: Path, name: str) -> Path:
    spec = yaml.safe_load((EXAMPLES / "generic.yaml").read_text())
    spec["name"] = name
    path = tmp_path / "spec" / "workload.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("name", ["melt/run 2", "../../escaped", ".."])
def test_sbatch_scripts_stay_inside_the_folder_whatever_the_job_name(
    tmp_path: Path, name: str
) -> None:
    workload = _workload_named(tmp_path, name)
    out = tmp_path / "deep" / "sbatch"
    result = runner.invoke(
        app, ["plan", str(workload), "--sbatch", str(out), "--tapis", str(tmp_path / "tapis")]
    )
    assert result.exit_code == 0, result.output
    [script] = list(out.iterdir())
    assert script.suffix == ".sbatch" and "/" not in script.name and ".." not in script.name
    assert script.read_text().startswith("#!/bin/bash\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "home", "spec", "tapis"]
    assert sorted(p.name for p in (tmp_path / "deep").iterdir()) == ["sbatch"]
    [body] = list((tmp_path / "tapis").iterdir())
    assert body.suffix == ".json"


def test_replay_of_a_file_that_is_not_an_event_log_exits_2_saying_why(tmp_path: Path) -> None:
    log = tmp_path / "notes.txt"
    log.write_text("hello\nworld\n")
    result = runner.invoke(app, ["replay", str(log), "--agent", "scheduler", "--json"])
    assert result.exit_code == 2
    body = json.loads(result.stdout)
    assert "not an event log" in body["error"] and "line 1: not JSON" in body["error"]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    result = runner.invoke(app, ["replay", str(empty), "--agent", "scheduler"])
    assert result.exit_code == 2
    assert "holds no events" in result.stderr


@pytest.mark.parametrize("content", [b"hello\nworld\n", b"name: x\nuser: y\n", b""])
def test_synth_sample_of_a_file_that_is_not_a_model_names_the_problem(
    tmp_path: Path, content: bytes
) -> None:
    model = tmp_path / "model.pt"
    model.write_bytes(content)
    result = runner.invoke(
        app, ["synth", "sample", str(model), "--jobs", "5", "--out", str(tmp_path / "t.swf")]
    )
    assert result.exit_code == 2, result.output
    assert "not a rightsize synth model file (`rightsize synth fit` writes zip" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "t.swf").exists()
