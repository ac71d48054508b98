"""A small center for agent tests: in-process bus, SQLite, a simulated cluster on a manual clock.

The simulated cluster stands in for SLURM here because these tests drive hours of job
time in milliseconds (OOM kills, timeouts, cascades); the same Scheduler runs on the real
SLURM in ``tests/e2e/test_cascade.py``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agents.bus.memory import InMemoryBus
from agents.events import Envelope, Payload, decode_event
from agents.runtime import Agent, AgentRunner, RunnerSettings, settle
from agents.topics import ALL_TOPICS
from knowledge_base.catalog import Catalog
from knowledge_base.records import CascadeSegment, Interval, Plan, PlanOption, ResourceEstimate
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import DNNTraining, GenericJob, Goals, WorkloadSpec
from tests.cluster import TEST_SYSTEM
from tools.actuators.model import JobRequest, SimulatedWork
from tools.actuators.simulated import ManualClock, SimulatedCluster

P = TypeVar("P", bound=Payload)
FAST = RunnerSettings(poll_timeout_s=0.02, flush_interval_s=0.0, backoff_initial_s=0.01)


class NoPlanListing(SQLiteKnowledgeBase):
    """SQLite that refuses to load every plan: what a status read or a metrics scrape at a
    center with many plans cannot afford (they count in the database instead)."""

    async def list_plans(self, **_: object) -> list[Plan]:
        raise AssertionError("loaded every plan")


def dnn_spec(
    name: str = "cnn", *, checkpointable: bool = True, epochs: int = 40, **goals: Any
) -> WorkloadSpec:
    return WorkloadSpec(
        name=name,
        user="alice",
        workload=DNNTraining(
            model="examples/cascade/train.py",
            dataset_samples=8192,
            epochs=epochs,
            batch_sizes=[64],
            checkpointable=checkpointable,
            command="python train.py",
        ),
        goals=Goals(**goals),
    )


def generic_spec(name: str = "lammps") -> WorkloadSpec:
    return WorkloadSpec(
        name=name,
        user="bob",
        workload=GenericJob(application="lmp", nodes=1, cores=2, walltime_s=120),
    )


def make_plan(
    plan_id: str,
    spec: WorkloadSpec,
    *,
    partition: str = "debug",
    memory_mb: int = 2048,
    walltime_s: int = 60,
    segments: int = 1,
    runtime_s: float | None = None,
) -> Plan:
    option = PlanOption(
        system=TEST_SYSTEM.name,
        partition=partition,
        node_type="n",
        nodes=1,
        cores_per_node=1,
        memory_mb=memory_mb,
        walltime_s=walltime_s,
        batch_size=64 if isinstance(spec.workload, DNNTraining) else None,
    )
    point = runtime_s if runtime_s is not None else walltime_s * segments * 0.8
    estimate = ResourceEstimate(
        option=option,
        runtime_s=Interval(point=point, low=point * 0.8, high=point * 1.2),
        memory_mb=Interval(point=memory_mb * 0.5, low=memory_mb * 0.4, high=memory_mb * 0.8),
        estimator_id="test",
    )
    return Plan(
        id=plan_id,
        user=spec.user,
        spec=spec,
        option=option,
        estimate=estimate,
        segments=[CascadeSegment(index=i, walltime_s=walltime_s) for i in range(segments)],
    )


class Recorder:
    """Collects every event published on every topic (a consumer group of its own)."""

    def __init__(self, bus: InMemoryBus) -> None:
        self.consumer = bus.consumer(list(ALL_TOPICS), group_id="test-recorder")
        self.events: list[Envelope] = []

    async def drain(self) -> list[Envelope]:
        while records := await self.consumer.poll(max_records=1000, timeout_s=0.01):
            self.events.extend(decode_event(r.value) for r in records)
        return self.events

    async def of(self, kind: type[Payload]) -> list[Any]:
        await self.drain()
        return [e.payload for e in self.events if isinstance(e.payload, kind)]

    async def first(self, kind: type[P], *, guard_s: float = 240.0) -> P:
        """The first event of ``kind``, as soon as it is published (the consumer's poll
        wakes on a record): no bound on how slow the machine may be; ``guard_s`` only
        turns a hang into a failure, under pytest's own timeout."""
        deadline = time.monotonic() + guard_s
        while True:
            for event in self.events:
                if isinstance(event.payload, kind):
                    return event.payload
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {kind.__name__} in {guard_s:.0f} s")
            records = await self.consumer.poll(max_records=1000, timeout_s=left)
            self.events.extend(decode_event(r.value) for r in records)


