"""Opening a knowledge base from a URL: the one place that picks the backend."""

from __future__ import annotations

from pathlib import Path

from knowledge_base.errors import InvalidInputError
from knowledge_base.store import KnowledgeBase

__all__ = ["open_knowledge_base"]


def open_knowledge_base(url: str) -> KnowledgeBase:
    """``sqlite:///path/to/file.db``, a plain file path, or ``mongodb://...``/``mongodb+srv://``."""
    if url.startswith(("mongodb://", "mongodb+srv://")):
        from knowledge_base.mongo import MongoKnowledgeBase

        return MongoKnowledgeBase(url)
    if url.startswith("sqlite://"):
        path = url.removeprefix("sqlite://")
        path = path[1:] if path.startswith("/") and not path.startswith("//") else path
        # sqlite:///relative.db -> "relative.db"; sqlite:////abs.db -> "/abs.db"
    elif "://" in url:
        raise InvalidInputError(
            "unsupported knowledge base URL; use sqlite:///FILE or mongodb://HOST",
            field="kb_url",
            value=url,
        )
    else:
        path = url
    from knowledge_base.sqlite import SQLiteKnowledgeBase

    return SQLiteKnowledgeBase(Path(path).expanduser() if path != ":memory:" else path)
