"""What the server runs with: one typed lifespan context, built by the composition root.

``ServerDeps`` is what ``rightsize mcp`` hands the server (how to open the knowledge base,
an executor and the bus); ``AppContext`` is what every tool sees for the server's life.
Nothing here is a global: tests build their own deps around a temporary knowledge base.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

from agents.bus.base import Bus
from agents.metrics import CenterMetrics
from knowledge_base.catalog import System
from knowledge_base.store import KnowledgeBase
from tools.actuators.base import Executor
from tools.planning.chain import ChainConfig, EstimatorChain, PromotedLoader
from tools.planning.cost import DollarRates

__all__ = ["AppContext", "ServerDeps"]


@dataclass(frozen=True, slots=True)
class ServerDeps:
    """The outside world, as the composition root wires it."""

    open_kb: Callable[[], AbstractAsyncContextManager[KnowledgeBase]]
    open_executor: Callable[[System], Executor]
    stdio_user: str
    open_bus: Callable[[], AbstractAsyncContextManager[Bus]] | None = None
    """The bus the center's agents listen on; None: submit_plan refuses (nothing listens)."""
    rates: DollarRates = field(default_factory=DollarRates)
    home: Path = Path("~/.rightsize")
    allow_model_code: bool = True
    """Whether estimate_resources may import a model file's text (it runs that code)."""
    metrics: CenterMetrics = field(default_factory=CenterMetrics)
    """This server's own metrics (tool latency; /metrics over HTTP)."""
    promoted: PromotedLoader | None = None
    """Loads Model Promotion's promoted estimator into the estimator chain; None: the
    chain serves without it."""
    chain: ChainConfig | None = None
    """The estimator chain's settings (``rightsize.wiring.chain_config``: the CLI's and
    the center's, so every door answers alike); None: the defaults under ``home``."""

    def chain_config(self) -> ChainConfig:
        return self.chain or ChainConfig(home=self.home)


@dataclass(slots=True)
class AppContext:
    """The lifespan context every tool, resource and prompt reads."""

    kb: KnowledgeBase
    deps: ServerDeps
    bus: Bus | None

    def chain(self) -> EstimatorChain:
        """The server's one estimator chain (what the CLI's ``plan`` and ``estimate`` ask,
        with these settings): every tool that estimates asks it."""
        from tools.planning.service import shared_chain

        return shared_chain(self.kb, config=self.deps.chain_config(), promoted=self.deps.promoted)
