"""``rightsize estimate`` on a user's model file, and its refusals, through the real app.

The estimators are a small bundle trained here on a slice of the committed dataset
(``RIGHTSIZE_DNN_MODELS``), so the test does not depend on shipped model files.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from knowledge_base.sqlite import SQLiteKnowledgeBase
from rightsize.cli import app
from tools.estimators.cpu.bundle import train_bundle
from tools.estimators.cpu.dataset import Example, GraphStore, load_examples

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "models" / "small_cnn.py"
KEYS = {
    "system", "partition", "nodes", "gpus_per_node", "batch_size", "iteration_time_s",
    "peak_memory_mb", "run_s", "estimator", "coverage_basis", "fits",
}  # fmt: skip


def _sweep_rows() -> list[Example]:
    return load_examples(REPO / "data" / "dnn_profiles" / "cpu_sweep.jsonl")


# The committed sweep's host: the bundle speaks only for that CPU, so each test says this
# host is one (or not), whatever machine runs the suite.
SWEEP_CPU = _sweep_rows()[0].cpu_model


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    chosen = [e for e in _sweep_rows() if e.family == "mlp"][:16]
    store = GraphStore(tmp_path_factory.mktemp("graphs"))
    store.build(chosen)
    folder = tmp_path_factory.mktemp("models")
    train_bundle(chosen, store, kinds=("blackbox",), xgb_rounds=10).save(folder)
    return folder


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models: Path) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RIGHTSIZE_DNN_MODELS", str(models))
    # no per-operator CPU model: the shipped one would answer the local time where it won
    monkeypatch.setenv("RIGHTSIZE_CPU_OPCOST", str(tmp_path / "no-opcost"))
    # this host as the sweep's (its CPU, AVX-512): the bundle speaks for its time (another
    # ISA: test_another_isa_gets_analytic_time_and_the_bundles_memory)
    _host_isa(monkeypatch, "avx512")
    for name in ("KB_URL", "MONGO_URL"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def _host_isa(monkeypatch: pytest.MonkeyPatch, isa: str) -> None:
    from tools.profiling.profiler import hardware_descriptors

    monkeypatch.setattr(
        "tools.estimators.cpu.answer.hardware_descriptors",
        lambda threads: {**hardware_descriptors(threads), "cpu_model": SWEEP_CPU, "cpu_isa": isa},
    )


def _registry(tmp_path: Path) -> list[str]:
    path = tmp_path / "home" / "rightsize.db"
    if not path.exists():
        return []

    async def ids() -> list[str]:
        kb = SQLiteKnowledgeBase(path)
        try:
            return [r.id for r in await kb.list_estimators()]
        finally:
            await kb.close()

    return asyncio.run(ids())


def _estimate(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["estimate", *args])
    return result.exit_code, result.stdout, result.output


def test_json_gives_every_key_per_batch_and_walltime_adds_up(tmp_path: Path) -> None:
    code, stdout, output = _estimate(
        "--model-file", str(EXAMPLE), "--model-class", "SmallCNN",
        "--batch-size", "8", "16", "--epochs", "2", "--samples", "100", "--json",
    )  # fmt: skip
    assert code == 0, output
    estimates = json.loads(stdout)["estimates"]
    assert [e["batch_size"] for e in estimates] == [8, 16]
    for e in estimates:
        assert set(e) >= KEYS and e["system"] == "local"
        for key in ("iteration_time_s", "peak_memory_mb", "run_s"):
            assert e[key]["p10"] <= e[key]["p50"] <= e[key]["p90"]
        iterations = 2 * -(-100 // e["batch_size"])
        assert e["run_s"]["p50"] == pytest.approx(
            iterations * e["iteration_time_s"]["p50"] + 30  # start-up point (analytic.py)
        )
        assert e["fits"] is True and e["estimator"].startswith("dnn-blackbox")
    # both targets' estimators, once, and the planner's GPU roofline
    assert len(_registry(tmp_path)) == 3


def test_another_isa_gets_analytic_time_and_the_bundles_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _host_isa(monkeypatch, "avx2")  # the sweep's rows are all avx512
    code, stdout, output = _estimate(
        "--model-file", str(EXAMPLE), "--model-class", "SmallCNN", "--batch-size", "8", "--json",
    )  # fmt: skip
    assert code == 0, output
    (e,) = json.loads(stdout)["estimates"]
    assert e["estimator"].startswith("analytic-opgraph, dnn-blackbox")
    assert "avx2" in e["note"] and "avx512" in e["note"]
    assert "trained on this machine kind" not in e["note"]


def test_catalog_cpus_no_trained_model_covers_get_the_planners_analytic_answer(
    tmp_path: Path,
) -> None:
    code, stdout, output = _estimate(
        "--model-file", str(EXAMPLE), "--model-class", "SmallCNN", "--batch-size", "8",
        "--hardware", "pitzer", "--json",
    )  # fmt: skip
    assert code == 0, output
    estimates = json.loads(stdout)["estimates"]
    assert estimates and all(e["system"] == "pitzer" for e in estimates)
    cpu = {e["estimator"] for e in estimates if e["gpus_per_node"] == 0}
    assert cpu == {"analytic-fallback"}  # not cpu.answer's op-graph roofline


def test_the_table_names_the_estimator() -> None:
    code, stdout, output = _estimate(
        "--model-file", str(EXAMPLE), "--model-class", "SmallCNN", "--batch-size", "8",
    )  # fmt: skip
    assert code == 0, output
    assert "dnn-blackbox" in stdout and "local" in stdout


OOM_MODEL = """
import torch
from torch import nn
class Hungry(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)
    def forward(self, x):
        # ~10 GB per sample: any batch is past what this machine holds
        return self.a(x) + x.new_zeros(x.shape[0], 2, 1_250_000_000).sum(-1)
