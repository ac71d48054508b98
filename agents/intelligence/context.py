"""What the Intelligence Plane's graph runs with but does not checkpoint: its run context.

LangGraph passes it to every node (``Runtime[PlaneContext]``); it holds the goal planner
(rules, or an LLM chosen by settings), whether a person approves plans, the bounds on
retries and re-plans, and the clock, so tests can fix the time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from agents.intelligence.goals import GoalPlanner, RuleGoalPlanner
from agents.intelligence.replan import ReplanBounds

__all__ = ["PlaneContext"]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class PlaneContext:
    goal_planner: GoalPlanner = field(default_factory=RuleGoalPlanner)
    approval: Literal["auto", "user"] = "auto"
    max_estimate_rounds: int = 3  # estimates asked again after profiling, at most
    replan: ReplanBounds = field(default_factory=ReplanBounds)  # re-plans per plan, at most
    systems: tuple[str, ...] = ()  # catalog names, for "on frontera"
    now: Callable[[], datetime] = _now
