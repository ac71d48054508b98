"""Console examples in the reference docs are what the commands print today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = ["docs/estimate_answer.md"]


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
