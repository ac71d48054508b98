"""The state of one request's graph (one thread per plan id), as the checkpointer stores it.

Values are plain JSON (pydantic models dumped at the node boundaries and validated
again where read), so a checkpoint written by one build reads in the next and holds no
pickled objects. ``outbox`` and ``handled`` only grow (reducer: concatenation):

- ``outbox``: every event the graph wants published, tagged with the id of the event
  that caused it. The agent publishes the entries of the cause it is handling, in order,
  so a redelivered cause re-publishes the same events with the same ids.
- ``handled``: ids of the events already applied to this thread, so a redelivery is
  recognised instead of being applied twice.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["WAIT_KEY", "Outgoing", "PlaneState", "Status"]

Status = Literal[
    "planning", "awaiting_approval", "executing", "completed", "failed", "rejected", "cancelled"
]

WAIT_KEY = "wait_for"
"""Key of an interrupt's value: the event types the paused thread waits for."""


class Outgoing(BaseModel):
    """One event the graph asks the agent to publish."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cause: str = Field(min_length=1, description="Id of the event being handled")
    type: str = Field(min_length=1, description="Registered event type")
    payload: dict[str, Any]


class PlaneState(TypedDict, total=False):
    plan_id: str
    cause: str  # id of the event being applied now
    request: dict[str, Any]  # PlanRequested, dumped
    spec: dict[str, Any]  # WorkloadSpec with the inferred goals
    goals_source: str
    estimates: list[dict[str, Any]]  # ResourceEstimate, dumped
    needs_profiling: bool
    estimate_rounds: int
    options: dict[str, Any] | None  # PlanOptionsReady, dumped
    chosen: dict[str, Any] | None  # Plan, dumped
    status: Status
    reason: str
    replans: int  # re-plan requests answered so far (the revision of the last one)
    replan: dict[str, Any] | None  # the re-plan under way: request, proposal, revision
    outbox: Annotated[list[dict[str, Any]], operator.add]  # Outgoing, dumped
    handled: Annotated[list[str], operator.add]
    log: Annotated[list[str], operator.add]  # every decision, with its reason
