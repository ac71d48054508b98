"""benchmarks/simulate.py runs on every trace of a folder when --only is not given."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _trace(path: Path, machine: int) -> None:
    with gzip.open(path, "wt") as handle:
        handle.write(f"; MaxProcs: {machine}\n")
        for job in range(1, 13):
            user = job % 3
            handle.write(
                f"{job} {job * 10} 5 {50 * job} 4 -1 -1 4 {120 * job} -1 1 {user} 1 1 1 1 -1 -1\n"
            )


def test_without_only_every_trace_in_the_folder_is_replayed(tmp_path: Path) -> None:
    _trace(tmp_path / "ONE-1.swf.gz", 8)
    _trace(tmp_path / "TWO-2.swf.gz", 16)
    script = str(ROOT / "benchmarks" / "simulate.py")
    done = subprocess.run(
        [sys.executable, script, "--repeats", "1", "--traces", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert {row["trace"] for row in rows} == {"ONE-1", "TWO-2"}
    assert all(row["jobs"] == 12 and row["jobs_per_s"] > 0 for row in rows)
