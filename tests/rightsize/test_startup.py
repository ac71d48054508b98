"""Start-up stays light: the CLI loads torch, xgboost and langgraph only where a command
runs code that needs them (timings: ``benchmarks/startup.py``; these tests check imports,
which do not depend on the machine's load)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rightsize.cli import COMMANDS

HEAVY = ("torch", "xgboost", "langgraph", "pandas", "matplotlib", "mcp")


def _loaded_after(code: str) -> list[str]:
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert _loaded_after("import rightsize.cli") == []


def test_root_help_imports_no_command_module() -> None:
    code = (
        "import sys\nfrom rightsize.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert not [m for m in sys.modules if m.startswith('rightsize.commands.')], "
        "[m for m in sys.modules if m.startswith('rightsize.commands.')]"
    )
    assert _loaded_after(code) == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_commands_help_loads_no_heavy_library(name: str) -> None:
    code = (
        f"from rightsize.cli import app\ntry:\n    app([{name!r}, '--help'])\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code"
    )
    assert _loaded_after(code) == []


def test_names_spelled_out_for_a_light_help_match_their_sources() -> None:
    from agents.center import AGENT_NAMES
    from agents.replay import AGENT_CLASSES
    from mcp_server.server import DEFAULT_HOST
    from rightsize.commands import center, mcp, replay

    assert center.AGENT_NAMES == AGENT_NAMES
    assert tuple(AGENT_CLASSES) == replay.AGENT_NAMES
    assert mcp.DEFAULT_HOST == DEFAULT_HOST
