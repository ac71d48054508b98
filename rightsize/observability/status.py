"""The status picture: agents, plans in flight, failures, decisions, estimators, simulations.

``collect_status`` reads it from a running center (its runners' health, the knowledge
base, the ``EventFeed``) with the knowledge base bounded by a timeout: during an outage
the picture comes back in time with ``parts_up["knowledge_base"] = False``.
``for_viewer`` (pure) decides what a viewer may see:

- **the operator** (a request from loopback, or a staff user's token): everything;
- **a user** (anyone else with a token): their own plans, failures and decisions in
  full; of other users' only counts (plans and jobs by state, how many failures and
  decisions were left out), never a plan id, job id, user name or reason.

The page, ``rightsize center status`` and the JSON API all show this one model.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from agents import ledger
from agents.bus.base import Bus
from agents.metrics import plan_counts
from agents.runtime import AgentHealth
from knowledge_base.records import EstimatorRecord, EstimatorStatus, Plan, PlanStatus
from knowledge_base.store import KnowledgeBase, PlanQuery
from rightsize.observability.feed import DecisionView, EventFeed, FailureView
from rightsize.observability.waits import PendingStart, WaitBoard, rule_start

__all__ = [
    "AgentView",
    "EstimatorView",
    "PlanView",
    "SegmentView",
    "SimulationView",
    "StatusSnapshot",
    "Viewer",
    "collect_status",
    "for_viewer",
    "read_simulations",
]

log = logging.getLogger(__name__)

IN_FLIGHT = frozenset(
    {PlanStatus.AWAITING_APPROVAL, PlanStatus.APPROVED, PlanStatus.SUBMITTED, PlanStatus.RUNNING}
)
ENDED = frozenset(s for s in PlanStatus if s.ended)


class _View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Viewer(_View):
    """Who asks: the operator sees everything, a user their own plans and counts of others'."""

    user: str | None = Field(default=None, description="None: the operator (loopback, staff)")

    @property
    def operator(self) -> bool:
        return self.user is None


class AgentView(_View):
    agent: str
    running: bool
    consumer_lag: int | None
    events_handled: int
    events_failed: int
    events_dead_lettered: int
    retries: int
    last_event_at: datetime | None


class SegmentView(_View):
    index: int
    walltime_s: float
    job_id: str | None
    state: str | None
    elapsed_s: float | None = Field(default=None, description="Since the job started running")
    fraction: float | None = Field(default=None, description="Of the workload, last progress")
    progress: str | None = None
    start: PendingStart | None = Field(
        default=None, description="A pending job's predicted start, p10-p90 (waits.py)"
    )


class PlanView(_View):
    id: str
    user: str
    status: str
    system: str | None
    partition: str | None
    reason: str
    segments: list[SegmentView]
    updated_at: datetime


class EstimatorView(_View):
    target: str
    estimator_id: str
    kind: str
    status: str
    validation_error: float | None
    live_error: float | None = None
    metric: str | None = None
    last_decision: str | None = None
    decided_at: datetime | None = None


class SimulationView(_View):
    name: str
    written_at: datetime
    runs: list[dict[str, str | float | int | None]]


class StatusSnapshot(_View):
    generated_at: datetime
    scope: Literal["all", "own"] = "all"
    user: str | None = None
    parts_up: dict[str, bool] = Field(default_factory=dict)
    agents: list[AgentView] = Field(default_factory=list)
    plans: list[PlanView] = Field(default_factory=list)
    failures: list[FailureView] = Field(default_factory=list)
    decisions: list[DecisionView] = Field(default_factory=list)
    estimators: list[EstimatorView] = Field(default_factory=list)
    simulations: list[SimulationView] = Field(default_factory=list)
    plans_by_state: dict[str, int] = Field(default_factory=dict)
    jobs_by_state: dict[str, int] = Field(default_factory=dict)
    hidden: dict[str, int] = Field(
        default_factory=dict, description="Other users' items left out, by kind"
    )
    _owners: dict[str, str] = PrivateAttr(default_factory=dict)  # plan id -> user; never sent


def _agent_view(health: AgentHealth) -> AgentView:
    return AgentView(
        agent=health.agent,
        running=health.running,
        consumer_lag=health.consumer_lag,
        events_handled=health.events_handled,
        events_failed=health.events_failed,
        events_dead_lettered=health.events_dead_lettered,
        retries=health.retries,
        last_event_at=health.last_event_at,
    )


