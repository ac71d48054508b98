"""Opening the knowledge base the settings name, seeded on first use."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from knowledge_base.open import open_knowledge_base
from knowledge_base.seed import load_seed_catalog
from knowledge_base.store import KnowledgeBase
from rightsize.settings import Settings

__all__ = ["knowledge_base"]

log = logging.getLogger(__name__)


@asynccontextmanager
async def knowledge_base(settings: Settings) -> AsyncIterator[KnowledgeBase]:
    """The configured knowledge base; an empty catalog gets the seeded one first."""
    kb = open_knowledge_base(settings.knowledge_base_url())
    try:
        catalog = await kb.get_catalog()
        if not catalog.systems:
            seed = load_seed_catalog()
            await kb.put_catalog(seed)
            log.info("seeded the catalog with %d systems", len(seed.systems))
        yield kb
    finally:
        await kb.close()
