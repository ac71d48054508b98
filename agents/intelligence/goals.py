"""Goal and constraint inference: from a request's words and fields to a ``Goals`` model.

Two planners fill the same pydantic model (``knowledge_base.workload.Goals``):

- ``RuleGoalPlanner`` (the default; no LLM needed): phrases such as "cheapest",
  "fastest", "as soon as possible", "finish by Friday 9am", "within 6 hours", "under 200
  SU", "at most 500 core-hours", "GPU only", "no GPUs", "on frontera", "in the debug
  queue";
- ``LLMGoalPlanner``: any LangChain chat model. It asks for structured output into
  ``Goals`` (``with_structured_output``) and, for models without it, for a JSON object
  it then validates; on any failure it falls back to the rules and says so.

Fields the request sets (``spec.goals`` values other than the defaults) always win over
inferred ones: the user's structured answer is more precise than anyone's reading of
their words. (A goal set to its default value cannot be told apart from one left unset
once the request has crossed the bus, so the words may change it.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.intelligence.prompts import GOALS_SYSTEM_PROMPT, goals_user_prompt
from knowledge_base.workload import Goals, Objective

__all__ = [
    "GoalPlanner",
    "InferredGoals",
    "LLMGoalPlanner",
    "RuleGoalPlanner",
    "merge_goals",
    "parse_budget",
    "parse_deadline",
]


class InferredGoals(BaseModel):
    """The planner's answer: the goals, who inferred them, and what it read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goals: Goals
    source: str = Field(description="rules, llm, or why the LLM was not used")
    notes: list[str] = Field(default_factory=list, description="What was read from the text")


class GoalPlanner(Protocol):
    async def infer(
        self, text: str, explicit: Goals, *, now: datetime, systems: Sequence[str]
    ) -> InferredGoals: ...


# -- the rules -------------------------------------------------------------------------------

_OBJECTIVES: list[tuple[re.Pattern[str], Objective]] = [
    (
        re.compile(
            r"\b(cheapest|cheap|lowest cost|least expensive|minimi[sz]e (?:the )?cost"
            r"|save (?:su|money|core-?hours))\b"
        ),
        Objective.CHEAPEST,
    ),
    (
        re.compile(
            r"\b(fastest|quickest|shortest run|as fast as possible"
            r"|minimi[sz]e (?:the )?run ?time)\b"
        ),
        Objective.FASTEST,
    ),
    (
        re.compile(r"\b(earliest|as soon as possible|asap|soonest|first to finish)\b"),
        Objective.EARLIEST_FINISH,
    ),
    (re.compile(r"\b(balanced?|good trade-?off|compromise)\b"), Objective.BALANCED),
]
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_UNITS = {
    "su": "SU",
    "sus": "SU",
    "service units": "SU",
    "core-hours": "core-hour",
    "core hours": "core-hour",
    "core-hour": "core-hour",
    "core hour": "core-hour",
    "core-h": "core-hour",
    "usd": "USD",
    "dollars": "USD",
    "$": "USD",
}
_BUDGET = re.compile(
    r"\b(?:under|below|less than|at most|no more than|max(?:imum)?|budget(?: of)?|within)\s+"
    r"(?P<dollar>\$)?\s*(?P<amount>\d+(?:[.,]\d+)?)\s*(?P<k>k\b)?\s*"
    r"(?P<unit>service units|core[- ]hours?|core-h|sus?|usd|dollars)?",
    re.IGNORECASE,
)
_TIME = re.compile(
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?", re.IGNORECASE
)
_RELATIVE = re.compile(
    r"\b(?:within|in|in the next)\s+(?P<n>\d+(?:\.\d+)?)\s*"
    r"(?P<unit>minutes?|mins?|hours?|hrs?|h|days?|d)\b",
    re.IGNORECASE,
)
_BY = re.compile(
    r"\b(?:finish(?:ed)? by|done by|complete(?:d)? by|ready by|by|before|deadline(?: is| of)?:?)\s+"
    r"(?P<when>[^,;.]+)",
    re.IGNORECASE,
)


def _clock(text: str) -> time | None:
    text = text.strip().lower()
    if "noon" in text:
        return time(12, 0)
    if "midnight" in text:
        return time(0, 0)
    match = _TIME.search(text)
    if match is None:
        return None
    hour, minute = int(match.group("hour")), int(match.group("minute") or 0)
    ampm = (match.group("ampm") or "").replace(".", "").lower()
    if ampm == "pm" and hour < 12:
        hour += 12
    if ampm == "am" and hour == 12:
        hour = 0
    if not (0 <= hour < 24 and 0 <= minute < 60):
        return None
    if not ampm and match.group("minute") is None and not re.search(r"\bat\s+\d", text):
        # a bare number ("by 200 SU") is not a time of day
        return None
    return time(hour, minute)


