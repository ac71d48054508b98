"""The README's example (examples/resnet50.yaml) plans from the traces shipped in
data/gpu_traces: a first ``rightsize plan`` traces nothing, where it used to spend ~10 s of
CPU tracing ResNet-50."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from rightsize.settings import Settings
from tools.estimators.gpu import workload_trace
from tools.estimators.gpu.memory.scaled import ScalableSteps
from tools.estimators.gpu.trace_folders import SHIPPED_TRACES, TraceFolders
from tools.estimators.gpu.workload_trace import clear_caches

TRACE_DIR_ENV = "RIGHTSIZE_GPU_TRACES"  # the settings' gpu_traces

REPO = Path(__file__).resolve().parents[4]
STALE = (
    "tried to trace {what} for the README's example: the shipped traces in data/gpu_traces "
    "no longer match the tracing code; make them anew as data/gpu_traces/README.md says"
)


def test_the_readme_example_is_planned_from_the_shipped_traces_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACE_DIR_ENV, raising=False)  # the default: home, then shipped
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("RIGHTSIZE_KB_URL", "RIGHTSIZE_MONGO_URL", "RIGHTSIZE_KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(name, raising=False)
    traced: list[str] = []

    def refuse(what: str) -> object:
        def trace(*args: object, **kwargs: object) -> None:
            traced.append(what)
            raise AssertionError(STALE.format(what=what))

        return trace

    monkeypatch.setattr(ScalableSteps, "trace", refuse("its GPU memory"))
    monkeypatch.setattr(workload_trace, "_trace_kernels", refuse("its GPU kernels"))
    clear_caches()
    try:
        result = CliRunner().invoke(
            app, ["plan", str(REPO / "examples" / "resnet50.yaml"), "--json"]
        )
    finally:
        clear_caches()
    assert result.exit_code == 0, result.output
    assert not traced, STALE.format(what=" and ".join(sorted(set(traced))))
    plan = json.dumps(json.loads(result.stdout))
    assert "gpu-opcost-" in plan and "white-box" in plan  # both kinds of trace were used
    assert not (tmp_path / "home" / "gpu_traces").exists()  # read, not traced and stored
    assert sorted(p.suffix for p in SHIPPED_TRACES.glob("*.json")) == [".json", ".json"]


def test_the_shipped_memory_trace_is_the_current_codes() -> None:
    """The example's plan reads no memory trace (its options are far below their GPUs'
    memory), but a plan of it at other batch sizes or on smaller GPUs does: the shipped
    one must match the recorder as it is."""
    import yaml

    from knowledge_base.workload import DNNTraining, WorkloadSpec

    document = yaml.safe_load((REPO / "examples" / "resnet50.yaml").read_text())
    workload = WorkloadSpec.model_validate(document).workload
    assert isinstance(workload, DNNTraining)
    key = (workload_trace.step_key(workload), "sgd", "fp32")
    stored = workload_trace._disk_load(key, TraceFolders(SHIPPED_TRACES))
    assert isinstance(stored, ScalableSteps), STALE.format(what="its GPU memory")


def test_a_named_trace_folder_is_the_only_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path / "traces"))
    path = tmp_path / "traces" / "x.json"
    assert Settings().gpu_trace_folders().readable(path) == [path]
    monkeypatch.delenv(TRACE_DIR_ENV)
    assert Settings().gpu_trace_folders().readable(path) == [path, SHIPPED_TRACES / "x.json"]