def _plan_view(plan: Plan, feed: EventFeed | None, now: datetime) -> PlanView:
    """``plan`` as the ledger's ``view`` sees it, with the feed's word on its jobs (their
    state where newer than the plan's, running time, last progress line), and the
    segments planned but not submitted yet."""
    looks = {}
    if feed is not None:
        looks = {
            s.job_id: feed.jobs[s.job_id]
            for s in plan.segments
            if s.job_id is not None and s.job_id in feed.jobs
        }
    seen = ledger.view(
        plan, statuses={job_id: look.status(job_id) for job_id, look in looks.items()}, now=now
    )
    segments = []
    for job in seen.jobs:
        look = looks.get(job.job_id or "")
        state = str(job.state)
        if look is not None and look.since >= plan.updated_at:
            state = look.state  # the monitor's word is newer than the ledger's
        segments.append(
            SegmentView(
                index=job.segment_index,
                walltime_s=job.walltime_s,
                job_id=job.job_id,
                state=state,
                elapsed_s=job.elapsed_s,
                fraction=look.fraction if look is not None else None,
                progress=look.progress if look is not None else None,
            )
        )
    segments += [
        SegmentView(index=s.index, walltime_s=s.walltime_s, job_id=None, state=None)
        for s in ledger.unsubmitted_segments(plan)
    ]
    segments.sort(key=lambda s: s.index)  # stable: a segment's attempts stay in order
    return PlanView(
        id=plan.id,
        user=plan.user,
        status=str(plan.status),
        system=seen.system,
        partition=seen.partition,
        reason=plan.reason,
        segments=segments,
        updated_at=plan.updated_at,
    )


def _estimator_views(
    records: Sequence[EstimatorRecord], feed: EventFeed | None
) -> list[EstimatorView]:
    views = []
    for record in records:
        if record.status not in (EstimatorStatus.PROMOTED, EstimatorStatus.SHADOW):
            continue
        metric, validation = next(iter(record.validation.items()), (None, None))
        look = feed.estimators.get(record.target) if feed is not None else None
        mine = look is not None and record.status == EstimatorStatus.PROMOTED
        views.append(
            EstimatorView(
                target=record.target,
                estimator_id=record.id,
                kind=record.kind,
                status=str(record.status),
                validation_error=validation,
                live_error=look.live_error if mine and look else None,
                metric=(look.metric if mine and look else metric),
                last_decision=f"{look.decision}: {look.reason}" if mine and look else None,
                decided_at=look.time if mine and look else None,
            )
        )
    return sorted(views, key=lambda v: (v.target, v.status))


def read_simulations(directory: Path | None, *, keep: int = 5) -> list[SimulationView]:
    """The last ``keep`` simulation summaries (``rightsize simulate --json`` output) saved
    in ``directory``, newest first; unreadable files are skipped with a log line."""
    if directory is None or not directory.is_dir():
        return []
    files = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    views = []
    for path in files[:keep]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("status: skipping simulation report %s: %s", path, exc)
            continue
        runs = data.get("runs", [data]) if isinstance(data, dict) else []
        rows = [_summary(run) for run in runs if isinstance(run, dict)]
        written = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        views.append(SimulationView(name=path.stem, written_at=written, runs=rows))
    return views


_SIMULATION_KEYS = (
    "trace", "policy", "estimate", "order", "jobs", "mean_wait_s", "p90_wait_s",
    "mean_bsld", "utilization", "killed",
)  # fmt: skip


def _summary(run: dict[str, object], most: int = 10) -> dict[str, str | float | int | None]:
    """A run's headline figures: the known ones first, then others, ``most`` in all."""
    plain = {k: v for k, v in run.items() if isinstance(v, str | int | float) or v is None}
    keys = [k for k in _SIMULATION_KEYS if k in plain]
    keys += [k for k in plain if k not in keys]
    return {k: plain[k] for k in keys[:most]}


_DOWN = object()


async def _bounded(part: str, read: Awaitable[object], timeout_s: float) -> object:
    """``read``'s answer, or ``_DOWN`` (logged) when it fails or outlasts ``timeout_s``."""
    try:
        return await asyncio.wait_for(read, timeout_s)
    except (TimeoutError, Exception) as exc:
        log.warning("status: %s did not answer: %s", part, exc or "timeout")
        return _DOWN


@dataclass(frozen=True)
class _Stored:
    """What one status read takes from the knowledge base."""

    plans: list[Plan]  # in flight, and the most recently ended
    by_status: dict[PlanStatus, int]
    jobs: dict[tuple[str, str], int]
    estimators: list[EstimatorRecord]
    owners: dict[str, str]  # plan id -> user, of the plans shown and those the feed names


async def _read_kb(kb: KnowledgeBase, recent_plans: int, named: set[str]) -> _Stored:
    """Counts from the database, and only the plans the page shows: never every plan."""
    plans = await kb.query_plans(PlanQuery(statuses=IN_FLIGHT))
    if recent_plans > 0:
        plans += await kb.query_plans(
            PlanQuery(statuses=ENDED, newest_first=True, limit=recent_plans)
        )
    owners = {p.id: p.user for p in plans}
    if missing := frozenset(named - owners.keys()):
        owners |= {p.id: p.user for p in await kb.query_plans(PlanQuery(ids=missing))}
    return _Stored(
        plans=plans,
        by_status=await kb.count_plans(),
        jobs=await kb.count_plan_jobs(),
        estimators=await kb.list_estimators(),
        owners=owners,
    )


