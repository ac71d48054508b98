"""Every topic name Rightsize uses, and which topic each event type is published on.

Topics group events by the part of the system they are about, not by the agent that
reads them: an agent subscribes to the topics whose events it senses and ignores the
types it does not handle. Keys are correlation ids (plan or job), so partitions scale
with the number of plans and jobs in flight.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ALL_TOPICS",
    "DEAD_LETTER",
    "DEFAULT_PARTITIONS",
    "DIAGNOSTICS",
    "ESTIMATES",
    "ESTIMATORS",
    "JOBS",
    "PLANS",
    "PROFILES",
    "TOPIC_BY_EVENT_TYPE",
    "topic_for",
]

PLANS: Final = "rightsize.plans"
ESTIMATES: Final = "rightsize.estimates"
PROFILES: Final = "rightsize.profiles"
JOBS: Final = "rightsize.jobs"
ESTIMATORS: Final = "rightsize.estimators"
DIAGNOSTICS: Final = "rightsize.diagnostics"
DEAD_LETTER: Final = "rightsize.dead-letter"
"""Poison messages: the original bytes and the error (``event.dead_lettered`` events)."""

ALL_TOPICS: Final = (PLANS, ESTIMATES, PROFILES, JOBS, ESTIMATORS, DIAGNOSTICS, DEAD_LETTER)

DEFAULT_PARTITIONS: Final = 4
"""Partitions per topic when Rightsize creates it; the most replicas of one agent that
can share the work. Tansu cannot add partitions later, so choose up front."""

TOPIC_BY_EVENT_TYPE: Final[dict[str, str]] = {
    "plan.requested": PLANS,
    "plan.ready": PLANS,
    "plan.build_requested": PLANS,
    "plan.options_ready": PLANS,
    "plan.decision": PLANS,
    "plan.approved": PLANS,
    "plan.replan_requested": PLANS,
    "plan.replan_decided": PLANS,
    "plan.cancel_requested": PLANS,
    "plan.finished": PLANS,
    "estimate.requested": ESTIMATES,
    "estimate.ready": ESTIMATES,
    "profile.requested": PROFILES,
    "profile.completed": PROFILES,
    "job.submitted": JOBS,
    "job.state_changed": JOBS,
    "job.progress": JOBS,
    "job.finished": JOBS,
    "job.annotated": JOBS,
    "schedule.decision": JOBS,
    "estimator.retrain_requested": ESTIMATORS,
    "estimator.decision": ESTIMATORS,
    "estimator.promoted": ESTIMATORS,
    "diagnostic.ping": DIAGNOSTICS,
    "diagnostic.pong": DIAGNOSTICS,
    "event.dead_lettered": DEAD_LETTER,
}


def topic_for(event_type: str) -> str:
    """The topic an event of ``event_type`` is published on by default."""
    try:
        return TOPIC_BY_EVENT_TYPE[event_type]
    except KeyError:
        raise KeyError(
            f"event type {event_type!r} has no topic; add it to agents.topics.TOPIC_BY_EVENT_TYPE"
        ) from None
