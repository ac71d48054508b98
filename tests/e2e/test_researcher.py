"""A researcher's first hour (issue #19's check), through the CLI on the real local SLURM.

What a researcher does, one command at a time, each its own process: write a small
PyTorch model file and the script that trains it, tell Rightsize about the SLURM this
machine talks to (``catalog import slurm``, as "local"), ``plan`` the model file, ``submit`` the
recommended option to the embedded center, ``watch`` it to completion, read ``status
--json``, then ``submit`` another plan and ``cancel`` it. SLURM's accounting (sacct, or
the jobcomp log where slurmdbd is not configured) must agree with the ledger. Run once;
about two minutes on the shared 2-core VM, most of it the training job importing torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.actuators.slurm import parse_jobcomp

REPO = Path(__file__).resolve().parents[2]

MODEL = '''\
import torch
from torch import nn


class TinyNet(nn.Module):
    """Two linear layers: 676 parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def example_batch(batch_size: int):
    return torch.randn(batch_size, 16), torch.randint(0, 4, (batch_size,))
'''

TRAIN = """\
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny import TinyNet, example_batch  # noqa: E402

epochs = int(os.environ["RIGHTSIZE_EPOCHS"])
batch_size = int(os.environ["RIGHTSIZE_BATCH_SIZE"])
torch.manual_seed(0)
model = TinyNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(1, epochs + 1):
    for _ in range(20):
        x, y = example_batch(batch_size)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"RIGHTSIZE_PROGRESS epoch={epoch}/{epochs}", flush=True)
torch.save(model.state_dict(), "tiny.pt")
"""


TIMES: list[tuple[str, float]] = []  # each command's wall time, printed at the end (-s)


def _rightsize(env: dict[str, str], *args: str, code: int = 0, timeout_s: float = 300) -> Any:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "rightsize", *args],
        cwd=env["PROJECT"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    TIMES.append((" ".join(args[:2]), time.monotonic() - began))
    assert done.returncode == code, f"rightsize {' '.join(args)}: {done.stderr[-3000:]}"
    if "--json" not in args:
        return done.stdout
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if args[0] == "watch":  # one view per change
        return [json.loads(line) for line in lines]
    return json.loads(done.stdout)


def _accounted(env: dict[str, str], job_id: str) -> str:
    """SLURM's own word on ``job_id``: sacct where slurmdbd runs, else the jobcomp log
    (a bounded wait: accounting is written as the job ends)."""
    deadline = time.monotonic() + 30
    while True:
        state = _sacct(env, job_id)
        if state is None:
            state = _jobcomp(env).get(job_id, {}).get("JobState", "")
        if state or time.monotonic() >= deadline:
            return state
        time.sleep(1)


def _sacct(env: dict[str, str], job_id: str) -> str | None:
    done = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        return None  # no accounting storage here
    return done.stdout.split()[0] if done.stdout.split() else ""


def _jobcomp(env: dict[str, str]) -> dict[str, dict[str, str]]:
    config = subprocess.run(
        ["scontrol", "show", "config"], env=env, capture_output=True, text=True, timeout=30
    ).stdout
    where = [line.split("=", 1)[1].strip() for line in config.splitlines() if "JobCompLoc" in line]
    path = Path(where[0]) if where else None
    return parse_jobcomp(path.read_text()) if path is not None and path.is_file() else {}


@pytest.mark.e2e
@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_a_researcher_plans_their_model_file_submits_watches_checks_and_cancels(
    slurm_cluster: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "tiny.py").write_text(MODEL)
    (project / "train.py").write_text(TRAIN)
    spec = {
        "name": "tinynet",
        "user": "alice",
        "workload": {
            "kind": "dnn_training",
            "model": "tiny.py",
            "model_class": "TinyNet",
            "dataset_samples": 640,
            "epochs": 3,
            "batch_sizes": [32],
            "command": f"{sys.executable} train.py",  # beside plan.yaml
        },
        "goals": {"systems": ["local"]},
    }
    (project / "plan.yaml").write_text(yaml.safe_dump(spec))
    sleeper = {
        "name": "sleeper",
        "user": "alice",
        "workload": {"kind": "generic", "application": "sleep 300", "cores": 1, "walltime_s": 300},
        "goals": {"systems": ["local"]},
    }
    (project / "sleeper.yaml").write_text(yaml.safe_dump(sleeper))
    env = {
        **slurm_cluster,
        "PROJECT": str(project),
        "PYTHONPATH": str(REPO),
        "RIGHTSIZE_HOME": str(tmp_path / "home"),
        "RIGHTSIZE_EXECUTOR": "slurm",
        "RIGHTSIZE_POLL_INTERVAL_S": "1",
    }
    for name in ("KB_URL", "MONGO_URL", "KAFKA_BOOTSTRAP", "LLM_MODEL", "LOCAL_SYSTEM"):
        env.pop(f"RIGHTSIZE_{name}", None)
    started = time.monotonic()

    _rightsize(env, "catalog", "import", "slurm")  # as "local": the name the center uses
    planned = _rightsize(env, "plan", "plan.yaml", "--json")
    assert planned["recommended"] is not None, planned
    assert planned["recommended"]["system"] == "local"

    sent = _rightsize(env, "submit", "plan.yaml", "--json")
    plan_id = sent["plan_id"]
    assert sent["option_id"] == planned["recommended"]["option_id"]  # exactly what was shown
    assert sent["state"] in ("submitted", "running") and len(sent["jobs"]) == 1
    [job_id] = [j["job_id"] for j in sent["jobs"]]

    views = _rightsize(  # the job may wait behind those of the slurm lane beside this one
        env, "watch", plan_id, "--json", "--interval-s", "1", "--timeout-s", "600", timeout_s=660
    )
    assert views[-1]["state"] == "completed", views[-1]
    assert views[-1]["progress_line"] == "epoch 3/3" and views[-1]["progress"] == 1.0
    assert (views[-1]["segment"], views[-1]["segments"]) == (1, 1)

    [shown] = _rightsize(env, "status", plan_id, "--json")["plans"]
    assert (shown["plan_id"], shown["state"], shown["reason"]) == (
        plan_id,
        "completed",
        f"job {job_id} completed (epoch 3/3) after 1 job",
    )
    [job] = shown["jobs"]
    assert (job["job_id"], job["state"]) == (job_id, "completed")
    assert _accounted(env, job_id) == "COMPLETED"

    other = _rightsize(env, "submit", "sleeper.yaml", "--json")
    [other_job] = [j["job_id"] for j in other["jobs"]]
    cancelled = _rightsize(env, "cancel", other["plan_id"], "--reason", "wrong input", "--json")
    assert cancelled["status"] == "cancelled" and cancelled["requested"], cancelled
    assert _accounted(env, other_job) == "CANCELLED"
    everything = {p["plan_id"]: p for p in _rightsize(env, "status", "--json")["plans"]}
    assert everything[other["plan_id"]]["state"] == "cancelled"
    assert everything[other["plan_id"]]["reason"] == "wrong input (by alice)"
    assert [j["state"] for j in everything[other["plan_id"]]["jobs"]] == ["cancelled"]
    jobs = {j["job_id"]: j["state"] for j in _rightsize(env, "jobs", "--json")["jobs"]}
    assert jobs == {job_id: "completed", other_job: "cancelled"}
    each = ", ".join(f"{what} {seconds:.0f} s" for what, seconds in TIMES)
    print(f"researcher's hour on the local SLURM: {time.monotonic() - started:.0f} s wall ({each})")
