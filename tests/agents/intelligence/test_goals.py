"""Goal and constraint inference: the rules, and an LLM scripted with LangChain's fake models.

No real LLM is called here (none is configured in tests); the fake chat models stand in
for one and say exactly what a model would answer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import (
    FakeListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from agents.intelligence.goals import (
    LLMGoalPlanner,
    RuleGoalPlanner,
    merge_goals,
    parse_budget,
    parse_deadline,
)
from knowledge_base.workload import Goals, Objective

NOW = datetime(2026, 1, 7, 15, 0, tzinfo=UTC)  # a Wednesday afternoon
SYSTEMS = ["frontera", "pitzer"]


def rules(text: str, explicit: Goals | None = None) -> Goals:
    return RuleGoalPlanner().infer_now(text, explicit or Goals(), now=NOW, systems=SYSTEMS).goals


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the cheapest way please", {"objective": Objective.CHEAPEST}),
        ("as fast as possible", {"objective": Objective.FASTEST}),
        ("ASAP", {"objective": Objective.EARLIEST_FINISH}),
        ("GPU only", {"gpu_only": True}),
        ("no GPUs, thanks", {"cpu_only": True}),
        ("under 200 SU", {"budget": 200.0, "budget_unit": "SU"}),
        ("at most 1,500 core-hours", {"budget": 1500.0, "budget_unit": "core-hour"}),
        ("a budget of $50", {"budget": 50.0, "budget_unit": "USD"}),
        ("run it on frontera", {"systems": ["frontera"]}),
        ("in the debug queue", {"partitions": ["debug"]}),
    ],
)
def test_the_rules_read_common_phrases(text: str, expected: dict[str, Any]) -> None:
    goals = rules(text)
    for field, value in expected.items():
        assert getattr(goals, field) == value, field


def test_finish_by_friday_9am_is_a_deadline_this_friday_and_the_deadline_objective() -> None:
    goals = rules("finish by Friday 9am")
    assert goals.deadline == datetime(2026, 1, 9, 9, 0, tzinfo=UTC)
    assert goals.objective is Objective.DEADLINE


def test_an_explicit_objective_beside_a_deadline_is_kept() -> None:
    goals = rules("cheapest, finish by Friday 9am")
    assert goals.objective is Objective.CHEAPEST and goals.deadline is not None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("within 6 hours", datetime(2026, 1, 7, 21, 0, tzinfo=UTC)),
        ("done by tomorrow noon", datetime(2026, 1, 8, 12, 0, tzinfo=UTC)),
        ("by 2026-01-10 08:30", datetime(2026, 1, 10, 8, 30, tzinfo=UTC)),
        ("before wednesday 10am", datetime(2026, 1, 14, 10, 0, tzinfo=UTC)),  # today's passed
    ],
)
def test_deadlines(text: str, expected: datetime) -> None:
    assert parse_deadline(text, NOW) == expected


def test_a_budget_needs_a_unit_and_a_duration_is_not_a_budget() -> None:
    assert parse_budget("within 3 hours") is None
    assert parse_budget("under 2k SU") == (2000.0, "SU")


def test_stated_goals_win_over_the_words() -> None:
    stated = Goals(objective=Objective.FASTEST, gpu_only=True)
    goals = rules("cheapest, no GPUs, under 100 SU", stated)
    assert goals.objective is Objective.FASTEST and goals.gpu_only and not goals.cpu_only
    assert goals.budget == 100.0  # not stated: the words fill it in


def test_merge_never_makes_an_invalid_goals() -> None:
    goals = merge_goals(Goals(), {"budget": 5.0})  # a budget without its unit is dropped
    assert goals.budget is None


async def test_the_llm_planner_uses_structured_output_when_the_model_has_it() -> None:
    class StructuredFake(GenericFakeChatModel):
        def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            return RunnableLambda(
                lambda _messages: schema(objective="cheapest", budget=300, budget_unit="SU")
            )

    planner = LLMGoalPlanner(StructuredFake(messages=iter([])))
    answer = await planner.infer("keep it under 300 SU", Goals(), now=NOW, systems=SYSTEMS)
    assert answer.source == "llm"
    assert answer.goals.objective is Objective.CHEAPEST
    assert (answer.goals.budget, answer.goals.budget_unit) == (300, "SU")


async def test_the_llm_planner_reads_a_json_answer_from_a_model_without_structured_output() -> None:
    reply = (
        '```json\n{"objective": "deadline", "deadline": "2026-01-09T09:00:00Z", '
        '"gpu_only": true}\n```'
    )
    planner = LLMGoalPlanner(GenericFakeChatModel(messages=iter([AIMessage(content=reply)])))
    answer = await planner.infer("need it friday morning on GPUs", Goals(), now=NOW)
    assert answer.source == "llm (JSON)"
    assert answer.goals.objective is Objective.DEADLINE and answer.goals.gpu_only
    assert answer.goals.deadline == datetime(2026, 1, 9, 9, 0, tzinfo=UTC)


async def test_stated_goals_win_over_the_llm_too() -> None:
    planner = LLMGoalPlanner(FakeListChatModel(responses=['{"objective": "fastest"}']))
    answer = await planner.infer("fast", Goals(objective=Objective.CHEAPEST), now=NOW)
    assert answer.goals.objective is Objective.CHEAPEST


async def test_an_unreadable_llm_answer_falls_back_to_the_rules_and_says_why() -> None:
    planner = LLMGoalPlanner(FakeListChatModel(responses=["I think you want it cheap."]))
    answer = await planner.infer("cheapest", Goals(), now=NOW)
    assert answer.source.startswith("rules (the LLM failed: unreadable answer")
    assert answer.goals.objective is Objective.CHEAPEST


async def test_an_llm_answer_that_breaks_the_goals_schema_falls_back_to_the_rules() -> None:
    planner = LLMGoalPlanner(FakeListChatModel(responses=['{"gpu_only": true, "cpu_only": true}']))
    answer = await planner.infer("GPU only", Goals(), now=NOW)
    assert answer.source.startswith("rules (the LLM failed")
    assert answer.goals.gpu_only and not answer.goals.cpu_only


async def test_a_failing_model_service_falls_back_to_the_rules() -> None:
    class Down(GenericFakeChatModel):
        async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            raise ConnectionError("model endpoint unreachable")

    planner = LLMGoalPlanner(Down(messages=iter([])))
    answer = await planner.infer("fastest", Goals(), now=NOW)
    assert "ConnectionError" in answer.source
    assert answer.goals.objective is Objective.FASTEST