def parse_deadline(text: str, now: datetime, tz: tzinfo = UTC) -> datetime | None:
    """A deadline in ``text`` ("finish by Friday 9am", "within 6 hours", ISO), or None."""
    lowered = text.lower()
    relative = _RELATIVE.search(lowered)
    if relative is not None and not re.search(
        r"\b(su|core|usd|\$)", lowered[relative.end() : relative.end() + 12]
    ):
        n, unit = float(relative.group("n")), relative.group("unit")
        seconds = n * (60 if unit.startswith("m") else 86400 if unit.startswith("d") else 3600)
        return now + timedelta(seconds=seconds)
    for match in _BY.finditer(text):
        when = match.group("when").strip()
        iso = re.match(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?", when)
        if iso:
            parsed = datetime.fromisoformat(iso.group(0).replace(" ", "T"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=tz)
        words = when.lower()
        local_now = now.astimezone(tz)
        day = None
        if "tomorrow" in words:
            day = local_now.date() + timedelta(days=1)
        elif "today" in words or "tonight" in words:
            day = local_now.date()
        else:
            for index, name in enumerate(_WEEKDAYS):
                if re.search(rf"\b{name[:3]}(?:{name[3:]})?\b", words):
                    ahead = (index - local_now.weekday()) % 7
                    day = local_now.date() + timedelta(days=ahead)
                    break
        clock = _clock(words)
        if day is None and clock is None:
            continue
        if day is None:
            day = local_now.date()
        at = datetime.combine(
            day, clock or (time(23, 59) if "tonight" not in words else time(23, 0)), tz
        )
        if at <= now:
            at += timedelta(days=7 if any(n[:3] in words for n in _WEEKDAYS) else 1)
        return at
    return None


def parse_budget(text: str) -> tuple[float, str] | None:
    """(amount, unit) from "under 200 SU", "at most 1,500 core-hours", "budget of $50"."""
    for match in _BUDGET.finditer(text):
        unit_text = (match.group("unit") or "").lower()
        unit = "USD" if match.group("dollar") else _UNITS.get(unit_text.replace("  ", " "))
        if unit is None and unit_text:
            unit = _UNITS.get(unit_text.rstrip("s")) or _UNITS.get(unit_text + "s")
        if unit is None:
            continue  # "within 3 hours" is a deadline, not a budget
        amount = float(match.group("amount").replace(",", ""))
        if match.group("k"):
            amount *= 1000
        return amount, unit
    return None


def _systems_named(text: str, systems: Sequence[str]) -> list[str]:
    lowered = text.lower()
    return [
        s
        for s in systems
        if re.search(rf"\b(?:on|at|use|using)\s+{re.escape(s.lower())}\b", lowered)
    ]


def _partitions_named(text: str) -> list[str]:
    found = re.findall(
        r"\b(?:in|on|use|using|through)\s+(?:the\s+)?([A-Za-z0-9_*.-]+)\s+(?:queue|partition)s?\b",
        text,
        re.IGNORECASE,
    )
    found += re.findall(r"\b(?:queue|partition)\s+([A-Za-z0-9_*.-]+)\b", text, re.IGNORECASE)
    return list(
        dict.fromkeys(p for p in found if p.lower() not in {"the", "a", "any", "debug-like"})
    )


@dataclass
class RuleGoalPlanner:
    """Reads goals from phrases; no model, deterministic, the default."""

    tz: tzinfo = UTC

    async def infer(
        self, text: str, explicit: Goals, *, now: datetime, systems: Sequence[str] = ()
    ) -> InferredGoals:
        return self.infer_now(text, explicit, now=now, systems=systems)

    def infer_now(
        self, text: str, explicit: Goals, *, now: datetime, systems: Sequence[str] = ()
    ) -> InferredGoals:
        lowered = text.lower()
        read: dict[str, Any] = {}
        notes: list[str] = []
        for pattern, objective in _OBJECTIVES:
            if (found := pattern.search(lowered)) is not None:
                read["objective"] = objective
                notes.append(f"objective {objective.value} ({found.group(0)!r})")
                break
        deadline = parse_deadline(text, now, self.tz)
        if deadline is not None:
            read["deadline"] = deadline
            notes.append(f"deadline {deadline.isoformat()}")
            read.setdefault("objective", Objective.DEADLINE)
        budget = parse_budget(text)
        if budget is not None:
            read["budget"], read["budget_unit"] = budget
            notes.append(f"budget {budget[0]:g} {budget[1]}")
        if re.search(
            r"\b(gpus? only|only (?:on )?gpus?|gpu[- ]only|must use (?:a )?gpus?)\b", lowered
        ):
            read["gpu_only"] = True
            notes.append("GPU only")
        elif re.search(
            r"\b(cpus? only|only (?:on )?cpus?|cpu[- ]only|no gpus?|without (?:a )?gpus?)\b",
            lowered,
        ):
            read["cpu_only"] = True
            notes.append("CPU only")
        named = _systems_named(text, systems)
        if named:
            read["systems"] = named
            notes.append(f"systems {', '.join(named)}")
        partitions = _partitions_named(text)
        if partitions:
            read["partitions"] = partitions
            notes.append(f"partitions {', '.join(partitions)}")
        return InferredGoals(goals=merge_goals(explicit, read), source="rules", notes=notes)


def merge_goals(explicit: Goals, inferred: dict[str, Any] | Goals) -> Goals:
    """Inferred goals under the explicit ones: a field the request set is kept as it is."""
    values = (
        inferred.model_dump(exclude_defaults=True)
        if isinstance(inferred, Goals)
        else dict(inferred)
    )
    stated = explicit.model_dump(exclude_defaults=True)
    values.update(stated)
    if values.get("gpu_only") and values.get("cpu_only"):
        values.pop("cpu_only" if "gpu_only" in stated else "gpu_only")
    if values.get("budget") is not None and not values.get("budget_unit"):
        values.pop("budget")
    return Goals.model_validate(values)


# -- the LLM planner ----------------------------------------------------------------------


def _json_object(text: str) -> dict[str, Any]:
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.DOTALL)
    body = fenced.group(1) if fenced else text[text.find("{") : text.rfind("}") + 1]
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError("the model did not answer a JSON object")
    return value


@dataclass
class LLMGoalPlanner:
    """A LangChain chat model reads the goals into ``Goals``; the rules back it up."""

    model: Any  # langchain_core.language_models.BaseChatModel
    fallback: RuleGoalPlanner = field(default_factory=RuleGoalPlanner)
    name: str = "llm"

    async def infer(
        self, text: str, explicit: Goals, *, now: datetime, systems: Sequence[str] = ()
    ) -> InferredGoals:
        from langchain_core.messages import HumanMessage, SystemMessage

        messages = [
            SystemMessage(
                content=GOALS_SYSTEM_PROMPT.format(
                    now=now.isoformat(), systems=", ".join(systems) or "any"
                )
            ),
            HumanMessage(content=goals_user_prompt(text, explicit)),
        ]
        try:
            goals, source = await self._ask(messages)
        except ValidationError as exc:
            return await self._fallback(text, explicit, now, systems, f"invalid goals: {exc}")
        except ValueError as exc:
            return await self._fallback(text, explicit, now, systems, f"unreadable answer: {exc}")
        except Exception as exc:  # the model's service is outside our control
            why = f"{type(exc).__name__}: {exc}"
            return await self._fallback(text, explicit, now, systems, why)
        return InferredGoals(
            goals=merge_goals(explicit, goals), source=source, notes=[f"read by {source}"]
        )

    async def _ask(self, messages: list[Any]) -> tuple[Goals, str]:
        """Structured output where the model has it, else a JSON answer, validated."""
        try:
            structured = self.model.with_structured_output(Goals)
        except NotImplementedError:
            reply = await self.model.ainvoke(messages)
            return Goals.model_validate(_json_object(str(reply.content))), f"{self.name} (JSON)"
        answer = await structured.ainvoke(messages)
        return (answer if isinstance(answer, Goals) else Goals.model_validate(answer)), self.name

    async def _fallback(
        self, text: str, explicit: Goals, now: datetime, systems: Sequence[str], why: str
    ) -> InferredGoals:
        inferred = self.fallback.infer_now(text, explicit, now=now, systems=systems)
        first_line = why.splitlines()[0][:200]
        return inferred.model_copy(
            update={"source": f"rules (the LLM failed: {first_line})", "notes": [*inferred.notes]}
        )
