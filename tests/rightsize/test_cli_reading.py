"""The CLI a person reads: a misspelt key named with the one meant, ids never cut at 80
columns (``--wide`` for every column in full), runs under an hour in minutes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from knowledge_base.records import Plan, PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import GenericJob, WorkloadSpec
from rightsize.cli import app
from rightsize.commands.plan import _hours

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL", "KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def test_a_misspelt_key_is_named_with_the_key_meant(tmp_path: Path) -> None:
    text = (EXAMPLES / "resnet50.yaml").read_text().replace("epochs: 50", "epcohs: 50")
    workload = tmp_path / "typo.yaml"
    workload.write_text(text)

    result = runner.invoke(app, ["plan", str(workload)])

    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "workload.epcohs: unknown key 'epcohs': did you mean 'epochs'?" in said
    assert "Traceback" not in result.output


def _long_plan(tmp_path: Path) -> str:
    plan_id = "a-workload-with-a-rather-long-name-for-a-plan-0123456789ab"
    spec = WorkloadSpec(
        name="a-workload-with-a-rather-long-name-for-a-plan",
        user="alice",
        workload=GenericJob(application="sleep", nodes=1, cores=1, walltime_s=60),
    )
    plan = Plan(
        id=plan_id,
        user="alice",
        spec=spec,
        status=PlanStatus.FAILED,
        reason="the batch system cannot run segment 0: " + "a very long reason " * 10,
    )

    async def store() -> None:
        kb = SQLiteKnowledgeBase(tmp_path / "home" / "rightsize.db")
        try:
            await kb.put_plan(plan)
        finally:
            await kb.close()

    (tmp_path / "home").mkdir(parents=True, exist_ok=True)
    asyncio.run(store())
    return plan_id


def test_status_keeps_plan_ids_whole_in_80_columns_and_wide_shows_all(tmp_path: Path) -> None:
    plan_id = _long_plan(tmp_path)

    narrow = runner.invoke(app, ["status"])
    wide = runner.invoke(app, ["status", "--wide"])

    assert narrow.exit_code == 0, narrow.output
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert any(plan_id in line for line in narrow.stdout.splitlines())
    assert wide.exit_code == 0, wide.output
    assert "a very long reason " * 3 in wide.stdout


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0 h"), (42, "42 s"), (300, "5 min"), (3540, "59 min"), (5400, "1.5 h")],
)
def test_runs_under_an_hour_read_in_minutes(seconds: float, shown: str) -> None:
    assert _hours(seconds) == shown


def test_the_plan_table_keeps_every_partition_whole_at_80_columns() -> None:
    result = runner.invoke(app, ["plan", str(EXAMPLES / "resnet50.yaml")], env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    rows = [line.split() for line in lines if line[:4].strip().isdigit()]
    assert rows, result.stdout
    # Every row's second word is a whole SYSTEM/PARTITION of the catalog's GPU partitions.
    for words in rows:
        system, partition = words[1].split("/")
        assert system == "pitzer" and partition.startswith("gpu") and not partition.endswith("-")


def test_the_estimate_table_splits_no_word_at_80_columns() -> None:
    model = EXAMPLES / "models" / "small_cnn.py"
    args = ["estimate", "--model-file", str(model), "--model-class", "SmallCNN"]
    args += ["--batch-size", "32", "--hardware", "pitzer/serial", "--hardware", "owens/batch"]

    result = runner.invoke(app, args, env={"COLUMNS": "80"})

    assert result.exit_code == 0, result.output
    assert all(len(line.rstrip()) <= 80 for line in result.stdout.splitlines())
    assert "s/iteration" in result.stdout and "pitzer/serial" in result.stdout
    assert "owens/batch" in result.stdout