class MiniCenter:
    """Agents on an in-process bus and one SQLite knowledge base, with a manual clock."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        nodes: int = 1,
        profiling: bool = False,
        slowdown: float | None = None,
    ) -> None:
        """``slowdown``: run training jobs as ``TrainingCluster`` does, that much slower
        than the profile says (profiling included)."""
        self.tmp_path = tmp_path
        self.bus = InMemoryBus()
        self.kb = SQLiteKnowledgeBase(tmp_path / "kb.db")
        self.clock = ManualClock()
        shape: dict[str, Any] = {
            "nodes": nodes,
            "cores_per_node": 2,
            "memory_mb_per_node": 20000,
            "clock": self.clock,
            "system": TEST_SYSTEM,
        }
        if slowdown is not None:
            self.cluster: SimulatedCluster = TrainingCluster(slowdown=slowdown, **shape)
        elif profiling:
            self.cluster = ProfilingCluster(**shape)
        else:
            self.cluster = SimulatedCluster(**shape)
        self.recorder = Recorder(self.bus)
        self.runners: list[AgentRunner] = []
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> MiniCenter:
        await self.bus.start()
        await self.recorder.consumer.start()
        await self.kb.put_catalog(Catalog(systems=[TEST_SYSTEM]))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()
        await self.recorder.consumer.stop()
        await self.kb.close()
        await self.bus.stop()

    async def start(self, agent: Agent[Any]) -> AgentRunner:
        runner = AgentRunner(agent, self.bus, self.kb, FAST)
        await self._stack.enter_async_context(runner)
        self.runners.append(runner)
        return runner

    async def publish(self, payload: Payload, correlation_id: str, **kw: Any) -> Envelope:
        from agents.bus.base import Message
        from agents.topics import topic_for

        event = Envelope.of(payload, source="test", correlation_id=correlation_id, **kw)
        await self.bus.publish_many([Message.of(topic_for(event.type), event)])
        return event

    async def settle(self, timeout_s: float = 30.0) -> None:
        """Wait until every runner consumed everything and published its outbox."""
        try:
            await settle(self.runners, timeout_s=timeout_s, pause_s=0.01)
        except TimeoutError as exc:
            pytest.fail(str(exc))


async def until(
    check: Callable[[], Awaitable[object]],
    step: Callable[[], Awaitable[None]],
    *,
    steps: int,
    what: str,
) -> Any:
    """Run ``step`` until ``check`` is truthy; fail after ``steps`` steps (bounded)."""
    for _ in range(steps):
        result = await check()
        if result:
            return result
        await step()
    pytest.fail(f"{what}: not reached in {steps} steps")


class ProfilingCluster(SimulatedCluster):
    """The simulated cluster, plus what a profiling run of the cascade script would print.

    A simulated job runs no code, so it cannot measure anything; this double answers a
    profiling job's output with the line ``examples/cascade/train.py`` prints (numbers
    from a run on the development VM). The real line is read from real SLURM jobs in
    ``tests/e2e/test_cascade.py``.
    """

    profile_line = (
        "RIGHTSIZE_PROFILE iteration_s=0.050000 spread_s=0.004000 peak_memory_mb=400 "
        "startup_s=2.50 batch_size=64 samples=8192 threads=1\n"
    )

    async def output_tail(self, job_id: str, max_bytes: int = 65536) -> str:
        job = self._job(job_id)
        if "RIGHTSIZE_PROFILE_STEPS" in job.request.environment and job.end is not None:
            return self.profile_line
        return await super().output_tail(job_id, max_bytes)


@dataclass
class _Training:
    plan_id: str | None
    start_epoch: int
    epochs: int  # this job runs these, unless killed first
    total: int


class TrainingCluster(ProfilingCluster):
    """``ProfilingCluster``, whose training jobs behave as ``examples/cascade/train.py`` does.

    A simulated job runs no code, so this double plays the script's part: start-up, then
    whole epochs of ``epoch_s`` each (the profile line's pace, 128 steps of 50 ms, times
    ``slowdown``), a ``RIGHTSIZE_PROGRESS epoch=k/N`` line at its start and after every
    epoch, a checkpoint after every epoch when the workload checkpoints (the plan's next
    job resumes from it), and in a cascade segment a stop before an epoch that would not
    fit the segment's budget (``RIGHTSIZE_SEGMENT_WORK_S``; at least one epoch, as the
    script). A job without a checkpoint starts from epoch 0 and is killed at its
    walltime. The script itself runs on the real SLURM in ``tests/e2e/test_cascade.py``.
    """

    startup_s = 2.5
    steps_per_epoch = 128  # dnn_spec: 8192 samples in batches of 64

    def __init__(self, *, slowdown: float = 1.0, **shape: Any) -> None:
        super().__init__(**shape)
        self.epoch_s = 0.05 * self.steps_per_epoch * slowdown
        self.training: dict[str, _Training] = {}

    async def _reached(self, job_id: str) -> int:
        """The epoch ``job_id`` has checkpointed (or would report) by now or by its end."""
        work = self.training[job_id]
        status = await self.status(job_id)
        if status.start_time is None:
            return work.start_epoch
        until = status.end_time or self.clock.now()
        ran = (until - status.start_time).total_seconds() - self.startup_s
        return work.start_epoch + max(0, min(work.epochs, math.floor(ran / self.epoch_s)))

    async def _checkpoint(self, plan_id: str | None) -> int:
        reached = [
            await self._reached(job_id)
            for job_id, work in self.training.items()
            if work.plan_id == plan_id
        ]
        return max(reached, default=0)

    def _fits(self, budget_s: float, left: int) -> int:
        """Epochs a segment runs: one, then another while it fits (with the script's 15%)."""
        epochs = 1
        while epochs < left and self.startup_s + (epochs + 1.15) * self.epoch_s <= budget_s:
            epochs += 1
        return epochs

    async def _submit(self, request: JobRequest) -> str:
        env = request.environment
        if "RIGHTSIZE_EPOCHS" not in env or "RIGHTSIZE_PROFILE_STEPS" in env:
            return await super()._submit(request)
        total = int(env["RIGHTSIZE_EPOCHS"])
        budget = env.get("RIGHTSIZE_SEGMENT_WORK_S")
        start = await self._checkpoint(request.plan_id) if budget is not None else 0
        left = max(0, total - start)
        epochs = self._fits(float(budget), left) if budget is not None and left else left
        peak = request.simulated.peak_memory_mb if request.simulated else 0
        run_s = math.ceil(self.startup_s + epochs * self.epoch_s)
        work = SimulatedWork(run_s=max(1, run_s), peak_memory_mb=peak)
        job_id = await super()._submit(request.model_copy(update={"simulated": work}))
        self.training[job_id] = _Training(request.plan_id, start, epochs, total)
        return job_id

    async def output_tail(self, job_id: str, max_bytes: int = 65536) -> str:
        if job_id not in self.training:
            return await super().output_tail(job_id, max_bytes)
        status = await self.status(job_id)
        if status.start_time is None:
            return ""
        until = status.end_time or self.clock.now()
        if (until - status.start_time).total_seconds() < self.startup_s:
            return ""
        total = self.training[job_id].total
        return f"RIGHTSIZE_PROGRESS epoch={await self._reached(job_id)}/{total}\n"


async def start_center_agents(
    center: MiniCenter,
    checkpointer: Any,
    *,
    approval: str = "auto",
    overhead_s: int = 10,
    plane_class: type | None = None,
    goal_planner: Any = None,
    start_plane: bool = True,
    optimization_class: type | None = None,
) -> dict[str, Any]:
    """Every agent but Model Promotion on ``center``: the plane, estimation, optimization,
    profiling and the scheduler (monitors polled by the test)."""
    from agents.estimation import ResourceEstimation
    from agents.intelligence import IntelligencePlane, PlaneContext, RuleGoalPlanner
    from agents.optimization import Optimization, OptimizationConfig
    from agents.profiling import Profiling
    from agents.scheduler import Scheduler, SchedulerConfig
    from tools.planning.builder import PlanningConfig

    executors = {TEST_SYSTEM.name: center.cluster}
    context = PlaneContext(
        goal_planner=goal_planner or RuleGoalPlanner(),
        approval=approval,  # type: ignore[arg-type]
        systems=(TEST_SYSTEM.name,),
    )
    plane = (plane_class or IntelligencePlane)(center.kb, checkpointer, context)
    scheduler = Scheduler(
        center.kb, executors, center.bus, SchedulerConfig(checkpoint_overhead_s=overhead_s)
    )
    agents = {
        "plane": plane,
        "estimation": ResourceEstimation(center.kb),
        "optimization": (optimization_class or Optimization)(
            center.kb,
            executors,
            OptimizationConfig(planning=PlanningConfig(checkpoint_overhead_s=overhead_s)),
        ),
        "profiling": Profiling(center.kb, executors),
        "scheduler": scheduler,
    }
    runners = {}
    for name, agent in agents.items():
        if name == "plane" and not start_plane:
            continue  # the test runs it itself (to kill it)
        runners[name] = await center.start(agent)
    agents["runners"] = runners
    return agents


async def tick(center: MiniCenter, scheduler: Any, seconds: float = 10) -> None:
    """Let simulated time pass, let the scheduler's monitors look, let agents settle."""
    center.clock.advance(seconds)
    for monitor in scheduler.monitors.values():
        await monitor.poll_once()
    await center.settle()
