"""A single-node SLURM of the test session's own, whose controller a test may stop.

``scripts/slurm/start.sh`` brings it up in its own state directory on free ports (no
accounting: the controller is what such tests stop). The shared test cluster is never
stopped: scripts/test.sh runs the ``slurm`` tests in lanes side by side on it, and a
stopped shared controller would fail whatever the other lane was asking it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, missing_service

__all__ = ["PrivateSlurm", "private_slurm_session"]


@dataclass
class PrivateSlurm:
    """A private single-node SLURM; its controller can be stopped and started again."""

    state_dir: Path
    conf: Path

    def _pid(self, daemon: str) -> int | None:
        path = self.state_dir / f"{daemon}.pid"  # removed by a daemon that exits cleanly
        return int(path.read_text().strip()) if path.exists() else None

    def controller_running(self) -> bool:
        pid = self._pid("slurmctld")
        return pid is not None and _alive(pid)

    def stop_controller(self) -> None:
        pid = self._pid("slurmctld")
        assert pid is not None, "the private slurmctld is not running"
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid)

    def start_controller(self) -> None:
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run(["slurmctld", "-f", str(self.conf)], env=env, check=True, timeout=30)
        for _ in range(120):  # up to ~30 s: a restarted controller recovers its state first
            ping = subprocess.run(
                ["scontrol", "ping"], env=env, capture_output=True, text=True, timeout=10
            )
            if ping.returncode == 0 and "UP" in ping.stdout:
                return
            time.sleep(0.25)
        raise AssertionError(f"slurmctld did not come back: {ping.stdout} {ping.stderr}")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie is gone


def _wait_gone(pid: int) -> None:
    for _ in range(120):
        if not _alive(pid):
            return
        time.sleep(0.25)
    raise AssertionError(f"slurmctld (pid {pid}) did not stop in 30 s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def private_slurm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateSlurm]:
    """Start one (tests/conftest.py's ``private_slurm`` fixture); stop it after the session."""
    if os.geteuid() != 0 or not Path("/usr/sbin/slurmctld").exists():
        missing_service("a private SLURM needs root and slurm-wlm (scripts/slurm/start.sh)")
    state_dir = tmp_path_factory.mktemp("slurm-private")
    env = {
        **os.environ,
        "RIGHTSIZE_SLURM_DIR": str(state_dir),
        "RIGHTSIZE_SLURMCTLD_PORT": str(_free_port()),
        "RIGHTSIZE_SLURMD_PORT": str(_free_port()),
        "RIGHTSIZE_SLURM_ACCOUNTING": "0",  # the controller is what fails here
    }
    script = REPO / "scripts" / "slurm"
    started = subprocess.run(
        ["bash", str(script / "start.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if started.returncode != 0:
        missing_service(f"could not start a private SLURM: {started.stderr[-2000:]}")
    try:
        yield PrivateSlurm(state_dir, state_dir / "slurm.conf")
    finally:
        subprocess.run(["bash", str(script / "stop.sh")], env=env, capture_output=True, timeout=120)
