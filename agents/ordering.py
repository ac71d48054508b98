"""The rightsize policy's queue order on a real batch system.

The simulator's ``--policy rightsize`` (simulations/rightsize_policy.py) runs the queue
largest predicted expansion factor first, (wait + estimate) / max(estimate, 10 s), and
the oldest job that has waited longer than the starvation bound goes before all others
(the others past the bound keep their factor's place). On SLURM that order is given by
priorities: ``decide_order`` (pure: the same pending jobs, predictions and clock give
the same answer, so it replays) ranks the pending jobs and gives each a priority;
``apply_order`` sets them through a
``PrioritySetter`` (``scontrol update JobId=ID Priority=N``, tools/actuators/ordering.py).

What goes wrong is logged with its reason and never raised: no operator rights stops the
round at the first refusal (nothing was changed, the center's own order stays); a job
that left the queue between the snapshot and its update is skipped; a controller that
does not answer is retried a few times, then the round stops. A job whose update did
not go through keeps the priority SLURM gave it.

How the Scheduler calls it (it holds the executor and each plan's predicted limit): each
scheduling round (e.g. with the monitors' poll), ``order_round(executor, setter,
predictions)``: the queue from ``executor.queue()``, its pending jobs through
``pending_from_queue`` with the predicted run times it knows (a job Rightsize did not
plan is ordered by its own time limit), then ``decide_order`` and ``apply_order``.
``Ordering.starved`` names the jobs past the bound: while one is pending, a running
job's limit should not be extended in place past that job's reservation (an extension
is exactly the under-estimate the bound protects against).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import JobState
from tools.actuators.base import Executor
from tools.actuators.model import ActuatorError, QueueEntry
from tools.actuators.ordering import MAX_PRIORITY, PriorityNotSet, PrioritySetter

__all__ = [
    "BSLD_FLOOR_S",
    "OrderOutcome",
    "Ordering",
    "OrderingConfig",
    "PendingJob",
    "RankedJob",
    "apply_order",
    "decide_order",
    "expansion_factor",
    "order_round",
    "pending_from_queue",
]

log = logging.getLogger(__name__)

BSLD_FLOOR_S = 10
"""The bounded slowdown's floor (simulations.metrics.BSLD_FLOOR_S): the same key."""


class OrderingConfig(BaseModel):
    """The policy's settings as a center runs them (docs/simulations.md, "The tail")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    starve_h: float | None = Field(
        default=24.0,
        gt=0,
        description="The oldest job waiting longer goes before all others "
        "(None: no bound). The shipped policy's bound is half the time limit long jobs "
        "ask for (RightsizePolicy.starve_long_requests): 24 h for a 48 h limit",
    )
    base_priority: int = Field(
        default=1_000_000,
        ge=1,
        le=MAX_PRIORITY // 2,
        description="The last job's priority; the first gets base + pending - 1",
    )
    attempts: int = Field(
        default=3, ge=1, le=10, description="Tries per update while SLURM does not answer"
    )
    retry_delay_s: float = Field(default=2.0, ge=0, description="Pause between those tries")


class PendingJob(BaseModel):
    """A pending job as the policy sees it: when it came and what it is predicted to run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str = Field(min_length=1)
    submit_time: datetime
    estimate_s: float = Field(gt=0, description="Predicted run time (else the time limit)")


