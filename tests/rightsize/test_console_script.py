"""Quick start line 1's last step, through the installed console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.e2e
def test_installed_rightsize_script_lists_the_seeded_catalog_on_a_fresh_home(
    tmp_path: Path,
) -> None:
    script = Path(sys.executable).with_name("rightsize")
    assert script.exists(), f"console script missing at {script}: is the package installed?"
    env = {**os.environ, "RIGHTSIZE_HOME": str(tmp_path / "home")}
    env.pop("RIGHTSIZE_KB_URL", None)
    env.pop("RIGHTSIZE_MONGO_URL", None)
    done = subprocess.run(
        [str(script), "catalog", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    systems = json.loads(done.stdout)["systems"]
    assert len(systems) == 6
    assert (tmp_path / "home" / "rightsize.db").exists()
    assert done.stderr == ""  # logs go nowhere unless -v; stdout is pure JSON


@pytest.mark.e2e
def test_python_dash_m_rightsize_reports_errors_on_stderr_with_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "RIGHTSIZE_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "rightsize", "catalog", "show", "nosuch"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "no system 'nosuch'" in done.stderr
    assert done.stdout == ""
