"""The promoted estimator: the registry record read once per promotion, and its loaders.

    record    the registry's promoted model, as read by the chain
    runtime   the promoted run-time models and how each kind is loaded

Import from the module that holds a name; the package exports nothing.
"""

from __future__ import annotations

__all__: list[str] = []
