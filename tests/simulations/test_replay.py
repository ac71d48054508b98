"""Agent-by-agent replay on a log that agents in the loop recorded: the production agent
decides the same again; a changed version is diffed; bad input is named."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.replay import replay_agent
from knowledge_base.errors import InvalidInputError
from knowledge_base.seed import load_seed_catalog
from rightsize.cli import app
from simulations.agents_loop import compare_with_agents, start_state_path
from simulations.workload import load_swf

runner = CliRunner()


@pytest.fixture(scope="module")
def recorded(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("replay")
    log = folder / "run.jsonl"
    trace = load_swf(shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz")
    asyncio.run(
        compare_with_agents(
            trace, policy="easy", jobs=12, history_jobs=1000, home=folder, event_log=log
        )
    )
    return log


def test_a_simulation_keeps_its_log_and_the_state_it_started_from(recorded: Path) -> None:
    lines = recorded.read_text().splitlines()
    types = {json.loads(line)["event"]["type"] for line in lines}
    assert {"plan.requested", "estimate.ready", "plan.options_ready", "job.finished"} <= types
    assert start_state_path(recorded).is_file()


def test_optimization_decides_the_same_actions_again(recorded: Path) -> None:
    report = asyncio.run(replay_agent(recorded, "optimization", kb_path=start_state_path(recorded)))
    assert report.compared == 12  # one plan.build_requested per job
    assert report.identical and report.matched == 12
    assert report.differences == []


def test_the_intelligence_plane_decides_the_same_actions_again(recorded: Path) -> None:
    # Its state is its own (checkpointed graph threads, the plans it stores), so the
    # events alone reproduce every step, once the log is in causal order.
    report = asyncio.run(replay_agent(recorded, "intelligence", kb_path=start_state_path(recorded)))
    assert report.compared >= 36  # per job: estimates, options, approval
    assert report.identical, report.differences[:2]


def test_a_log_is_replayed_in_causal_order() -> None:
    from agents.events import Envelope, PingRequested
    from agents.replay import causal_order

    question = Envelope.of(PingRequested(seq=1), source="a", correlation_id="c")
    answer = Envelope.of(
        PingRequested(seq=2), source="b", correlation_id="c", causation_id=question.id
    )
    other = Envelope.of(PingRequested(seq=3), source="a", correlation_id="d")
    ordered = causal_order([("t2", answer), ("t3", other), ("t1", question)])
    assert [e.payload.seq for _, e in ordered] == [3, 1, 2]  # type: ignore[attr-defined]


def test_estimation_answers_every_estimate_request_the_same(recorded: Path) -> None:
    report = asyncio.run(replay_agent(recorded, "estimation", kb_path=start_state_path(recorded)))
    asked = report.by_type["estimate.requested"]
    assert asked.consumed == 12 and asked.matched == 12


def test_a_new_version_is_diffed_against_the_recorded_actions(recorded: Path) -> None:
    report = asyncio.run(
        replay_agent(
            recorded,
            "optimization",
            against="tests.simulations.replay_versions:PaddedOptimization",
            kb_path=start_state_path(recorded),
        )
    )
    assert not report.identical
    assert report.differences
    first = report.differences[0]
    assert first.cause_type == "plan.build_requested"
    assert first.recorded != first.replayed
    assert "plan.options_ready" in first.replayed[0]
    assert any(change.startswith("recommended.option.walltime_s:") for change in first.changes)


def test_a_new_version_may_be_a_file(recorded: Path) -> None:
    versions = Path(__file__).with_name("replay_versions.py")
    report = asyncio.run(
        replay_agent(
            recorded,
            "optimization",
            against=f"{versions}:PaddedOptimization",
            kb_path=start_state_path(recorded),
        )
    )
    assert not report.identical


def test_cli_exit_code_says_identical_or_different(recorded: Path) -> None:
    same = runner.invoke(app, ["replay", str(recorded), "--agent", "optimization", "--json"])
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["identical"] is True
    changed = runner.invoke(
        app,
        [
            "replay",
            str(recorded),
            "--agent",
            "optimization",
            "--against",
            "tests.simulations.replay_versions:PaddedOptimization",
        ],
    )
    assert changed.exit_code == 1
    assert "DIFFERENT" in changed.stdout


def test_bad_input_is_named(recorded: Path, tmp_path: Path) -> None:
    cases = [
        ({"log_path": recorded, "name": "janitor"}, "agent"),
        ({"log_path": tmp_path / "missing.jsonl", "name": "estimation"}, "log"),
        ({"log_path": recorded, "name": "optimization", "against": "no.such.module:X"}, "against"),
        ({"log_path": recorded, "name": "optimization", "against": "json:dumps"}, "against"),
        (
            {"log_path": recorded, "name": "optimization", "kb_path": tmp_path / "none.db"},
            "kb",
        ),
    ]
    for kwargs, field in cases:
        with pytest.raises(InvalidInputError) as caught:
            asyncio.run(replay_agent(**kwargs))  # type: ignore[arg-type]
        assert caught.value.field == field


def test_a_torn_log_line_is_skipped_and_counted(recorded: Path, tmp_path: Path) -> None:
    torn = tmp_path / "torn.jsonl"
    torn.write_text(recorded.read_text() + '{"topic": "rightsize.plans", "ev')
    report = asyncio.run(
        replay_agent(torn, "optimization", kb_path=start_state_path(recorded), default_catalog=None)
    )
    assert report.skipped_lines == 1 and report.identical


def test_without_a_start_state_the_seeded_catalog_stands_in(recorded: Path) -> None:
    # The trace's system is not in the seeded catalog: every plan differs, and says why.
    report = asyncio.run(replay_agent(recorded, "optimization", default_catalog=load_seed_catalog))
    assert not report.identical
    assert "no system 'trace' in the catalog" in report.differences[0].replayed[0]
