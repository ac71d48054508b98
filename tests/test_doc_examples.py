"""Console examples in the reference docs are what the commands print today."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ["docs/estimate_answer.md", "docs/estimators.md"]


def test_the_docs_console_examples_are_what_the_commands_print() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/doc_examples.py", "--check", *DOCS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_console_output_in_these_docs_is_copied_by_hand() -> None:
    """Every ``console`` block and ``$ rightsize`` line lies inside an example the script writes."""
    example = re.compile(r"<!-- example: .+? -->\n.*?<!-- /example -->", re.S)
    for doc in DOCS:
        rest = example.sub("", (REPO / doc).read_text(encoding="utf-8"))
        by_hand = [
            line for line in rest.splitlines() if line.startswith(("```console", "$ rightsize"))
        ]
        assert not by_hand, f"{doc}: console output outside an example block: {by_hand}"
