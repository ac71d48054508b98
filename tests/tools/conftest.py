"""Fixtures the tools' tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from knowledge_base.sqlite import SQLiteKnowledgeBase


@pytest.fixture
async def sqlite_kb(tmp_path: Path) -> AsyncIterator[SQLiteKnowledgeBase]:
    """A fresh SQLite knowledge base (``kb``, from tests/conftest.py, is every backend)."""
    async with SQLiteKnowledgeBase(tmp_path / "kb.db") as store:
        yield store
