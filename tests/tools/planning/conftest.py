"""Shared inputs: the seeded catalog, seed 001's workload and the example Pitzer queue."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from knowledge_base.catalog import Catalog
from knowledge_base.seed import load_seed_catalog
from knowledge_base.workload import WorkloadSpec
from tools.planning.queue import QueueModel, QueueSnapshot, load_snapshots
from tools.planning.workload_files import load_workload

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_seed_catalog()


@pytest.fixture(scope="session")
def resnet_spec() -> WorkloadSpec:
    return load_workload(EXAMPLES / "resnet50.yaml")


@pytest.fixture(scope="session")
def pitzer_snapshots() -> list[QueueSnapshot]:
    return load_snapshots(EXAMPLES / "pitzer-queue.json")


@pytest.fixture(scope="session")
def snapshot_time(pitzer_snapshots: list[QueueSnapshot]) -> datetime:
    return pitzer_snapshots[0].taken_at


@pytest.fixture
def pitzer_queue(catalog: Catalog, pitzer_snapshots: list[QueueSnapshot]) -> QueueModel:
    return QueueModel(pitzer_snapshots, catalog)


def spec_with(base: WorkloadSpec, **changes: Any) -> WorkloadSpec:
    """A copy of ``base`` with workload.* and goals.* fields changed (validated again)."""
    document = base.model_dump(mode="json")
    for dotted, value in changes.items():
        section, field = dotted.split("__")
        document[section][field] = value
    return WorkloadSpec.model_validate(document)
