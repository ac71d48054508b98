"""``rightsize center run``: all agents embedded, one agent per process on a real broker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.bus.kafka import KafkaBus
from agents.center import AGENT_NAMES, publish
from agents.events import EstimateReady, EstimateRequested, decode_event
from agents.topics import ALL_TOPICS, ESTIMATES
from knowledge_base.workload import DNNTraining, Goals, WorkloadSpec
from rightsize.cli import app
from tests.agents.conftest import TansuBroker, _require_tansu, free_port, kafka_settings

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RIGHTSIZE_EXECUTOR", "simulated")
    for name in ("KB_URL", "MONGO_URL", "KAFKA_BOOTSTRAP", "LLM_MODEL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def test_center_run_starts_every_agent_embedded_and_stops_cleanly() -> None:
    result = runner.invoke(app, ["center", "run", "--duration-s", "1", "--json"])
    assert result.exit_code == 0, result.output
    health = json.loads(result.stdout)["agents"]
    assert [h["agent"] for h in health] == [
        "intelligence-plane",
        "resource-estimation",
        "optimization",
        "profiling",
        "scheduler",
        "model-promotion",
    ]
    assert all(h["started_at"] and not h["running"] for h in health)
    assert "embedded" in result.stderr and "simulated" in result.stderr


def test_embedded_center_on_auto_says_in_its_output_that_jobs_are_simulated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIGHTSIZE_EXECUTOR", "auto")
    monkeypatch.setenv("PATH", "/nonexistent")  # no SLURM answers
    result = runner.invoke(app, ["center", "run", "--duration-s", "0.5"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "WARNING: executor auto: no SLURM controller answered" in said
    assert "SIMULATED" in said


def test_center_on_kafka_with_auto_executor_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIGHTSIZE_EXECUTOR", "auto")
    monkeypatch.setenv("RIGHTSIZE_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    result = runner.invoke(app, ["center", "run", "--agent", "scheduler"])
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert "executor: a center run (RIGHTSIZE_KAFKA_BOOTSTRAP is set) must name" in said


def test_an_unknown_agent_is_refused_naming_the_agents() -> None:
    result = runner.invoke(app, ["center", "run", "--agent", "oracle"])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())  # rich wraps long lines
    assert "--agent: no agent 'oracle'" in said
    assert ", ".join(AGENT_NAMES) in said


def test_one_agent_per_process_needs_kafka() -> None:
    result = runner.invoke(app, ["center", "run", "--agent", "scheduler"])
    assert result.exit_code == 2
    assert "RIGHTSIZE_KAFKA_BOOTSTRAP" in result.stderr


def test_an_llm_that_cannot_be_loaded_is_an_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIGHTSIZE_LLM_MODEL", "openai:gpt-4o-mini")
    result = runner.invoke(app, ["center", "run", "--duration-s", "1"])
    assert result.exit_code == 2
    assert "llm_model" in result.stderr and "langchain_openai" in result.stderr


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[TansuBroker]:
    started = TansuBroker(_require_tansu(), free_port(), tmp_path / "tansu.log")
    started.start()
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.kafka
@pytest.mark.e2e
async def test_one_agent_per_process_on_kafka_answers_and_stops_on_sigterm(
    broker: TansuBroker, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "RIGHTSIZE_HOME": str(tmp_path / "home"),
        "RIGHTSIZE_EXECUTOR": "simulated",
        "RIGHTSIZE_KAFKA_BOOTSTRAP": broker.bootstrap,
    }
    log = (tmp_path / "estimation.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "rightsize", "center", "run", "--agent", "estimation"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        async with KafkaBus(kafka_settings(broker.bootstrap)) as bus:
            await bus.create_topics(list(ALL_TOPICS), partitions=4)
            listen = bus.consumer([ESTIMATES], group_id="test-listener")
            await listen.start()
            spec = WorkloadSpec(
                name="r50",
                user="u",
                workload=DNNTraining(
                    model="resnet50", dataset_samples=20000, epochs=1, batch_sizes=[64]
                ),
                goals=Goals(systems=["pitzer"]),
            )
            await publish(
                bus, EstimateRequested(plan_id="k1", spec=spec), correlation_id="k1", source="test"
            )
            answer = None
            deadline = time.monotonic() + 90
            while answer is None and time.monotonic() < deadline:
                for record in await listen.poll(max_records=50, timeout_s=1.0):
                    event = decode_event(record.value)
                    if isinstance(event.payload, EstimateReady):
                        answer = event.payload
            await listen.stop()
        assert answer is not None, (tmp_path / "estimation.log").read_text()[-2000:]
        assert answer.plan_id == "k1" and answer.estimates
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 30)
        log.flush()
        assert code == 0, (tmp_path / "estimation.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        log.close()


def test_retention_comes_from_the_settings_and_rejects_a_non_positive_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from pydantic import ValidationError

    from rightsize.commands.center import center_config
    from rightsize.settings import Settings

    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path))
    monkeypatch.setenv("RIGHTSIZE_RETENTION_DAYS", "2.5")
    config = center_config(Settings(), ("estimation",), embedded=True)
    assert (config.retention.keep_days, config.retention.interval_s) == (2.5, 3600.0)
    monkeypatch.setenv("RIGHTSIZE_RETENTION_DAYS", "0")
    with pytest.raises(ValidationError, match="retention_days"):
        Settings()


def test_extension_in_place_is_off_unless_the_center_turns_it_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rightsize.commands.center import center_config
    from rightsize.settings import Settings

    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path))
    config = center_config(Settings(), ("scheduler",), embedded=True)
    assert config.scheduler.policy.extend_in_place is False
    monkeypatch.setenv("RIGHTSIZE_EXTEND_WALLTIME", "true")
    config = center_config(Settings(), ("scheduler",), embedded=True)
    assert config.scheduler.policy.extend_in_place is True


async def test_the_centers_agents_estimate_with_the_chain_the_cli_and_mcp_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One chain per settings: the Resource Estimation agent and the Scheduler's memory
    history are the ``shared_chain`` that ``rightsize plan`` and the MCP server ask."""
    import contextlib

    from agents.bus.memory import InMemoryBus
    from agents.center import build_agent
    from knowledge_base.sqlite import SQLiteKnowledgeBase
    from mcp_server.context import ServerDeps
    from rightsize.commands.center import center_config
    from rightsize.commands.mcp import deps_for
    from rightsize.settings import Settings
    from rightsize.wiring import chain_config
    from tools.planning.service import shared_chain

    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    settings = Settings()
    config = center_config(settings, ("estimation", "scheduler"), embedded=True)
    assert config.chain == chain_config(settings)
    assert config.chain.home == tmp_path / "home"
    deps: ServerDeps = deps_for(settings, bus=None, allow_model_code=True)
    assert deps.chain_config() == config.chain

    kb = SQLiteKnowledgeBase(tmp_path / "kb.db")
    try:
        async with InMemoryBus() as bus, contextlib.AsyncExitStack() as stack:
            estimation = await build_agent("estimation", kb, {}, bus, config, stack)
            scheduler = await build_agent("scheduler", kb, {}, bus, config, stack)
            the_one = shared_chain(kb, config=chain_config(settings))
            assert estimation.estimators is the_one  # type: ignore[attr-defined]
            assert scheduler.history.args == (kb, the_one.config)  # type: ignore[attr-defined]
    finally:
        await kb.close()
