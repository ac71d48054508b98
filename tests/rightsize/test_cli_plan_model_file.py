"""``rightsize plan`` of the user's own model file (issue #19 item 1): ``model: file.py``
and ``model_class`` as ``estimate --model-file/--model-class`` take them, over the CLI
and MCP; a cause shared by every option is said once, at the top."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from mcp import Client
from typer.testing import CliRunner

from mcp_server.server import build_server
from rightsize.cli import app
from tests.mcp_server.conftest import kb_url, make_deps

__all__ = ["kb_url"]  # the seeded knowledge base fixture the MCP tests use

runner = CliRunner()

MODEL = """
import torch
from torch import nn


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(64, 1000)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def example_batch(batch_size: int):
    return torch.randint(0, 1000, (batch_size, 32)), torch.randint(0, 1000, (batch_size,))
"""


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL", "USD_PER_SU", "USD_PER_CORE_HOUR", "USD_PER_GPU_HOUR"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def _spec(model: str, model_class: str | None = "TinyTransformer") -> dict[str, object]:
    workload: dict[str, object] = {
        "kind": "dnn_training",
        "model": model,
        "dataset_samples": 20000,
        "epochs": 5,
        "batch_sizes": [32],
    }
    if model_class is not None:
        workload["model_class"] = model_class
    return {"name": "tiny", "user": "alice", "workload": workload, "goals": {"systems": ["pitzer"]}}


def _write(folder: Path, spec: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.py").write_text(MODEL)
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_model_file_beside_the_workload_is_planned(tmp_path: Path) -> None:
    workload = _write(tmp_path / "project", _spec("tiny.py"))
    result = runner.invoke(app, ["plan", str(workload), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["recommended"] is not None and data["causes"] == []
    # GPU options are answered by the per-operator GPU model (issue #16), CPU ones by the
    # analytic fallback: the file was traced either way.
    estimator = data["recommended"]["estimator"]
    assert estimator == "analytic-fallback" or estimator.startswith("gpu-opcost-")


def test_a_class_the_file_lacks_exits_2_naming_the_field(tmp_path: Path) -> None:
    workload = _write(tmp_path, _spec("tiny.py", "NoSuchNet"))
    result = runner.invoke(app, ["plan", str(workload)])
    assert result.exit_code == 2
    assert "workload.model_class" in result.stderr and "NoSuchNet" in result.stderr


def test_an_unknown_model_is_said_once_at_the_top(tmp_path: Path) -> None:
    workload = _write(tmp_path, _spec("no-such-model", None))
    text = runner.invoke(app, ["plan", str(workload)])
    assert text.exit_code == 1
    lines = text.stdout.splitlines()
    why = next(i for i, line in enumerate(lines) if line.startswith("why:"))
    assert "no estimator knows workload.model='no-such-model'" in "".join(lines[why : why + 3])
    assert " ".join(text.stdout.split()).count("no estimator knows") == 1
    data = json.loads(runner.invoke(app, ["plan", str(workload), "--json"]).stdout)
    [cause] = data["causes"]
    assert "no-such-model" in cause


async def test_mcp_plans_a_model_file_and_refuses_it_without_model_code(
    tmp_path: Path, kb_url: str
) -> None:
    _write(tmp_path, _spec("tiny.py"))
    spec = _spec(str(tmp_path / "tiny.py"))
    async with Client(build_server(make_deps(kb_url))) as client:
        answer = await client.call_tool("what_if", {"workload": spec, "top": 1})
    assert not answer.is_error, answer.content
    assert answer.structured_content["recommended"] is not None
    deps = make_deps(kb_url)
    async with Client(build_server(replace(deps, allow_model_code=False))) as client:
        refused = await client.call_tool("what_if", {"workload": spec})
    assert refused.is_error and "--allow-model-code" in getattr(refused.content[0], "text", "")
