"""One intra-op thread in these tests: the machine is shared, and OpenMP's spin-waiting
makes multi-threaded steps crawl whenever another process holds a core."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    torch.set_num_threads(1)
