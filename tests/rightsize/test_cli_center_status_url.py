"""``rightsize center status`` finds the center it is pointed at: the one running from
this home, by the record of the ports it serves, and says which URL it tried when none
answers. Before, a center on another ``--status-port`` read as "center DOWN"."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RIGHTSIZE_")}
    return clean | {
        "PYTHONPATH": str(REPO),
        "RIGHTSIZE_HOME": str(tmp_path / "home"),
        "RIGHTSIZE_EXECUTOR": "simulated",
        "COLUMNS": "200",
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _status(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rightsize", "center", "status", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_status_finds_the_running_center_on_its_own_port(tmp_path: Path) -> None:
    env = _env(tmp_path)
    port = _free_port()
    center = subprocess.Popen(
        [sys.executable, "-m", "rightsize", "center", "run", "--status-port", str(port),
         "--duration-s", "120"],
        env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    record = tmp_path / "home" / "center-ports.json"
    try:
        deadline = time.monotonic() + 240
        while not record.exists():
            assert center.poll() is None, center.stderr.read() if center.stderr else ""
            assert time.monotonic() < deadline, "the center never recorded its ports"
            time.sleep(0.5)
        assert json.loads(record.read_text())["status"] == f"http://127.0.0.1:{port}/"

        shown = _status(env, "--json")

        assert shown.returncode == 0, shown.stderr[-2000:]
        assert json.loads(shown.stdout)["parts_up"]["center"] is True
    finally:
        center.terminate()
        center.wait(timeout=120)
    assert not record.exists()  # a stopped center leaves no record behind


def test_status_names_the_url_it_tried_when_no_center_answers(tmp_path: Path) -> None:
    port = _free_port()
    shown = _status(_env(tmp_path), "--url", f"http://127.0.0.1:{port}")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert f"no status server answered at http://127.0.0.1:{port}" in shown.stdout
