"""Agents in the loop: the production agents right-size a trace's jobs on a simulated cluster.

The trace's jobs arrive at their submit times on a manual clock. Each becomes a request
to the Intelligence Plane (a generic job: the user, the processors, the user's walltime
request as their guess); the plane, Resource Estimation, Optimization and the Scheduler
run unchanged on the in-process bus and a SQLite knowledge base and submit whatever they
decide to a simulated cluster (``tools.actuators.simulated``, FCFS or EASY), which plays
the trace: a job runs as long as the trace says it ran, and is killed at the walltime it
was given. What the agents learn they learn online, from the jobs the simulated cluster
has finished (the history estimator trains on the knowledge base's finished jobs). A job
killed because the agents asked for too little is the Re-scheduler's to resubmit, as at
a real center.

The baseline is the same cluster, the same jobs, each submitted with the user's request
(``plain``), so the two columns differ only by the agents. ``replay_plain`` is checked
against the fast trace simulator in the tests: same schedule, job for job.

Cost: every job is a handful of events through the agents, a few knowledge-base
transactions each, and the history estimator retrains on the system's finished jobs
when it has grown; this runs at tens of jobs a second, so it takes a window of a trace
(``limit``), not the whole of it.
"""

from __future__ import annotations

import contextlib
import math
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agents.bus.base import Consumer, Message
from agents.bus.memory import InMemoryBus
from agents.estimation import ResourceEstimation
from agents.eventlog import EventLogWriter
from agents.events import Envelope, PlanRequested
from agents.intelligence import IntelligencePlane, PlaneContext, open_checkpointer
from agents.intelligence.goals import RuleGoalPlanner
from agents.optimization import Optimization
from agents.ordering import OrderingConfig, PendingJob, decide_order
from agents.rescheduler import ReschedulePolicy
from agents.runtime import Agent, AgentRunner, RunnerSettings, settle
from agents.scheduler import Scheduler, SchedulerConfig
from agents.topics import ALL_TOPICS, topic_for
from knowledge_base.catalog import Catalog, NodeType, Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobRecord, JobState, Plan, PlanStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import GenericJob, Goals, WorkloadSpec
from simulations.metrics import SimulationResult, summarize
from simulations.replay import replay
from simulations.rightsize_policy import RightsizePolicy
from simulations.workload import Workload
from tools.actuators.model import JobRequest, SimulatedWork
from tools.actuators.simulated import (
    EPOCH,
    ClusterPolicy,
    ManualClock,
    SimulatedCluster,
    _Pool,
)

__all__ = [
    "SYSTEM_NAME",
    "AgentsComparison",
    "AgentsRun",
    "TraceCluster",
    "compare_with_agents",
    "history_records",
    "ordering_for",
    "replay_plain",
    "replay_with_agents",
    "start_state_path",
    "trace_system",
    "window",
]

SYSTEM_NAME = "trace"
# A plan's reason names its batch job ("job 1234 ran out of walltime ..."): counted by
# what happened, not by which job.
_JOB_NAMED = re.compile(r"^job \S+ ")
PARTITION_NAME = "batch"
APPLICATION = "swf-job"  # SWF executable numbers are missing from most traces
MEMORY_MB_PER_PROC = 1024
EXTEND_MARGIN_S = 120  # the Scheduler extends a job within this of its limit
FAST = RunnerSettings(poll_timeout_s=0.005, flush_interval_s=0.0, backoff_initial_s=0.01)
FINAL = {PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED}


def window(workload: Workload, start: int, stop: int | None) -> Workload:
    """Jobs ``start`` up to ``stop`` of ``workload`` (to the end when None), same timeline."""
    stop = workload.jobs if stop is None else min(stop, workload.jobs)
    if not 0 <= start < stop:
        raise InvalidInputError(
            f"the window [{start}, {stop}) holds no job of the {workload.jobs} in the trace",
            field="window",
            value=f"{start}:{stop}",
        )
    return workload.slice(start, stop)


