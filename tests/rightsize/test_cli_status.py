"""``rightsize center run --status-port/--metrics-port`` and ``rightsize center status``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from knowledge_base.records import CascadeSegment, PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from rightsize.cli import app
from tests.agents.conftest import free_port
from tests.agents.harness import generic_spec, make_plan

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RIGHTSIZE_EXECUTOR", "simulated")
    for name in ("KB_URL", "MONGO_URL", "KAFKA_BOOTSTRAP", "LLM_MODEL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)
    return tmp_path / "home"


def seed_plan(home: Path) -> None:
    async def seed() -> None:
        home.mkdir(parents=True, exist_ok=True)
        async with SQLiteKnowledgeBase(home / "rightsize.db") as kb:
            plan = make_plan("plan-cli", generic_spec(), partition="batch").model_copy(
                update={
                    "status": PlanStatus.RUNNING,
                    "segments": [
                        CascadeSegment(index=0, walltime_s=60, job_id="77", state="running")
                    ],
                }
            )
            await kb.put_plan(plan)

    asyncio.run(seed())


def test_without_a_status_server_center_status_reads_the_knowledge_base(home: Path) -> None:
    seed_plan(home)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = runner.invoke(app, ["center", "status", "--url", url, "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["parts_up"] == {"knowledge_base": True, "center": False}
    assert [p["id"] for p in status["plans"]] == ["plan-cli"]
    assert status["jobs_by_state"] == {"running": 1}

    table = runner.invoke(app, ["center", "status", "--url", url])
    assert table.exit_code == 0, table.output
    assert "plan-cli" in table.stdout and "no status server answered" in table.stdout


@pytest.fixture
def center(home: Path, tmp_path: Path) -> Iterator[tuple[int, int]]:
    """``rightsize center run`` in its own process, serving the page and the metrics."""
    status_port, metrics_port = free_port(), free_port()
    log = (tmp_path / "center.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "rightsize", "center", "run",
         "--status-port", str(status_port), "--metrics-port", str(metrics_port)],
        cwd=REPO, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{status_port}/api/status", timeout=5).is_success:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the center did not serve: {(tmp_path / 'center.log').read_text()}")
            time.sleep(0.2)
        yield status_port, metrics_port
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, (tmp_path / "center.log").read_text()


@pytest.mark.e2e
def test_a_running_center_serves_its_status_and_metrics(center: tuple[int, int]) -> None:
    status_port, metrics_port = center
    result = runner.invoke(
        app, ["center", "status", "--url", f"http://127.0.0.1:{status_port}", "--json"]
    )
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["parts_up"] == {"knowledge_base": True, "bus": True, "center": True}
    assert len(status["agents"]) == 6 and all(a["running"] for a in status["agents"])

    table = runner.invoke(app, ["center", "status", "--url", f"http://127.0.0.1:{status_port}"])
    assert table.exit_code == 0 and "scheduler" in table.stdout and "Agents" in table.stdout

    metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    assert 'rightsize_agent_up{agent="scheduler"} 1.0' in metrics
    assert 'rightsize_up{part="knowledge_base"} 1.0' in metrics
    page = httpx.get(f"http://127.0.0.1:{status_port}/", timeout=10)
    assert page.status_code == 200 and "Rightsize center" in page.text


def test_a_port_in_use_is_an_error_naming_the_option(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(
            app, ["center", "run", "--duration-s", "30", "--status-port", str(port)]
        )
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"--status-port: cannot serve on 127.0.0.1:{port}" in said
