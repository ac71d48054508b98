"""A new user's first hour on the embedded center (no SLURM: the simulated cluster).

Their own model file, a plan that uses GPUs, ``submit --wait`` to its end; plans from
several processes at once; a plan submitted without ``--wait`` followed later by
another process. Every process opens the one simulated cluster of its home (its journal
file), so job ids never repeat and a job keeps running between processes. Real
subprocesses, as a user runs them; the clock runs 20x so the jobs take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

LSTM = """\
import torch
from torch import nn


class LSTMLM(nn.Module):
    def __init__(self, vocab: int = 10000, dim: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, layers, batch_first=True)
        self.head = nn.Linear(dim, vocab)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.head(out).flatten(0, 1)


def example_batch(batch_size: int):
    return torch.randint(0, 10000, (batch_size, 35)), torch.randint(0, 10000, (batch_size * 35,))
"""

LSTM_PLAN = """\
name: lstm-lm
user: newbie
workload:
  kind: dnn_training
  model: {model}
  model_class: LSTMLM
  dataset_samples: 20000
  epochs: 2
  batch_sizes: [32, 64]
goals:
  gpu_only: true
  systems: [pitzer]
  exclude_partitions: ["condo-*", "systems"]
"""

SLEEP = """\
name: {name}
user: newbie
workload:
  kind: generic
  application: sleep
  nodes: 1
  cores: 1
  walltime_s: 120
goals:
  systems: [owens]
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RIGHTSIZE_")}
    return clean | {
        "PYTHONPATH": str(REPO),
        "RIGHTSIZE_HOME": str(tmp_path / "home"),
        "RIGHTSIZE_EXECUTOR": "simulated",
        "RIGHTSIZE_POLL_INTERVAL_S": "0.2",
        "RIGHTSIZE_SIMULATED_SPEEDUP": "20",
    }


def rightsize(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rightsize", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_an_own_model_file_planned_on_gpus_runs_to_its_end_with_submit_wait(
    tmp_path: Path, env: dict[str, str]
) -> None:
    model = tmp_path / "lstm.py"
    model.write_text(LSTM)
    spec = tmp_path / "lstm.yaml"
    spec.write_text(LSTM_PLAN.format(model=model))

    done = rightsize(env, "submit", str(spec), "--wait", "--timeout-s", "300", "--json")

    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["state"] == "completed", result
    assert result["partition"].startswith("gpu")  # a GPU partition: a GPU plan ran
    [job] = result["jobs"]
    assert job["state"] == "completed"
    status = json.loads(rightsize(env, "status", result["plan_id"], "--json").stdout)
    assert status["plans"][0]["state"] == "completed"


def test_plans_from_three_processes_at_once_get_three_job_ids_and_run_on(
    tmp_path: Path, env: dict[str, str]
) -> None:
    specs = []
    for name in ("one", "two", "three"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(SLEEP.format(name=name))
        specs.append(path)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "rightsize", "submit", str(path), "--json"],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for path in specs
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-2000:]
        results.append(json.loads(out))

    ids = [r["jobs"][0]["job_id"] for r in results]
    assert len(set(ids)) == 3, ids
    assert all("only while a center runs" in r["note"] for r in results)

    # Another process, later: the jobs ran on while no process looked; the plans end.
    watched = rightsize(env, "watch", results[0]["plan_id"], "--timeout-s", "120")
    assert watched.returncode == 0, watched.stdout + watched.stderr[-2000:]
    assert "completed" in watched.stdout
    jobs = json.loads(rightsize(env, "jobs", "--json").stdout)["jobs"]
    assert sorted(j["job_id"] for j in jobs) == sorted(ids)


async def test_a_plan_submitted_through_mcp_with_center_runs_to_its_end(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """``rightsize mcp --center`` over stdio: build_plan, submit_plan, then
    get_plan_status until the plan is over; the executor the tool opens sees the job
    the center's Scheduler submitted (one cluster), so no job error on the way."""
    import asyncio

    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rightsize", "mcp", "--center"],
        env=env | {"RIGHTSIZE_MCP_USER": "newbie"},
        cwd=str(REPO),
    )
    spec = {
        "name": "mcp-sleep",
        "user": "newbie",
        "workload": {
            "kind": "generic",
            "application": "sleep",
            "nodes": 1,
            "cores": 1,
            "walltime_s": 120,
        },
        "goals": {"systems": ["owens"]},
    }
    async with Client(params, read_timeout_seconds=120) as client:
        built = (await client.call_tool("build_plan", {"workload": spec})).structured_content
        assert built is not None and built["plan_id"], built
        submitted = await client.call_tool(
            "submit_plan", {"plan_id": built["plan_id"], "confirm": True}
        )
        assert not submitted.is_error, submitted.content
        seen: list[dict[str, object]] = []
        for _ in range(600):
            answer = await client.call_tool("get_plan_status", {"plan_id": built["plan_id"]})
            status = answer.structured_content
            assert status is not None
            seen.append(status)
            if status["plan"]["status"] in ("completed", "failed", "cancelled"):
                break
            await asyncio.sleep(0.2)
    assert seen[-1]["plan"]["status"] == "completed", seen[-1]
    assert all(not s["job_errors"] for s in seen), [s["job_errors"] for s in seen]
    assert [j["state"] for j in seen[-1]["jobs"]] == ["completed"]