def history_records(history: Workload, *, policy: ClusterPolicy) -> list[JobRecord]:
    """The jobs before the window as the center's finished history, as the trace simulator
    schedules them under ``policy`` with the users' requests."""
    schedule = replay(history, policy=policy, estimate="user")
    records = []
    for index in range(history.jobs):
        user = int(history.user[index])
        start, end = int(schedule.start_s[index]), int(schedule.end_s[index])
        records.append(
            JobRecord(
                job_id=f"history-{int(history.job_ids[index])}",
                system=SYSTEM_NAME,
                partition=PARTITION_NAME,
                user=f"user{user}" if user >= 0 else None,
                application=APPLICATION,
                state=JobState.TIMEOUT if schedule.killed[index] else JobState.COMPLETED,
                submit_time=_at(history.submit_s[index]),
                start_time=_at(start),
                end_time=_at(end),
                wait_s=start - int(history.submit_s[index]),
                run_s=end - start,
                requested_nodes=int(history.procs[index]),
                requested_cores=int(history.procs[index]),
                requested_memory_mb=MEMORY_MB_PER_PROC,
                requested_walltime_s=int(history.req_s[index]),
                source=f"trace {history.name}",
            )
        )
    return records


def trace_system(workload: Workload) -> System:
    """The trace's machine as a catalog system: one partition of one-processor nodes."""
    longest_min = max(1, math.ceil(int(workload.req_s.max()) / 60))
    procs = workload.machine_procs
    return System(
        name=SYSTEM_NAME,
        center="simulation",
        node_types=[
            NodeType(name="proc", count=procs, cores=1, memory_mb=MEMORY_MB_PER_PROC),
        ],
        partitions=[
            Partition(
                name=PARTITION_NAME,
                node_type="proc",
                max_nodes=procs,
                max_cores_per_node=1,
                max_memory_mb=MEMORY_MB_PER_PROC,
                max_minutes=longest_min,
            )
        ],
    )


class TraceCluster(SimulatedCluster):
    """The simulated cluster playing a trace: a job runs as long as the trace says.

    ``run_of`` maps what a request is known by (its plan id, else its name) to the run
    time the trace recorded; the agents never see it, only the cluster does. With
    ``ordering`` the queue runs in the rightsize order at every scheduling event, as the
    priorities ``agents.ordering`` sets on SLURM make it: ``decide_order`` over the
    pending jobs, each estimated by the limit it was submitted with (the agents' predicted
    walltime, or the user's request), the first job the head that holds EASY's
    reservation. The reservation and the backfills use those limits, which are the kill
    times here, so a starved head is protected as in the trace simulator.
    """

    def __init__(
        self,
        workload: Workload,
        run_of: dict[str, int],
        *,
        clock: ManualClock,
        policy: ClusterPolicy,
        wake_before_limit_s: float | None = None,
        ordering: OrderingConfig | None = None,
    ) -> None:
        super().__init__(
            nodes=workload.machine_procs,
            cores_per_node=1,
            memory_mb_per_node=MEMORY_MB_PER_PROC,
            clock=clock,
            system=trace_system(workload),
            policy=policy,
        )
        self.run_of = run_of
        self.wake_before_limit_s = wake_before_limit_s
        self.ordering = ordering

    def _schedule(self, pool: _Pool, at: datetime) -> None:
        if self.ordering is not None and len(pool.queue) > 1:
            pending = [
                PendingJob(
                    job_id=job_id,
                    submit_time=self._jobs[job_id].submit,
                    estimate_s=self._jobs[job_id].request.walltime_s,
                )
                for job_id in pool.queue
            ]
            pool.queue[:] = [job.job_id for job in decide_order(pending, at, self.ordering).jobs]
        super()._schedule(pool, at)

    def next_event(self) -> datetime | None:
        """The next job end, or, with ``wake_before_limit_s``, the moment that long before
        a running job that will outrun its limit is killed: the Scheduler's monitors
        look then, as they poll a real cluster, and may extend it in place."""
        upcoming = super().next_event()
        if self.wake_before_limit_s is None:
            return upcoming
        now = self.clock.now()
        wakes = [
            wake
            for job_id in self._running
            if (job := self._jobs[job_id]).start is not None
            and job.outcome is JobState.TIMEOUT
            and (
                wake := job.start
                + timedelta(seconds=job.request.walltime_s - self.wake_before_limit_s)
            )
            > now
        ]
        return min([t for t in (upcoming, *wakes) if t is not None], default=None)

    async def _submit(self, request: JobRequest) -> str:
        key = request.plan_id or request.name
        if key not in self.run_of:
            raise InvalidInputError(
                "the trace has no job for this request", field="plan_id", value=key
            )
        work = SimulatedWork(run_s=self.run_of[key], peak_memory_mb=1)
        return await super()._submit(request.model_copy(update={"simulated": work}))

    def jobs_of(self, key: str) -> list[Any]:
        """Every job submitted for ``key`` (plan id or name), in submission order."""
        return [
            job for job in self._jobs.values() if (job.request.plan_id or job.request.name) == key
        ]


