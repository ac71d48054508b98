"""The MongoDB backend's failure path, against a real closed port (no server needed)."""

from __future__ import annotations

import socket

import pytest

from knowledge_base.errors import StorageError
from knowledge_base.mongo import MongoKnowledgeBase
from knowledge_base.open import open_knowledge_base


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens once the socket is closed


async def test_unreachable_mongodb_is_a_transient_storage_error_naming_the_url() -> None:
    url = f"mongodb://127.0.0.1:{_closed_port()}/"
    kb = MongoKnowledgeBase(url, server_timeout_ms=200)
    try:
        with pytest.raises(StorageError) as caught:
            await kb.get_catalog()
        assert caught.value.transient
        assert url in str(caught.value)
        with pytest.raises(StorageError):
            await kb.complete_event("agent", "e1")
    finally:
        await kb.close()


def test_kb_url_picks_the_backend() -> None:
    assert isinstance(open_knowledge_base("mongodb://127.0.0.1:1/"), MongoKnowledgeBase)
    with pytest.raises(ValueError, match="postgres://x"):
        open_knowledge_base("postgres://x")


def test_only_failures_a_retry_can_fix_are_transient() -> None:
    """The old backend called every driver error transient, a duplicate key included."""
    from pymongo.errors import AutoReconnect, DuplicateKeyError, WriteError

    from knowledge_base.mongo import storage_error

    url = "mongodb://db:27017/"
    assert storage_error(AutoReconnect("primary stepped down"), url).transient
    assert not storage_error(DuplicateKeyError("E11000 duplicate key"), url).transient
    assert not storage_error(WriteError("document failed validation"), url).transient
    assert url in str(storage_error(DuplicateKeyError("E11000"), url))