def example_batch(n):
    return torch.randn(n, 4), torch.randint(0, 2, (n,))
"""


@pytest.mark.parametrize(
    ("text", "args", "words"),
    [
        (None, ["--epochs", "0"], "--epochs"),
        (None, ["--samples", "-5"], "--samples"),
        ("x = (\n", [], "does not import"),
        ("class Net:\n    pass\n", [], "not an nn.Module"),
        (OOM_MODEL, [], "runs out of memory"),
    ],
)
def test_bad_input_exits_2_names_the_problem_and_writes_nothing(
    tmp_path: Path, text: str | None, args: list[str], words: str
) -> None:
    path = EXAMPLE
    name = "SmallCNN"
    if text is not None:
        path = tmp_path / "model.py"
        path.write_text(text)
        name = "Hungry" if "Hungry" in text else "Net"
    code, _, output = _estimate(
        "--model-file", str(path), "--model-class", name, "--batch-size", "4", *args
    )
    assert code == 2, output
    assert words in output
    assert _registry(tmp_path) == []


def test_profile_sweep_writes_a_dataset_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    args = ["profile", "sweep", "--out", str(out), "--count", "2", "--family", "mlp"]
    args += ["--threads", "1"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    written = out.read_text().splitlines() if out.exists() else []
    skipped = out.with_name(out.name + ".skipped")
    done = len(written) + (len(skipped.read_text().splitlines()) if skipped.exists() else 0)
    assert done == 2
    again = runner.invoke(app, args)
    assert again.exit_code == 0
    assert out.read_text().splitlines() == written  # nothing profiled twice


def test_a_file_without_example_batch_names_the_flags_that_describe_its_input(
    tmp_path: Path,
) -> None:
    model = tmp_path / "plain.py"
    model.write_text(
        "from torch import nn\n\n\nclass Plain(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(8, 2)\n\n"
        "    def forward(self, x):\n        return self.fc(x)\n"
    )
    result = CliRunner().invoke(
        app,
        ["estimate", "--model-file", str(model), "--model-class", "Plain", "--batch-size", "4"],
    )
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert "--input-shape" in line and "--num-classes" in line
    assert "_params" not in line and "workload." not in line


def test_a_local_estimate_at_two_threads_finishes(tmp_path: Path) -> None:
    """The smoke step's forked child once waited for ever on the OpenMP team of its
    parent at --threads 2 (the process's own estimate had started it)."""
    import os
    import subprocess
    import sys

    model = REPO / "examples" / "models" / "small_cnn.py"
    args = ["estimate", "--model-file", str(model), "--model-class", "SmallCNN"]
    args += ["--batch-size", "32", "--threads", "2", "--json"]
    env = {**os.environ, "RIGHTSIZE_HOME": str(tmp_path / "home")}
    env.pop("OMP_NUM_THREADS", None)
    done = subprocess.run(
        [sys.executable, "-m", "rightsize", *args],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)["estimates"]
    assert row["system"] == "local" and row["iteration_time_s"]["p50"] > 0


def test_a_step_that_fails_when_run_for_real_is_refused_naming_the_class(tmp_path: Path) -> None:
    """The smoke step (a real training step in a child, run beside the estimates) finds
    what tracing on fake tensors cannot: here a forward that fails on real data."""
    model = tmp_path / "fails.py"
    model.write_text(
        "import torch\nfrom torch import nn\n"
        "from torch._subclasses.fake_tensor import is_fake\n\n\n"
        "class Fails(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = nn.Linear(8, 2)\n\n"
        "    def forward(self, x):\n"
        "        if not is_fake(x):\n"
        "            raise RuntimeError('the data loader is not mounted')\n"
        "        return self.fc(x)\n\n\n"
        "def example_batch(batch_size):\n"
        "    return torch.randn(batch_size, 8), torch.randint(0, 2, (batch_size,))\n"
    )
    args = ["estimate", "--model-file", str(model), "--model-class", "Fails"]
    result = CliRunner().invoke(app, [*args, "--batch-size", "4", "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)
    assert error["field"] == "--model-class" and "Fails" in error["error"]
    assert "one training step fails" in error["error"] and "not mounted" in error["error"]