def _key(index: int) -> str:
    return f"trace-job-{index}"


def _at(seconds: int) -> datetime:
    return EPOCH + timedelta(seconds=int(seconds))


async def _advance(clock: ManualClock, cluster: TraceCluster, to: datetime, step: Any) -> None:
    """Move the clock to ``to``, stopping at every job end before it (``step`` after each)."""
    while True:
        upcoming = cluster.next_event()
        if upcoming is None or upcoming > to:
            break
        if upcoming > clock.now():
            clock.advance((upcoming - clock.now()).total_seconds())
        await step()
    if to > clock.now():
        clock.advance((to - clock.now()).total_seconds())


async def _drain(clock: ManualClock, cluster: TraceCluster, step: Any) -> None:
    """Move the clock through every job end until nothing runs (``step`` after each)."""
    while True:
        upcoming = cluster.next_event()
        if upcoming is None:
            await step()  # what the step did may have started more work
            if cluster.next_event() is None:
                return
            continue
        clock.advance(max(0.0, (upcoming - clock.now()).total_seconds()))
        await step()


@dataclass(frozen=True)
class AgentsRun:
    """What a replay with the agents did, next to its figures."""

    result: SimulationResult
    requested_s: np.ndarray  # the walltime each job's last attempt asked for
    attempts: np.ndarray  # how many jobs were submitted for each trace job
    planned: np.ndarray  # False where no plan met the limits and the user's request ran
    concluded: dict[str, int]  # plan status -> count
    estimators: dict[str, int]  # which estimator sized the plans -> count
    unplanned_reasons: dict[str, int]  # why no plan met the limits -> count
    failed_reasons: dict[str, int]  # why a plan that ran ended failed -> count


def _result(
    workload: Workload,
    *,
    start: np.ndarray,
    end: np.ndarray,
    killed: np.ndarray,
    policy: str,
    estimate: str,
    seconds: float,
    resubmissions: int = 0,
) -> SimulationResult:
    figures = summarize(
        submit_s=workload.submit_s,
        start_s=start,
        end_s=end,
        procs=workload.procs,
        killed=killed,
        machine_procs=workload.machine_procs,
    )
    return SimulationResult(
        jobs=workload.jobs,
        dropped=sum(workload.dropped.values()),
        seconds=seconds,
        jobs_per_s=workload.jobs / seconds if seconds > 0 else float("inf"),
        policy=policy,
        estimate=estimate,
        trace=workload.name,
        machine_procs=workload.machine_procs,
        dropped_by_reason=dict(workload.dropped),
        resubmissions=resubmissions,
        **figures,
    )


def _seconds(moment: datetime | None) -> int:
    if moment is None:
        raise ValueError("a job that never started or ended has no time")
    return int((moment - EPOCH).total_seconds())


def _user_request(workload: Workload, index: int) -> JobRequest:
    """The job as its user asked for it in the trace."""
    return JobRequest(
        name=_key(index),
        partition=PARTITION_NAME,
        nodes=int(workload.procs[index]),
        memory_mb=MEMORY_MB_PER_PROC,
        walltime_s=int(workload.req_s[index]),
        command="true",
    )


async def replay_plain(
    workload: Workload, *, policy: ClusterPolicy, ordering: OrderingConfig | None = None
) -> SimulationResult:
    """Every job submitted with the user's own request, no agents: the baseline (with
    ``ordering``, the queue in the rightsize order, ``TraceCluster``)."""
    clock = ManualClock(EPOCH)
    cluster = TraceCluster(
        workload,
        {_key(i): int(run) for i, run in enumerate(workload.run_s)},
        clock=clock,
        policy=policy,
        ordering=ordering,
    )
    began = time.perf_counter()

    async def nothing() -> None:
        return None

    ids = []
    for index in range(workload.jobs):
        await _advance(clock, cluster, _at(workload.submit_s[index]), nothing)
        ids.append(await cluster.submit(_user_request(workload, index)))
    await _drain(clock, cluster, nothing)
    statuses = [await cluster.status(job_id) for job_id in ids]
    return _result(
        workload,
        start=np.array([_seconds(s.start_time) for s in statuses], dtype=np.int64),
        end=np.array([_seconds(s.end_time) for s in statuses], dtype=np.int64),
        killed=np.array([s.state is JobState.TIMEOUT for s in statuses]),
        policy=policy,
        estimate="user",
        seconds=time.perf_counter() - began,
    )