class RankedJob(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str
    rank: int = Field(description="0 starts first")
    priority: int
    wait_s: float
    expansion_factor: float
    starved: bool = Field(
        description="Waited past the bound (the oldest such job goes ahead of all others)"
    )


class Ordering(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    decided_at: datetime
    jobs: list[RankedJob]

    @property
    def starved(self) -> list[str]:
        return [job.job_id for job in self.jobs if job.starved]


class OrderOutcome(BaseModel):
    """What one round of updates did; ``stopped`` says why it ended early, if it did."""

    model_config = ConfigDict(extra="forbid")

    set: list[str] = Field(default_factory=list)
    vanished: list[str] = Field(default_factory=list)
    failed: dict[str, str] = Field(default_factory=dict, description="job id -> reason")
    stopped: str | None = None


def expansion_factor(wait_s: float, estimate_s: float) -> float:
    """The bounded slowdown the job would have if it started now."""
    return (wait_s + estimate_s) / max(estimate_s, BSLD_FLOOR_S)


def decide_order(
    pending: Iterable[PendingJob], now: datetime, config: OrderingConfig | None = None
) -> Ordering:
    """Rank ``pending`` as the simulator's rightsize queue does at ``now``: the oldest job
    past the starvation bound first; then largest expansion factor first (the other jobs
    past the bound included); ties by submit time, then job id. Priorities fall by one
    per rank from base + n - 1."""
    chosen = config or OrderingConfig()
    bound_s = None if chosen.starve_h is None else chosen.starve_h * 3600
    jobs = list(pending)
    waits = [max(0.0, (now - job.submit_time).total_seconds()) for job in jobs]
    past = [bound_s is not None and wait_s > bound_s for wait_s in waits]
    oldest = min(
        (k for k in range(len(jobs)) if past[k]),
        key=lambda k: (jobs[k].submit_time, _id_key(jobs[k].job_id)),
        default=None,
    )
    scored = []
    for k, job in enumerate(jobs):
        factor = expansion_factor(waits[k], job.estimate_s)
        # the oldest starved job: ahead of all; the others: largest factor first
        key = (0, 0.0) if k == oldest else (1, -factor)
        scored.append((key, job.submit_time, _id_key(job.job_id), job, waits[k], factor, past[k]))
    scored.sort(key=lambda item: (item[0], item[1], item[2]))
    ranked = [
        RankedJob(
            job_id=job.job_id,
            rank=rank,
            priority=chosen.base_priority + len(scored) - 1 - rank,
            wait_s=wait_s,
            expansion_factor=factor,
            starved=starved,
        )
        for rank, (_, _, _, job, wait_s, factor, starved) in enumerate(scored)
    ]
    return Ordering(decided_at=now, jobs=ranked)


def _id_key(job_id: str) -> tuple[int, str]:
    """Numeric ids (SLURM's, the simulated cluster's) in submission order, then others."""
    return (len(job_id), job_id) if job_id.isdigit() else (1 << 30, job_id)


def pending_from_queue(
    entries: Iterable[QueueEntry], estimates_s: Mapping[str, float]
) -> list[PendingJob]:
    """The pending jobs of a queue snapshot, each with its predicted run time where
    Rightsize has one, else its time limit; jobs with neither, or no submit time, are
    left out (the batch system orders them)."""
    found = []
    for entry in entries:
        if entry.state != JobState.PENDING or entry.submit_time is None:
            continue
        estimate = estimates_s.get(entry.job_id) or entry.time_limit_s
        if not estimate or estimate <= 0:
            continue
        found.append(
            PendingJob(job_id=entry.job_id, submit_time=entry.submit_time, estimate_s=estimate)
        )
    return found


async def apply_order(
    ordering: Ordering, setter: PrioritySetter, config: OrderingConfig | None = None
) -> OrderOutcome:
    """Set every ranked job's priority, first rank first. Never raises for the batch
    system's answers: they are logged with their reason and returned."""
    chosen = config or OrderingConfig()
    outcome = OrderOutcome()
    for job in ordering.jobs:
        refusal = await _set_one(setter, job, chosen)
        if refusal is None:
            outcome.set.append(job.job_id)
            continue
        reason, message = refusal
        if reason == "vanished":
            outcome.vanished.append(job.job_id)
            continue
        outcome.failed[job.job_id] = reason
        if reason in ("rights", "down"):
            # Nothing further can go through; what was set stays, the rest keeps the
            # center's priorities. One warning for the round, with SLURM's answer.
            outcome.stopped = reason
            log.warning(
                "ordering: stopped after %d of %d jobs (%s); the rest keep SLURM's order: %s",
                len(outcome.set),
                len(ordering.jobs),
                reason,
                message,
            )
            break
    return outcome


async def _set_one(
    setter: PrioritySetter, job: RankedJob, config: OrderingConfig
) -> tuple[str, str] | None:
    """None when set, else why it was not and SLURM's answer (after retries where one
    can help). A refusal that stops the round is logged once, by ``apply_order``."""
    for attempt in range(1, config.attempts + 1):
        try:
            await setter.set_priority(job.job_id, job.priority)
            return None
        except PriorityNotSet as exc:
            last = attempt == config.attempts or not exc.transient
            if exc.transient and not last:
                log.warning(
                    "ordering: job %s priority %d not set (%s, try %d of %d): %s",
                    *(job.job_id, job.priority, exc.reason, attempt, config.attempts, exc),
                )
            elif exc.reason not in ("rights", "down"):
                level = logging.INFO if exc.reason == "vanished" else logging.WARNING
                log.log(
                    level, "ordering: job %s priority not set (%s): %s", job.job_id, exc.reason, exc
                )
            if last:
                return exc.reason, str(exc)
            await asyncio.sleep(config.retry_delay_s)
    return "down", "no try left"  # pragma: no cover - the loop returns on its last attempt


async def order_round(
    executor: Executor,
    setter: PrioritySetter,
    estimates_s: Mapping[str, float],
    config: OrderingConfig | None = None,
) -> tuple[Ordering | None, OrderOutcome]:
    """One round: the executor's queue now, ranked and set. When the queue cannot be read
    (the controller down), nothing is set and the outcome says so."""
    chosen = config or OrderingConfig()
    try:
        entries = await executor.queue()
    except ActuatorError as exc:
        reason = "down" if exc.transient else "refused"
        log.warning("ordering: the queue could not be read (%s): %s", reason, exc)
        return None, OrderOutcome(stopped=reason)
    ordering = decide_order(pending_from_queue(entries, estimates_s), executor.now(), chosen)
    return ordering, await apply_order(ordering, setter, chosen)
