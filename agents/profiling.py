"""The Profiling / Data-Gen agent: downsized runs of workloads no estimator knows well.

Senses ``profile.requested`` (Resource Estimation found no confident estimator: an
unseen model, or intervals too wide) and the end of its own profiling plans
(``plan.finished`` with purpose ``profiling``).

On a request it decides, purely, which downsized runs to make: one per node type in the
request's scope that one of its executors can reach (at most ``max_runs``), on the
partition with the shortest time limit that fits (debug queues are made for this), one
node, the first batch size, a few minutes at most. Each run is a small plan whose id is
derived from (model, system, node type, batch size), handed to the Scheduler agent as a
``plan.approved`` with purpose ``profiling``: the Scheduler submits it like any other
plan, with ``RIGHTSIZE_PROFILE_STEPS`` set, so the workload's own script runs a few timed
steps and prints one line:

    RIGHTSIZE_PROFILE iteration_s=0.047 spread_s=0.017 peak_memory_mb=400 startup_s=2.2 ...

When the run ends it reads that line from the job's output, stores a ``ProfileRecord``
(family ``workload``: the measured workload itself), publishes ``profile.completed`` for
every plan waiting for the model (the Intelligence Plane then asks for estimates again, and
Resource Estimation's profiled estimator answers), and asks Model Promotion to retrain
on the new data (``estimator.retrain_requested``). A run that fails, or prints no
profile line, is reported as a failed profile with the reason.

A model that was already profiled (its profiling plan completed) is answered at once;
one being profiled is not launched twice.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.estimation import PROFILE_FAMILY
from agents.events import (
    Envelope,
    EstimatorRetrainRequested,
    PlanApproved,
    PlanFinished,
    ProfileCompleted,
    ProfileRequested,
)
from agents.runtime import Action, Agent, Emit, Observation
from agents.topics import PLANS, PROFILES
from knowledge_base.catalog import Catalog, NodeType, Partition, System
from knowledge_base.errors import NotFoundError, RightsizeError
from knowledge_base.records import (
    CascadeSegment,
    Plan,
    PlanOption,
    PlanStatus,
    ProfileRecord,
    ProfileStatus,
)
from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import DNNTraining, WorkloadSpec
from tools.actuators.base import Executor
from tools.estimators.gpu.correction import measurement_record

__all__ = [
    "PROFILE_TARGET",
    "Launch",
    "Profiling",
    "ProfilingConfig",
    "ProfilingObservation",
    "parse_profile_line",
    "profile_plan_id",
    "profiling_runs",
]

PROFILE_TARGET = "dnn_runtime_s"
_LINE = re.compile(r"RIGHTSIZE_PROFILE\s+(?P<fields>.*)$", re.MULTILINE)


class ProfilingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_runs: int = Field(default=2, ge=1, description="Downsized runs per request")
    walltime_s: int = Field(default=300, ge=60, description="Most a profiling run may take")
    memory_mb: int = Field(default=4096, ge=256, description="Most memory a run asks for")


def profile_plan_id(model: str, system: str, node_type: str, batch_size: int) -> str:
    """Deterministic: one profiling plan per (model, hardware, batch), however often asked."""
    digest = hashlib.sha256(f"{model}\x1f{system}\x1f{node_type}\x1f{batch_size}".encode())
    return f"profile-{digest.hexdigest()[:16]}"


def _fits(partition: Partition, node: NodeType) -> bool:
    return partition.max_nodes >= 1 and partition.min_nodes <= 1 and bool(node.cores)


def profiling_runs(
    spec: WorkloadSpec,
    requester: str,
    reason: str,
    catalog: Catalog,
    reachable: Sequence[str],
    config: ProfilingConfig,
) -> list[Plan]:
    """The downsized runs worth making for ``spec`` (pure; empty when none is reachable)."""
    workload = spec.workload
    if not isinstance(workload, DNNTraining):
        return []
    from fnmatch import fnmatchcase

    batch = workload.batch_sizes[0]
    runs: list[Plan] = []
    seen: set[tuple[str, str]] = set()
    systems: list[System] = [
        catalog.system(name)
        for name in (spec.goals.systems or catalog.names())
        if name in reachable
    ]
    for system in systems:
        candidates: list[tuple[int, Partition, NodeType]] = []
        for partition in system.partitions:
            if spec.goals.partitions is not None and not any(
                fnmatchcase(partition.name, p) for p in spec.goals.partitions
            ):
                continue
            if any(fnmatchcase(partition.name, p) for p in spec.goals.exclude_partitions):
                continue
            node = system.node_type_of(partition)
            if node is None or not _fits(partition, node):
                continue
            if spec.goals.gpu_only and not partition.gpus_per_node:
                continue
            if spec.goals.cpu_only and partition.gpus_per_node:
                continue
            candidates.append((partition.max_minutes, partition, node))
        for _, partition, node in sorted(candidates, key=lambda c: (c[0], c[1].name)):
            if (system.name, node.name) in seen or len(runs) >= config.max_runs:
                continue
            seen.add((system.name, node.name))
            cores = min(partition.max_cores_per_node, node.cores or 1)
            gpus = min(partition.gpus_per_node, 1)
            memory = min(config.memory_mb, partition.max_memory_mb)
            walltime = min(config.walltime_s, partition.max_minutes * 60)
            downsized = spec.model_copy(
                update={
                    "name": f"{spec.name[:40]}-profile",
                    "workload": workload.model_copy(
                        update={"epochs": 1, "checkpointable": False, "batch_sizes": [batch]}
                    ),
                }
            )
            runs.append(
                Plan(
                    id=profile_plan_id(workload.model, system.name, node.name, batch),
                    user=spec.user,
                    spec=downsized,
                    status=PlanStatus.APPROVED,
                    purpose="profiling",
                    option=PlanOption(
                        system=system.name,
                        partition=partition.name,
                        node_type=node.name,
                        nodes=1,
                        cores_per_node=cores,
                        gpus_per_node=gpus,
                        memory_mb=memory,
                        walltime_s=walltime,
                        batch_size=batch,
                    ),
                    segments=[CascadeSegment(index=0, walltime_s=walltime)],
                    reason=f"profiling for plan {requester}: {reason}",
                )
            )
    return runs


def parse_profile_line(output: str) -> dict[str, float] | None:
    """The fields of the last ``RIGHTSIZE_PROFILE`` line, or None when there is none."""
    found = None
    for match in _LINE.finditer(output):
        found = match
    if found is None:
        return None
    values: dict[str, float] = {}
    for key, value in re.findall(r"(\w+)=([-+0-9.eE]+)", found.group("fields")):
        try:
            values[key] = float(value)
        except ValueError:
            continue
    return values if "iteration_s" in values else None


class ProfilingObservation(Observation):
    kind: Literal["request", "finished"]
    spec: WorkloadSpec | None = None
    requester: str | None = None
    reason: str = ""
    catalog: Catalog | None = None
    reachable: list[str] = Field(default_factory=list)
    existing: dict[str, str] = Field(
        default_factory=dict, description="Profiling plan id -> its status, for those stored"
    )
    plan: Plan | None = None
    finished: PlanFinished | None = None
    output: str = ""
    gpu_model: str | None = Field(default=None, description="A GPU run's catalog GPU model")


class Launch(Action):
    plan: Plan


class StoreProfile(Action):
    profile: ProfileRecord


class Profiling(Agent[ProfilingObservation]):
    """Measures workloads no estimator knows, through the Scheduler, and feeds history back."""

    name = "profiling"
    topics = (PROFILES, PLANS)

    def __init__(
        self,
        kb: KnowledgeBase,
        executors: Mapping[str, Executor],
        config: ProfilingConfig | None = None,
    ) -> None:
        self.kb = kb
        self.executors = dict(executors)
        self.config = config or ProfilingConfig()

    async def sense(self, event: Envelope) -> ProfilingObservation | None:
        payload = event.payload
        if isinstance(payload, ProfileRequested) and isinstance(payload.spec.workload, DNNTraining):
            catalog = await self.kb.get_catalog()
            runs = profiling_runs(
                payload.spec,
                payload.plan_id or "none",
                payload.reason,
                catalog,
                list(self.executors),
                self.config,
            )
            existing = {}
            for run in runs:
                try:
                    existing[run.id] = (await self.kb.get_plan(run.id)).status.value
                except NotFoundError:
                    continue
            return ProfilingObservation(
                event=event,
                kind="request",
                spec=payload.spec,
                requester=payload.plan_id,
                reason=payload.reason,
                catalog=catalog,
                reachable=list(self.executors),
                existing=existing,
            )
        if isinstance(payload, PlanFinished) and payload.purpose == "profiling":
            try:
                plan = await self.kb.get_plan(payload.plan_id)
            except NotFoundError:
                return None
            output = ""
            executor = self.executors.get(plan.option.system) if plan.option else None
            if executor is not None and payload.job_ids:
                try:
                    output = await executor.output_tail(payload.job_ids[-1])
                except RightsizeError as exc:
                    if exc.transient:
                        raise
            return ProfilingObservation(
                event=event,
                kind="finished",
                plan=plan,
                finished=payload,
                output=output,
                gpu_model=await self._gpu_model(plan),
            )
        return None

    async def _gpu_model(self, plan: Plan) -> str | None:
        """The catalog's GPU model of a profiling run on a GPU partition (None: CPU)."""
        option = plan.option
        if option is None or not option.gpus_per_node or option.node_type is None:
            return None
        try:
            system = (await self.kb.get_catalog()).system(option.system)
        except (NotFoundError, KeyError):
            return None
        node = next((n for n in system.node_types if n.name == option.node_type), None)
        return node.gpu.model if node is not None and node.gpu is not None else None

    def decide(self, observation: ProfilingObservation) -> list[Action]:
        if observation.kind == "request":
            return self._decide_request(observation)
        return self._decide_finished(observation)

    def _decide_request(self, observation: ProfilingObservation) -> list[Action]:
        spec, catalog = observation.spec, observation.catalog
        assert spec is not None and catalog is not None
        assert isinstance(spec.workload, DNNTraining)
        model = spec.workload.model
        requester = observation.requester or "none"
        runs = profiling_runs(
            spec, requester, observation.reason, catalog, observation.reachable, self.config
        )
        if not runs:
            return [
                Emit(
                    payload=ProfileCompleted(
                        plan_id=observation.requester,
                        model=model,
                        family=PROFILE_FAMILY,
                        ok=False,
                        reason="no partition in the request's scope can be reached for a "
                        f"profiling run (executors: {', '.join(observation.reachable) or 'none'})",
                    )
                )
            ]
        actions: list[Action] = []
        done = [r.id for r in runs if observation.existing.get(r.id) == PlanStatus.COMPLETED.value]
        if done and len(done) == len(runs):
            actions.append(
                Emit(
                    payload=ProfileCompleted(
                        plan_id=observation.requester,
                        model=model,
                        family=PROFILE_FAMILY,
                        profile_ids=done,
                        reason="already profiled",
                    )
                )
            )
            return actions
        for run in runs:
            status = observation.existing.get(run.id)
            if status in (None, PlanStatus.FAILED.value, PlanStatus.CANCELLED.value):
                actions.append(Launch(plan=run))
        return actions

    def _decide_finished(self, observation: ProfilingObservation) -> list[Action]:
        plan, finished = observation.plan, observation.finished
        assert plan is not None and finished is not None
        # Every plan waiting for this model is told: the Intelligence Plane resumes each
        # thread that waits for a profile of it (plan_id None: to whom it may concern).
        requester = None
        workload = plan.spec.workload
        assert isinstance(workload, DNNTraining) and plan.option is not None
        fields = parse_profile_line(observation.output)
        if finished.status is not PlanStatus.COMPLETED or fields is None:
            why = (
                f"the profiling run ended {finished.status.value}: {finished.reason}"
                if finished.status is not PlanStatus.COMPLETED
                else "the profiling run printed no RIGHTSIZE_PROFILE line (set "
                "RIGHTSIZE_PROFILE_STEPS support in the workload's script)"
            )
            return [
                Emit(
                    payload=ProfileCompleted(
                        plan_id=requester,
                        model=workload.model,
                        family=PROFILE_FAMILY,
                        ok=False,
                        reason=why,
                    )
                )
            ]
        option = plan.option
        profile = ProfileRecord(
            id=plan.id,
            family=PROFILE_FAMILY,
            model=workload.model,
            config={
                "batch_size": int(fields.get("batch_size", option.batch_size or 1)),
                "startup_s": fields.get("startup_s", 5.0),
                "samples": int(fields.get("samples", workload.dataset_samples)),
                "threads": int(fields.get("threads", option.cores_per_node)),
            },
            hardware={
                "system": option.system,
                "partition": option.partition,
                "node_type": option.node_type or "",
                "cores": option.cores_per_node,
                "gpus": option.gpus_per_node,
            },
            status=ProfileStatus.OK,
            iteration_s=fields["iteration_s"],
            iteration_s_spread=fields.get("spread_s"),
            peak_memory_mb=fields.get("peak_memory_mb"),
        )
        measured: list[Action] = []
        if observation.gpu_model is not None and option.gpus_per_node and fields["iteration_s"] > 0:
            # A GPU step measurement too: what Model Promotion corrects the per-operator
            # GPU model on (tools.estimators.gpu.correction).
            measured.append(
                StoreProfile(
                    profile=measurement_record(
                        f"{plan.id}-gpu-step",
                        workload,
                        batch_size=int(profile.config["batch_size"]),
                        gpus=option.gpus_per_node,
                        gpu_model=observation.gpu_model,
                        step_s=fields["iteration_s"],
                        source="profiling",
                        hardware=dict(profile.hardware),
                        created_at=observation.event.time,
                    )
                )
            )
        return [
            StoreProfile(profile=profile),
            *measured,
            Emit(
                payload=ProfileCompleted(
                    plan_id=requester,
                    model=workload.model,
                    family=PROFILE_FAMILY,
                    profile_ids=[profile.id],
                    reason=f"{fields['iteration_s'] * 1000:.1f} ms per step at batch "
                    f"{profile.config['batch_size']} on {option.system}/{option.node_type}",
                )
            ),
            Emit(
                payload=EstimatorRetrainRequested(
                    target=PROFILE_TARGET,
                    reason=f"new profile of {workload.model} on {option.system}/"
                    f"{option.node_type}: a workload no trained estimator had seen",
                )
            ),
        ]

    async def act(self, actions: Sequence[Action], cause: Envelope) -> list[Emit]:
        emits: list[Emit] = []
        for action in actions:
            if isinstance(action, Launch):
                emits.append(
                    Emit(
                        payload=PlanApproved(plan=action.plan, purpose="profiling"),
                        correlation_id=action.plan.id,
                    )
                )
            elif isinstance(action, StoreProfile):
                await self.kb.add_profiles([action.profile])
            elif isinstance(action, Emit):
                emits.append(action)
            else:
                raise NotImplementedError(type(action).__name__)
        return emits