class _Agents:
    """The agents that right-size a job, on one bus and one knowledge base."""

    def __init__(
        self,
        runners: Sequence[AgentRunner],
        scheduler: Scheduler,
        bus: InMemoryBus,
        kb: SQLiteKnowledgeBase,
        log: tuple[Consumer, EventLogWriter] | None = None,
    ) -> None:
        self.runners = runners
        self.scheduler = scheduler
        self.bus = bus
        self.kb = kb
        self.log = log

    async def record(self) -> None:
        """Copy what the bus carried since the last call into the event log, if one is kept."""
        if self.log is None:
            return
        consumer, writer = self.log
        while records := await consumer.poll(max_records=1000, timeout_s=0):
            for record in records:
                writer.write_record(record)
        writer.flush()

    async def settle(self, timeout_s: float = 120.0) -> None:
        """Until every agent consumed everything and published its outbox."""
        await settle(self.runners, timeout_s=timeout_s)
        await self.record()

    async def look(self) -> None:
        """The Scheduler's monitors look at the cluster (at the clock's present)."""
        for monitor in list(self.scheduler.monitors.values()):
            await monitor.poll_once()
        await self.settle()


@contextlib.asynccontextmanager
async def _running_agents(
    home: Path,
    cluster: TraceCluster,
    catalog: Catalog,
    history: Sequence[JobRecord],
    event_log: Path | None,
    extend_in_place: bool = False,
) -> AsyncIterator[_Agents]:
    bus = InMemoryBus()
    kb = SQLiteKnowledgeBase(home / "kb.db")
    async with contextlib.AsyncExitStack() as stack:
        await bus.start()
        stack.push_async_callback(bus.stop)
        stack.push_async_callback(kb.close)
        await kb.put_catalog(catalog)
        if history:
            await kb.add_jobs(history)
        if event_log is not None:  # what the run started from, for rightsize replay
            _snapshot(home / "kb.db", start_state_path(event_log))
        saver = await stack.enter_async_context(open_checkpointer(home / "plane.db"))
        executors = {SYSTEM_NAME: cluster}
        clock = cluster.clock
        context = PlaneContext(
            goal_planner=RuleGoalPlanner(),
            approval="auto",
            systems=(SYSTEM_NAME,),
            now=clock.now,
        )
        config = SchedulerConfig(
            work_dir=home / "jobs",
            policy=ReschedulePolicy(
                extend_in_place=extend_in_place, extend_margin_s=EXTEND_MARGIN_S
            ),
        )
        scheduler = Scheduler(kb, executors, bus, config)
        agents: list[Agent[Any]] = [
            IntelligencePlane(kb, saver, context),
            ResourceEstimation(kb),
            Optimization(kb, executors),
            scheduler,
        ]
        log = None
        if event_log is not None:
            consumer = bus.consumer(list(ALL_TOPICS), group_id="simulation-event-log")
            await stack.enter_async_context(consumer)
            log = (consumer, stack.enter_context(EventLogWriter(event_log)))
        runners = []
        for agent in agents:
            runner = AgentRunner(agent, bus, kb, FAST, clock=clock.now)
            await stack.enter_async_context(runner)
            runners.append(runner)
        yield _Agents(runners, scheduler, bus, kb, log)


def start_state_path(event_log: Path) -> Path:
    """Where ``simulate --agents --event-log LOG`` keeps the knowledge base it started from."""
    return event_log.with_name(event_log.name + ".kb.db")


