"""Console examples in the docs, produced by running them: write them, or check them.

    python scripts/doc_examples.py docs/estimate_answer.md            # rewrite the outputs
    python scripts/doc_examples.py --check docs/estimate_answer.md    # exit 1 where stale
    python scripts/doc_examples.py docs/estimators.md                 # any doc with examples

An example is a block of a Markdown file between ``<!-- example: ARGS -->`` and
``<!-- /example -->``: the script runs ``rightsize ARGS`` (a fresh interpreter, a fresh
temporary home, 100 columns) and puts ``$ rightsize ARGS`` and what it printed in a
``console`` code block there. ``tests/test_doc_examples.py`` runs ``--check``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- example: (?P<args>.+?) -->\n)(?P<body>.*?)(<!-- /example -->)", re.S)


def run(args: str) -> str:
    """``rightsize ARGS`` as a user sees it, in a fresh home."""
    with tempfile.TemporaryDirectory(prefix="rightsize-doc-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIGHTSIZE_")}
        env.update(RIGHTSIZE_HOME=home, COLUMNS="100", PYTHONPATH=str(REPO), NO_COLOR="1")
        done = subprocess.run(
            [sys.executable, "-m", "rightsize", *shlex.split(args)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    output = (done.stdout + done.stderr).rstrip()
    return f"```console\n$ rightsize {args}\n{output}\n```\n"


def render(text: str) -> str:
    """``text`` with every example's output produced afresh."""
    return BLOCK.sub(lambda m: m.group(1) + run(m.group("args")) + m.group(4), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="Exit 1 where an output is stale")
    args = parser.parse_args()
    stale = []
    for path in args.files:
        text = path.read_text(encoding="utf-8")
        fresh = render(text)
        if fresh == text:
            continue
        if args.check:
            stale.append(str(path))
        else:
            path.write_text(fresh, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"stale examples (run python scripts/doc_examples.py): {', '.join(stale)}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
