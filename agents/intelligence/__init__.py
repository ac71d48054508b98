"""The Intelligence Plane: each request as a LangGraph graph, checkpointed per plan id.

state.py    what a request's thread holds (JSON values, an outbox, handled ids)
context.py  what it runs with: the goal planner, approval mode, bounds, the clock
prompts.py  the optional LLM goal planner's prompts
goals.py    goal and constraint inference: rules by default, an LLM when configured
graph.py    the graph: intake -> goals -> estimates -> plans -> choose -> execute -> follow-up
agent.py    the agent on the shared runtime: senses answers, resumes threads, publishes
"""

from agents.intelligence.agent import IntelligencePlane, open_checkpointer, thread_ids
from agents.intelligence.context import PlaneContext
from agents.intelligence.goals import (
    InferredGoals,
    LLMGoalPlanner,
    RuleGoalPlanner,
    parse_budget,
    parse_deadline,
)
from agents.intelligence.graph import build_graph, compile_plane, graph

__all__ = [
    "InferredGoals",
    "IntelligencePlane",
    "LLMGoalPlanner",
    "PlaneContext",
    "RuleGoalPlanner",
    "build_graph",
    "compile_plane",
    "graph",
    "open_checkpointer",
    "parse_budget",
    "parse_deadline",
    "thread_ids",
]