async def collect_status(
    kb: KnowledgeBase | None,
    agents: Sequence[AgentHealth] = (),
    feed: EventFeed | None = None,
    *,
    bus: Bus | None = None,
    simulations_dir: Path | None = None,
    recent_plans: int = 20,
    timeout_s: float = 2.0,
    waits: WaitBoard | None = None,
) -> StatusSnapshot:
    """The whole picture (the operator's); ``for_viewer`` narrows it for a user.
    ``waits``: pending jobs' learned starts (else the plan's own wait with the rule's
    band, ``waits.rule_start``)."""
    now = datetime.now(UTC)
    failures = list(reversed(feed.failures)) if feed is not None else []
    decisions = list(reversed(feed.decisions)) if feed is not None else []
    named = {f.plan_id for f in failures if f.plan_id} | {d.plan_id for d in decisions}
    reads: dict[str, Awaitable[object]] = {}
    if kb is not None:
        reads["knowledge_base"] = _read_kb(kb, recent_plans, named)
    if bus is not None:
        reads["bus"] = bus.probe()
    results = await asyncio.gather(
        *(_bounded(part, read, timeout_s) for part, read in reads.items())
    )
    answered = dict(zip(reads, results, strict=True))
    parts_up = {part: result is not _DOWN for part, result in answered.items()}
    stored = _Stored(plans=[], by_status={}, jobs={}, estimators=[], owners={})
    if parts_up.get("knowledge_base"):
        stored = answered["knowledge_base"]  # type: ignore[assignment]
    jobs: dict[str, int] = {}
    for (state, _), count in stored.jobs.items():
        jobs[state] = jobs.get(state, 0) + count
    # A simulated cluster's clock may run ahead of the wall clock: its jobs' elapsed time
    # is measured on the latest time the bus carried.
    jobs_now = max(now, feed.latest_event_at) if feed and feed.latest_event_at else now
    shown = sorted(stored.plans, key=lambda p: p.created_at)
    views = [_plan_view(p, feed, jobs_now) for p in shown]
    await _pending_starts(shown, views, waits, timeout_s)
    snapshot = StatusSnapshot(
        generated_at=now,
        parts_up=parts_up,
        agents=[_agent_view(h) for h in agents],
        plans=views,
        failures=failures,
        decisions=decisions,
        estimators=_estimator_views(stored.estimators, feed),
        simulations=read_simulations(simulations_dir),
        plans_by_state=plan_counts(stored.by_status),
        jobs_by_state=jobs,
    )
    snapshot._owners = stored.owners
    return snapshot


async def _pending_starts(
    plans: Sequence[Plan], views: Sequence[PlanView], waits: WaitBoard | None, timeout_s: float
) -> None:
    """Fill each pending job's predicted start: the board's where it answers in time,
    else, for a plan's first job, the plan's own wait with the rule's band."""
    pending = [
        (plan, segment)
        for plan, view in zip(plans, views, strict=True)
        for segment in view.segments
        if segment.job_id is not None and segment.state == "pending"
    ]
    if not pending:
        return
    learned: dict[str, PendingStart] = {}
    if waits is not None:
        systems = sorted({p.option.system for p, _ in pending if p.option is not None})
        answers = await asyncio.gather(
            *(
                _bounded("waits", asyncio.shield(waits.starts(system)), timeout_s)
                for system in systems
            )
        )
        for answer in answers:
            if isinstance(answer, dict):
                learned.update(answer)
    for plan, segment in pending:
        first = next((s.job_id for s in plan.segments if s.job_id is not None), None)
        rule = rule_start(plan) if segment.job_id == first else None
        segment.start = learned.get(segment.job_id or "") or rule


def for_viewer(snapshot: StatusSnapshot, viewer: Viewer) -> StatusSnapshot:
    """What ``viewer`` may see of ``snapshot``.

    Failures and decisions belong to the user whose plan they are about; one about no
    known plan (a dead letter of a malformed message) is the operator's only.
    """
    if viewer.operator:
        return snapshot
    user = viewer.user

    def own(plan_id: str | None) -> bool:
        return plan_id is not None and snapshot._owners.get(plan_id) == user

    plans = [p for p in snapshot.plans if p.user == user]
    failures = [f for f in snapshot.failures if own(f.plan_id)]
    decisions = [d for d in snapshot.decisions if own(d.plan_id)]
    return snapshot.model_copy(
        update={
            "scope": "own",
            "user": user,
            "plans": plans,
            "failures": failures,
            "decisions": decisions,
            "hidden": {
                "plans": len(snapshot.plans) - len(plans),
                "failures": len(snapshot.failures) - len(failures),
                "decisions": len(snapshot.decisions) - len(decisions),
            },
        }
    )
