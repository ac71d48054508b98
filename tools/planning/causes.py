"""Causes shared by every option that cannot run, said once instead of once per option.

A plan with no feasible option lists its options closest first; when one cause blocks
them all (an unknown model, a memory no node has, a partition pattern that matches
nothing) that list buried it: options failing on a node count sort first, and the cause
itself showed only in ``--json``. ``shared_causes`` finds the reasons that every option
of their kind gives, word for word once the ``system/partition`` prefix is set aside:
an estimator's refusal that every estimated option got, or any reason every infeasible
option got. Pure: the same options give the same causes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tools.planning.results import Infeasible

__all__ = ["reason_text", "shared_causes"]


def reason_text(item: Infeasible) -> str:
    """The reason without the ``system/partition`` it starts with, if it does."""
    where = f"{item.system}/{item.partition}"
    return item.reason[len(where) :].lstrip(" :") if item.reason.startswith(where) else item.reason


def shared_causes(infeasible: Sequence[Infeasible], feasible_count: int) -> list[str]:
    """Reasons that block every option of their kind, most options first."""
    if feasible_count or len(infeasible) < 2:
        return []
    texts = [reason_text(item) for item in infeasible]
    counts = Counter(texts)
    causes: list[str] = []
    if len(counts) == 1:
        return [texts[0]]
    by_kind: dict[str, Counter[str]] = {}
    for item, text in zip(infeasible, texts, strict=True):
        by_kind.setdefault(item.constraint, Counter())[text] += 1
    for kind in ("estimator", "memory", "gpu_memory", "goals", "catalog"):
        reasons = by_kind.get(kind)
        if reasons is not None and len(reasons) == 1 and sum(reasons.values()) >= 2:
            causes.extend(reasons)
    return sorted(causes, key=lambda text: -counts[text])
