"""One request through every door gives the same answer (STYLE.md habit 10, issue #40).

The same model file, batch size and training on the same options, asked through
``rightsize estimate --json``, ``rightsize plan --json``, MCP ``estimate_resources``
(flat arguments), MCP ``what_if`` and the Resource Estimation agent's chain: every
door's ``OptionAnswer`` for an option has the same p50 time per iteration, run time and
peak memory (within 1%), CPU and GPU options alike. The MCP server runs in memory on a
temporary knowledge base; the CLI on a temporary home.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client
from typer.testing import CliRunner

from knowledge_base.open import open_knowledge_base
from knowledge_base.workload import WorkloadSpec
from mcp_server.server import build_server
from rightsize.cli import app
from tests.mcp_server.conftest import make_deps

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "models" / "small_cnn.py"
SYSTEM = "pitzer"
BATCH, EPOCHS, SAMPLES = 32, 2, 2000
Key = tuple[str, str, int, int]  # system, partition, gpus per node, batch


def _by_option(rows: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {
        (r["system"], r["partition"], r["gpus_per_node"], r["batch_size"]): r
        for r in rows
        if r["nodes"] == 1 and r["gpus_per_node"] <= 1
    }


def _workload() -> dict[str, Any]:
    return {
        "name": "small-cnn",
        "user": "alice",
        "workload": {
            "kind": "dnn_training",
            "model": str(MODEL),
            "model_class": "SmallCNN",
            "dataset_samples": SAMPLES,
            "epochs": EPOCHS,
            "batch_sizes": [BATCH],
        },
        "goals": {"systems": [SYSTEM]},
    }


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL", "CPU_OPCOST"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)
    return tmp_path


def _cli(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


async def _mcp(kb_url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    flat = {
        "model_file": str(MODEL),
        "model_class": "SmallCNN",
        "batch_size": BATCH,
        "hardware": [SYSTEM],
        "epochs": EPOCHS,
        "samples": SAMPLES,
    }
    async with Client(build_server(make_deps(kb_url))) as client:
        estimated = await client.call_tool("estimate_resources", flat)
        assert not estimated.is_error, estimated.content[0].text
        whatif = await client.call_tool("what_if", {"workload": _workload(), "top": 500})
        assert not whatif.is_error, whatif.content[0].text
    plans = whatif.structured_content["feasible"]
    return estimated.structured_content["estimates"], [p["estimate"] for p in plans]


async def _agent(kb_url: str) -> list[dict[str, Any]]:
    from agents.estimation import ResourceEstimation
    from tools.planning.service import plan_workload

    spec = WorkloadSpec.model_validate(_workload())
    kb = open_knowledge_base(kb_url)
    try:
        catalog = await kb.get_catalog()
        agent = ResourceEstimation(kb)
        estimators = await agent.chain(spec, catalog, datetime.now(UTC))
    finally:
        await kb.close()
    selection = plan_workload(spec, catalog, estimators)
    return [p.summary().model_dump(mode="json")["estimate"] for p in selection.ranked]


def test_one_request_gets_the_same_p50s_through_every_door(home: Path, kb_url: str) -> None:
    common = ["--epochs", str(EPOCHS), "--samples", str(SAMPLES)]
    estimate = _cli(
        "estimate", "--model-file", str(MODEL), "--model-class", "SmallCNN",
        "--batch-size", str(BATCH), "--hardware", SYSTEM, *common, "--json",
    )["estimates"]  # fmt: skip
    path = home / "workload.yaml"
    path.write_text(yaml.safe_dump(_workload()))
    plan = [p["estimate"] for p in _cli("plan", str(path), "--json")["feasible"]]
    mcp_estimate, mcp_what_if = asyncio.run(_mcp(kb_url))
    agent = asyncio.run(_agent(kb_url))
    doors = {
        "rightsize estimate": _by_option(estimate),
        "rightsize plan": _by_option(plan),
        "MCP estimate_resources": _by_option(mcp_estimate),
        "MCP what_if": _by_option(mcp_what_if),
        "agents": _by_option(agent),
    }
    reference = doors["rightsize estimate"]
    assert any(k[2] == 0 for k in reference) and any(k[2] == 1 for k in reference)
    for door, answers in doors.items():
        # plan lists the feasible ones only: every one it has, the others have
        assert set(answers) <= set(reference), door
        assert {k[2] for k in answers} == {0, 1}, door  # CPU and GPU options both
        for key, answer in answers.items():
            for quantity in ("iteration_time_s", "run_s", "peak_memory_mb"):
                expected = reference[key][quantity]["p50"]
                assert answer[quantity]["p50"] == pytest.approx(expected, rel=0.01), (
                    door, key, quantity,
                )  # fmt: skip
            assert answer["estimator"] == reference[key]["estimator"], (door, key)
