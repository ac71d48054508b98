"""Fixtures shared by the whole suite: the shared data folder, knowledge bases, SLURM."""

from __future__ import annotations

import os

# OpenMP's default spin-waiting turns XGBoost and torch into a crawl when another process
# holds a core (a cross-hardware fit once needed 300 s instead of 0.3 s on a busy 2-core
# machine); sleeping waiters cost nothing here. Set before anything loads libgomp.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.store import KnowledgeBase

if TYPE_CHECKING:
    from tests.private_slurm import PrivateSlurm

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
IN_CI = os.environ.get("CI", "").lower() == "true"


def missing_service(reason: str) -> None:
    """In CI a missing service is a failure, never a silent skip."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: required)")
    pytest.skip(reason)


E2E_DIR = Path(__file__).resolve().parent / "e2e"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: every lane checks every test
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """scripts/test.sh runs the ``slurm and e2e`` tests from tests/e2e alone (collecting
    the rest there costs a busy 2-core machine half a minute), and the other lane leaves
    them out: one marked so elsewhere would run in neither."""
    misplaced = [
        item.nodeid
        for item in items
        if item.get_closest_marker("slurm") is not None
        and item.get_closest_marker("e2e") is not None
        and E2E_DIR not in item.path.parents
    ]
    if misplaced:
        raise pytest.UsageError(
            f"tests marked both slurm and e2e must live in {E2E_DIR}: {', '.join(misplaced)}"
        )


@pytest.fixture(scope="session", autouse=True)
def _private_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests never write the user's ``~/.rightsize``: the session gets its own home, whose
    ``gpu_traces`` the session's tests share (a model's GPU step is traced once per worker,
    not once per test). A test that needs its own home still sets ``RIGHTSIZE_HOME``."""
    home = tmp_path_factory.mktemp("rightsize-home")
    names = ("RIGHTSIZE_HOME", "RIGHTSIZE_GPU_TRACES")
    saved = {name: os.environ.get(name) for name in names}
    os.environ["RIGHTSIZE_HOME"] = str(home)
    os.environ["RIGHTSIZE_GPU_TRACES"] = str(home / "gpu_traces")
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _slurm_only_where_marked(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test not marked ``slurm`` does not see the local cluster (no ``SLURM_CONF``):
    scripts/test.sh runs the ``slurm`` tests beside the rest, and an ``auto`` executor in
    some other test would otherwise submit to the node they are timing."""
    if request.node.get_closest_marker("slurm") is None:
        monkeypatch.delenv("SLURM_CONF", raising=False)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "centers" / "queue_limits.json").exists():
        missing_service(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(params=["sqlite", "mongo"])
async def kb(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    """Every knowledge-base backend: SQLite always, MongoDB when RIGHTSIZE_MONGO_URL is set."""
    if request.param == "sqlite":
        store: KnowledgeBase = SQLiteKnowledgeBase(tmp_path / "kb.db")
    else:
        url = os.environ.get("RIGHTSIZE_MONGO_URL")
        if not url:
            pytest.skip("RIGHTSIZE_MONGO_URL is not set (no MongoDB can be installed here)")
        from knowledge_base.mongo import MongoKnowledgeBase

        database = f"rightsize_test_{os.getpid()}_{abs(hash(request.node.nodeid)) % 10**8}"
        store = MongoKnowledgeBase(url, database=database)
    try:
        yield store
    finally:
        if request.param == "mongo":
            await store._client.drop_database(store._db.name)  # type: ignore[attr-defined]
        await store.close()


@pytest.fixture(scope="session")
def private_slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateSlurm]:
    """A SLURM of the session's own, for tests that stop its controller (never the shared one)."""
    from tests.private_slurm import private_slurm_session

    yield from private_slurm_session(tmp_path_factory)


@pytest.fixture(scope="session")
def slurm_cluster() -> dict[str, str]:
    """Environment for a running local SLURM; starts scripts/slurm/start.sh when root."""
    env = dict(os.environ)
    if shutil.which("sinfo") and _sinfo_ok(env):
        return env
    if os.geteuid() == 0:
        started = subprocess.run(
            ["bash", str(REPO / "scripts" / "slurm" / "start.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        last = started.stdout.strip().splitlines()[-1:] or [""]
        if started.returncode == 0 and last[0].startswith("export SLURM_CONF="):
            env["SLURM_CONF"] = last[0].removeprefix("export SLURM_CONF=")
            os.environ["SLURM_CONF"] = env["SLURM_CONF"]
            if _sinfo_ok(env):
                return env
        missing_service(f"could not start SLURM: {started.stderr[-2000:]}")
    missing_service("no SLURM cluster answers and not root to start one")
    raise AssertionError("unreachable")


def _sinfo_ok(env: dict[str, str]) -> bool:
    try:
        return (
            subprocess.run(
                ["sinfo", "-h"], capture_output=True, timeout=10, env=env, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
