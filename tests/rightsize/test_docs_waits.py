"""docs/waits.md quotes ``rightsize queue predict`` on examples/kth-wait-snapshot.json: the
quoted JSON must be what the command prints today (regenerate it with the command the
doc shows when the predictor changes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from rightsize.cli import app

REPO = Path(__file__).resolve().parents[2]
KTH = "KTH-SP2-1996-2.1-cln.swf.gz"


def test_the_quoted_prediction_is_what_the_command_prints(shared_data: Path) -> None:
    text = (REPO / "docs" / "waits.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- queue-predict-example -->\s*```json\n(.*?)```", text, re.S)
    assert block is not None, "docs/waits.md lost its example block"
    result = CliRunner().invoke(
        app,
        [
            "queue",
            "predict",
            str(REPO / "examples" / "kth-wait-snapshot.json"),
            "--history",
            str(shared_data / "traces" / KTH),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(block.group(1)) == json.loads(result.stdout)