def _snapshot(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite database (its write-ahead log included)."""
    with (
        contextlib.closing(sqlite3.connect(source)) as live,
        contextlib.closing(sqlite3.connect(target)) as copy,
    ):
        live.backup(copy)


def _spec(workload: Workload, index: int) -> WorkloadSpec:
    user = int(workload.user[index])
    procs = int(workload.procs[index])
    return WorkloadSpec(
        name=_key(index),
        user=f"user{user}" if user >= 0 else "unknown",
        workload=GenericJob(
            application=APPLICATION,
            nodes=procs,
            cores=procs,
            walltime_s=int(workload.req_s[index]),
        ),
        goals=Goals(systems=[SYSTEM_NAME]),
    )


async def replay_with_agents(
    workload: Workload,
    *,
    policy: ClusterPolicy,
    home: Path,
    history: Sequence[JobRecord] = (),
    event_log: Path | None = None,
    extend_in_place: bool = False,
    ordering: OrderingConfig | None = None,
) -> AgentsRun:
    """The trace's jobs through the Intelligence Plane, Estimation, Optimization and the
    Scheduler (with the Re-scheduler), on a simulated cluster that plays the trace;
    ``history`` is what the center's knowledge base knows when the window opens; every
    event the bus carried is appended to ``event_log`` when given (for ``rightsize
    replay``); with ``extend_in_place`` the Scheduler raises a running job's limit toward
    the user's request near its end, as on a real cluster, instead of letting it die;
    with ``ordering`` the cluster runs its queue in the rightsize order (``TraceCluster``)."""
    clock = ManualClock(EPOCH)
    run_of = {_key(i): int(run) for i, run in enumerate(workload.run_s)}
    wake = EXTEND_MARGIN_S / 2 if extend_in_place else None
    cluster = TraceCluster(
        workload,
        run_of,
        clock=clock,
        policy=policy,
        wake_before_limit_s=wake,
        ordering=ordering,
    )
    catalog = Catalog(systems=[trace_system(workload)])
    began = time.perf_counter()
    async with _running_agents(
        home, cluster, catalog, history, event_log, extend_in_place
    ) as agents:
        kb = agents.kb
        for index in range(workload.jobs):
            await _advance(clock, cluster, _at(workload.submit_s[index]), agents.look)
            event = Envelope.of(
                PlanRequested(plan_id=_key(index), spec=_spec(workload, index), approval="auto"),
                source="simulation",
                correlation_id=_key(index),
                time=clock.now(),
            )
            await agents.bus.publish_many([Message.of(topic_for(event.type), event)])
            await agents.settle()
            plan = await agents.kb.get_plan(_key(index))
            if plan.status is PlanStatus.FAILED and not cluster.jobs_of(_key(index)):
                # No plan meets the limits: the user submits the job as they asked.
                await cluster.submit(_user_request(workload, index))
        await _drain(clock, cluster, agents.look)
        plans = [await kb.get_plan(_key(i)) for i in range(workload.jobs)]
    return _agents_run(workload, cluster, plans, policy, time.perf_counter() - began)


def _agents_run(
    workload: Workload,
    cluster: TraceCluster,
    plans: Sequence[Plan],
    policy: str,
    seconds: float,
) -> AgentsRun:
    n = workload.jobs
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    killed = np.zeros(n, dtype=bool)
    requested = np.zeros(n, dtype=np.int64)
    attempts = np.zeros(n, dtype=np.int64)
    planned = np.ones(n, dtype=bool)
    concluded: dict[str, int] = {}
    estimators: dict[str, int] = {}
    unplanned_reasons: dict[str, int] = {}
    failed_reasons: dict[str, int] = {}
    for index, plan in enumerate(plans):
        concluded[plan.status.value] = concluded.get(plan.status.value, 0) + 1
        if plan.estimate is not None:
            name = plan.estimate.estimator_id
            estimators[name] = estimators.get(name, 0) + 1
        jobs = [j for j in cluster.jobs_of(_key(index)) if j.start is not None]
        attempts[index] = len(cluster.jobs_of(_key(index)))
        if not jobs:
            raise InvalidInputError(
                f"job {index} of the window never ran (plan {plan.status.value}: "
                f"{plan.reason or 'no reason given'})",
                field="plan_id",
                value=plan.id,
            )
        last = jobs[-1]
        planned[index] = last.request.plan_id is not None
        if plan.status is PlanStatus.FAILED:
            reasons = failed_reasons if planned[index] else unplanned_reasons
            reason = _JOB_NAMED.sub("the job ", plan.reason)[:160]
            reasons[reason] = reasons.get(reason, 0) + 1
        start[index] = _seconds(last.start)
        end[index] = _seconds(last.end)
        killed[index] = last.state is not JobState.COMPLETED
        requested[index] = last.request.walltime_s
    result = _result(
        workload,
        start=start,
        end=end,
        killed=killed,
        policy=policy,
        estimate="agents",
        seconds=seconds,
        resubmissions=int((attempts - 1).clip(min=0).sum()),
    )
    return AgentsRun(
        result,
        requested,
        attempts,
        planned,
        concluded,
        estimators,
        unplanned_reasons,
        failed_reasons,
    )


class AgentsComparison(BaseModel):
    """``rightsize simulate --agents``: the same window with and without the agents."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    policy: str
    window_jobs: int = Field(description="Jobs replayed (both columns)")
    history_jobs: int = Field(description="Jobs before the window, given as the center's history")
    plain: SimulationResult = Field(description="Each job with its user's request")
    easy_pp: SimulationResult | None = Field(
        default=None,
        description="The same window under EASY++ (last-2 estimates learnt within the window, "
        "shortest-first backfilling) in the trace simulator; None under fcfs",
    )
    agents: SimulationResult = Field(description="Each job as the agents planned it")
    extend_in_place: bool = Field(
        default=False, description="The Scheduler raised running jobs' limits in place"
    )
    ordering: OrderingConfig | None = Field(
        default=None,
        description="The rightsize order the agents' queue ran in (None: arrival order)",
    )
    request_over_run: dict[str, float] = Field(
        description="Median requested walltime / actual run time: user vs agents"
    )
    estimators: dict[str, int] = Field(description="Which estimator sized the plans")
    unplanned: int = Field(description="Jobs no plan fit; they ran with the user's request")
    unplanned_reasons: dict[str, int] = Field(description="Why no plan fit -> jobs")
    failed_reasons: dict[str, int] = Field(description="Why a plan that ran failed -> jobs")
    plans: dict[str, int] = Field(description="Plan outcomes")


async def compare_with_agents(
    trace: Workload,
    *,
    policy: ClusterPolicy,
    jobs: int,
    history_jobs: int,
    home: Path,
    event_log: Path | None = None,
    extend_in_place: bool = False,
    rightsize_order: bool = False,
) -> AgentsComparison:
    """The ``jobs`` after the first ``history_jobs`` of ``trace``, replayed plain and with
    the agents (who know the first ``history_jobs`` as the center's history); with
    ``rightsize_order`` the agents' queue runs in the rightsize order, the starvation
    bound the shipped multiple of the trace's long request (its 99th percentile)."""
    if policy not in ("fcfs", "easy"):
        raise InvalidInputError(
            "with agents in the loop the simulated cluster schedules fcfs or easy",
            field="policy",
            value=policy,
        )
    if history_jobs < 0:
        raise InvalidInputError(
            "the history cannot be negative", field="agents_history", value=history_jobs
        )
    if jobs < 1:
        raise InvalidInputError(
            "the window needs at least one job", field="agents_jobs", value=jobs
        )
    replayed = window(trace, history_jobs, history_jobs + jobs)
    history = history_records(window(trace, 0, history_jobs), policy=policy) if history_jobs else []
    plain = await replay_plain(replayed, policy=policy)
    easy_pp = (
        replay(replayed, policy="easy", estimate="last2", order="sjbf", label="easy++").result
        if policy == "easy"
        else None
    )
    ordering = ordering_for(trace) if rightsize_order else None
    run = await replay_with_agents(
        replayed,
        policy=policy,
        home=home,
        history=history,
        event_log=event_log,
        extend_in_place=extend_in_place,
        ordering=ordering,
    )
    ran = np.maximum(replayed.run_s, 1).astype(np.float64)
    return AgentsComparison(
        trace=trace.name,
        policy=policy,
        window_jobs=replayed.jobs,
        history_jobs=history_jobs,
        plain=plain,
        easy_pp=easy_pp,
        agents=run.result,
        extend_in_place=extend_in_place,
        ordering=ordering,
        request_over_run={
            "user": float(np.median(replayed.req_s / ran)),
            "agents": float(np.median(run.requested_s / ran)),
        },
        estimators=run.estimators,
        unplanned=int((~run.planned).sum()),
        unplanned_reasons=run.unplanned_reasons,
        failed_reasons=run.failed_reasons,
        plans=run.concluded,
    )


def ordering_for(trace: Workload) -> OrderingConfig:
    """The rightsize order as a center would run it on ``trace``: the shipped starvation
    bound (a multiple of the long request, the partition's limit there)."""
    policy = RightsizePolicy()
    bound_s = policy.starve_s(trace)
    return OrderingConfig(starve_h=None if bound_s is None else bound_s / 3600)
