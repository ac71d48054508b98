"""``plan --objective cheapest`` with dollar rates (issue #19 item 5): the ranking and the
notes agree; a plan shown at fewer dollars never ranks below a dearer one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_HOME", str(tmp_path / "home"))
    for name in ("KB_URL", "MONGO_URL", "USD_PER_SU", "USD_PER_CORE_HOUR", "USD_PER_GPU_HOUR"):
        monkeypatch.delenv(f"RIGHTSIZE_{name}", raising=False)


def _cheapest() -> dict[str, list[dict[str, object]] | list[str]]:
    result = runner.invoke(
        app, ["plan", str(EXAMPLES / "resnet50.yaml"), "--objective", "cheapest", "--json"]
    )
    assert result.exit_code == 0, result.output
    data: dict[str, list[dict[str, object]] | list[str]] = json.loads(result.stdout)
    return data


def _dollars(plans: list[dict[str, object]]) -> list[float]:
    return [float(p["cost_usd"]) for p in plans if p["cost_usd"] is not None]  # type: ignore[arg-type]


def test_every_rate_set_ranks_by_dollars_and_claims_nothing_incomparable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, rate in (("SU", "0.02"), ("CORE_HOUR", "0.03"), ("GPU_HOUR", "0.5")):
        monkeypatch.setenv(f"RIGHTSIZE_USD_PER_{name}", rate)
    data = _cheapest()
    feasible = data["feasible"]
    assert isinstance(feasible, list) and all(isinstance(p, dict) for p in feasible)
    dollars = _dollars(feasible)  # type: ignore[arg-type]
    assert len(dollars) == len(feasible) and dollars == sorted(dollars)
    assert not any("cannot be compared" in str(n) for n in data["notes"])


def test_some_rates_set_rank_priced_plans_first_by_dollars_and_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RIGHTSIZE_USD_PER_CORE_HOUR", "0.03")
    data = _cheapest()
    feasible = data["feasible"]
    assert isinstance(feasible, list)
    priced = [p["cost_usd"] is not None for p in feasible]  # type: ignore[index]
    assert any(priced) and not all(priced)
    assert priced == sorted(priced, reverse=True)  # every priced plan before any other
    dollars = _dollars(feasible)  # type: ignore[arg-type]
    assert dollars == sorted(dollars)
    notes = [str(n) for n in data["notes"]]
    assert not any("cannot be compared" in n for n in notes)
    assert any(n.startswith(f"dollar rates price {len(dollars)} of {len(feasible)}") for n in notes)
