"""The prompts of the Intelligence Plane's optional LLM goal planner."""

from __future__ import annotations

from knowledge_base.workload import Goals

__all__ = ["GOALS_SYSTEM_PROMPT", "goals_user_prompt"]

GOALS_SYSTEM_PROMPT = """\
You turn a researcher's request for an HPC batch job into planning goals.
Answer with the Goals fields only; leave out what the request does not say.

- objective: one of fastest, cheapest, earliest_finish, balanced, deadline.
  "as soon as possible" is earliest_finish; a finish-by time with nothing else is deadline.
- deadline: an ISO 8601 datetime with a timezone, resolved against now = {now}.
- budget and budget_unit together: the unit is SU, core-hour or USD, exactly as written.
- gpu_only / cpu_only: only when the request insists on one kind of device.
- systems: names among [{systems}] the request asks for; partitions: queue names it asks for.
"""


def goals_user_prompt(text: str, explicit: Goals) -> str:
    """The request and the goals it already states (those stay as they are)."""
    stated = explicit.model_dump_json(exclude_defaults=True)
    return f"Request: {text.strip() or '(no free text)'}\nGoals already stated: {stated}"
