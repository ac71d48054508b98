"""The MCP tools: one pydantic input model and one pydantic result each, a thin mapping.

Each tool is a plain ``async def impl(request, app, user) -> Result`` that calls the same
functions the CLI and the agents call (``tools.planning.service``, the knowledge base,
the executors, the bus); ``register_tools`` puts them on an ``MCPServer`` with honest
annotations. ``user`` is the authenticated caller: plans and jobs of anyone else are
answered as not found, never shown.

    list_systems           read-only     the center catalog, one line per system
    describe_partition     read-only     one queue's limits, node type and charge policy
    estimate_resources     read-only     a WorkloadSpec's estimates, or a PyTorch model file's
    what_if                read-only     every option, ranked, with every infeasible reason
    build_plan             writes        the recommended plan, stored as the caller's draft
    submit_plan            writes        run exactly the option the user confirmed (confirm=true)
    get_plan_status        read-only     a plan and its jobs as the executor sees them
    cancel_plan            destructive   ask the Scheduler to cancel a plan and its jobs
    explain_infeasibility  read-only     why options (or a plan) cannot run, closest first
    get_job_history        read-only     the caller's finished jobs
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import datetime
from typing import Annotated, Any, Self, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError, model_validator

from agents import ledger
from knowledge_base.catalog import NodeType, Partition, System
from knowledge_base.errors import InvalidInputError, RightsizeError
from knowledge_base.records import Cost, JobRecord, Plan, PlanStatus
from knowledge_base.store import JobQuery
from knowledge_base.workload import DNNTraining, Objective, WorkloadSpec
from mcp_server.auth import current_user
from mcp_server.context import AppContext
from mcp_server.estimate_tools import (
    EstimateResourcesInput,
    EstimateResourcesResult,
    ModelFile,
    estimate_resources,
)
from mcp_server.tool_models import (
    PLAN_ID_EXAMPLE,
    WORKLOAD_EXAMPLE,
    _bounded,
    _Input,
    _Result,
    _WorkloadInput,
)
from tools.actuators.model import JobStatus
from tools.planning.confirm import Confirmation
from tools.planning.model_files import check_model_file, is_model_file
from tools.planning.results import Infeasible, PlanSummary
from tools.planning.selector import Selection
from tools.planning.service import plan_workload

__all__ = [
    "TOOLS",
    "BuildPlanInput",
    "BuildPlanResult",
    "CancelPlanInput",
    "CancelPlanResult",
    "DescribePartitionInput",
    "EstimateResourcesInput",
    "EstimateResourcesResult",
    "ExplainInfeasibilityInput",
    "ExplainInfeasibilityResult",
    "JobHistoryInput",
    "JobHistoryResult",
    "ListSystemsInput",
    "ListSystemsResult",
    "ModelFile",
    "PartitionDescription",
    "PlanIdInput",
    "PlanStatusResult",
    "SubmitPlanInput",
    "SubmitPlanResult",
    "SystemSummary",
    "WhatIfInput",
    "WhatIfResult",
    "add_tools",
    "owned_plan",
    "register_tools",
]

log = logging.getLogger(__name__)

# -- list_systems ---------------------------------------------------------------------


class ListSystemsInput(_Input):
    center: str | None = Field(default=None, max_length=64, description="Only this center")


class SystemSummary(_Result):
    name: str
    center: str
    scheduler: str
    partitions: int
    gpu_partitions: int
    node_types: list[str]
    longest_walltime_s: int
    largest_job_nodes: int


class ListSystemsResult(_Result):
    systems: list[SystemSummary]


def _summary(system: System) -> SystemSummary:
    parts = system.partitions
    return SystemSummary(
        name=system.name,
        center=system.center,
        scheduler=system.scheduler,
        partitions=len(parts),
        gpu_partitions=sum(1 for p in parts if p.gpus_per_node),
        node_types=[n.name for n in system.node_types],
        longest_walltime_s=max((p.max_minutes for p in parts), default=0) * 60,
        largest_job_nodes=max((p.max_nodes for p in parts), default=0),
    )


async def list_systems(request: ListSystemsInput, app: AppContext, user: str) -> ListSystemsResult:
    catalog = await app.kb.get_catalog()
    wanted = request.center.lower() if request.center else None
    return ListSystemsResult(
        systems=[
            _summary(s) for s in catalog.systems if wanted is None or s.center.lower() == wanted
        ]
    )


# -- describe_partition ---------------------------------------------------------------


class DescribePartitionInput(_Input):
    system: str = Field(
        min_length=1, max_length=64, description="A system, as list_systems names it",
        examples=["pitzer"],
    )  # fmt: skip
    partition: str = Field(
        min_length=1, max_length=128, description="One of the system's partitions",
        examples=["gpuserial-quad"],
    )  # fmt: skip


class PartitionDescription(_Result):
    system: str
    center: str
    partition: Partition
    node_type: NodeType | None


async def describe_partition(
    request: DescribePartitionInput, app: AppContext, user: str
) -> PartitionDescription:
    system = await app.kb.get_system(request.system)
    partition = system.partition(request.partition)
    return PartitionDescription(
        system=system.name,
        center=system.center,
        partition=partition,
        node_type=system.node_type_of(partition),
    )


# -- what_if / build_plan / explain_infeasibility ---------------------------------------


class WhatIfInput(_WorkloadInput):
    objective: Objective | None = Field(default=None, description="Overrides goals.objective")
    top: int = Field(default=10, ge=1, le=500, description="Plans and reasons to return at most")


class WhatIfResult(_Result):
    workload: str
    objective: str
    recommended: PlanSummary | None
    feasible: list[PlanSummary] = Field(description="Best first, at most top")
    feasible_count: int
    infeasible: list[Infeasible] = Field(description="Closest to feasible first, at most top")
    infeasible_count: int
    notes: list[str]


async def _select(
    app: AppContext, spec: WorkloadSpec, objective: Objective | None = None
) -> Selection:
    workload = spec.workload
    if isinstance(workload, DNNTraining) and is_model_file(workload):
        if not app.deps.allow_model_code:
            raise InvalidInputError(
                "this server does not run model code (start it with --allow-model-code)",
                field="workload.model",
                value=workload.model,
            )
        # Tracing the file runs its code and torch: off the event loop.
        await asyncio.to_thread(check_model_file, workload)
    catalog = await app.kb.get_catalog()
    estimators = await app.chain().estimators(spec, catalog)
    return plan_workload(spec, catalog, estimators, objective=objective, rates=app.deps.rates)


async def what_if(request: WhatIfInput, app: AppContext, user: str) -> WhatIfResult:
    selection = await _select(app, request.workload, request.objective)
    report = selection.report()
    return WhatIfResult(
        workload=report.workload,
        objective=report.objective,
        recommended=report.recommended,
        feasible=report.feasible[: request.top],
        feasible_count=len(report.feasible),
        infeasible=report.infeasible[: request.top],
        infeasible_count=len(report.infeasible),
        notes=report.notes,
    )


class BuildPlanInput(_WorkloadInput):
    objective: Objective | None = Field(default=None, description="Overrides goals.objective")


class BuildPlanResult(_Result):
    plan_id: str | None = Field(description="The stored draft; None when nothing can run")
    status: PlanStatus | None
    recommended: PlanSummary | None
    alternatives: list[PlanSummary] = Field(description="The next best, at most 3")
    infeasible: list[Infeasible] = Field(description="Closest first, at most 5")
    notes: list[str]
    next_step: str


def _own_spec(spec: WorkloadSpec, user: str) -> None:
    if spec.user != user:
        raise InvalidInputError(
            f"you are {user!r}; a plan is built for its caller",
            field="workload.user",
            value=spec.user,
        )


async def build_plan(request: BuildPlanInput, app: AppContext, user: str) -> BuildPlanResult:
    spec = request.workload
    _own_spec(spec, user)
    selection = await _select(app, spec, request.objective)
    report = selection.report()
    plan_id: str | None = None
    status: PlanStatus | None = None
    if selection.recommended is not None:
        plan_id = f"{spec.name[:40]}-{uuid.uuid4().hex[:12]}"
        record = selection.recommended.to_record(spec, plan_id, reason="built over MCP")
        stored = await app.kb.put_plan(record.model_copy(update={"status": PlanStatus.DRAFT}))
        status = stored.status
    return BuildPlanResult(
        plan_id=plan_id,
        status=status,
        recommended=report.recommended,
        alternatives=report.feasible[1:4],
        infeasible=report.infeasible[:5],
        notes=report.notes,
        next_step=(
            f"submit_plan with plan_id={plan_id!r}, the option_id, walltime_s and cost the "
            "user agreed to (recommended or an alternative), and confirm=true"
            if plan_id
            else "explain_infeasibility says why nothing fits; relax a goal or a size"
        ),
    )


class ExplainInfeasibilityInput(_Input):
    workload: WorkloadSpec | None = Field(
        default=None, description="Explain this workload", examples=[WORKLOAD_EXAMPLE]
    )
    plan_id: str | None = Field(
        default=None, min_length=1, max_length=200, description="Or one of your plans",
        examples=[PLAN_ID_EXAMPLE],
    )  # fmt: skip
    top: int = Field(default=10, ge=1, le=500, description="Reasons to return at most")

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.workload is None) == (self.plan_id is None):
            raise ValueError("give exactly one of workload or plan_id")
        if self.workload is not None:
            _bounded(self.workload)
        return self


class ExplainInfeasibilityResult(_Result):
    workload: str
    feasible_count: int
    has_plan: bool
    by_constraint: dict[str, int] = Field(description="Infeasible options per broken constraint")
    infeasible: list[Infeasible] = Field(description="Closest to feasible first")
    plan_reason: str | None = Field(description="The plan's own reason, for a plan_id")
    summary: str


async def explain_infeasibility(
    request: ExplainInfeasibilityInput, app: AppContext, user: str
) -> ExplainInfeasibilityResult:
    plan_reason: str | None = None
    if request.plan_id is not None:
        plan = await owned_plan(app, request.plan_id, user)
        spec, plan_reason = plan.spec, plan.reason
    else:
        assert request.workload is not None
        spec = request.workload
    selection = await _select(app, spec)
    counts = Counter(i.constraint for i in selection.infeasible)
    closest = selection.infeasible[0].reason if selection.infeasible else "none"
    summary = f"{len(selection.ranked)} options can run, {len(selection.infeasible)} cannot" + (
        f"; closest that cannot: {closest}" if selection.infeasible else ""
    )
    return ExplainInfeasibilityResult(
        workload=spec.name,
        feasible_count=len(selection.ranked),
        has_plan=selection.recommended is not None,
        by_constraint=dict(counts.most_common()),
        infeasible=selection.infeasible[: request.top],
        plan_reason=plan_reason,
        summary=summary,
    )


# -- plans: submit, status, cancel ------------------------------------------------------


async def owned_plan(app: AppContext, plan_id: str, user: str) -> Plan:
    """The caller's plan; someone else's is not found (its existence is not disclosed)."""
    return await ledger.owned_plan(app.kb, plan_id, user)


class PlanIdInput(_Input):
    plan_id: str = Field(
        min_length=1, max_length=200, description="One of your plans (build_plan's plan_id)",
        examples=[PLAN_ID_EXAMPLE],
    )  # fmt: skip


class SubmitPlanInput(PlanIdInput):
    confirm: bool = Field(description="Must be true: the user agreed to spend allocation on it")
    option_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The option the user confirmed (build_plan's recommended or an "
        "alternative's option_id); default: the draft's recommended option",
    )
    walltime_s: int | None = Field(
        default=None, ge=1, description="The walltime per job the user saw; checked if given"
    )
    cost: float | None = Field(
        default=None, ge=0, description="The expected cost the user saw; checked if given"
    )
    request_text: str = Field(
        default="", max_length=2000, description="The request in the user's words, for the log"
    )


class SubmitPlanResult(_Result):
    plan_id: str
    status: PlanStatus
    option_id: str | None
    walltime_s: int | None
    cost: Cost | None
    submitted: bool
    already_submitted: bool
    event_id: str
    message: str


async def submit_plan(request: SubmitPlanInput, app: AppContext, user: str) -> SubmitPlanResult:
    """Submit exactly the option the user confirmed, or refuse with why it no longer fits."""
    if request.confirm is not True:
        raise InvalidInputError(
            "submitting spends the user's allocation: ask them, then pass confirm=true",
            field="confirm",
            value=request.confirm,
        )
    outcome = await ledger.submit_confirmed(
        app.kb,
        app.bus,
        request.plan_id,
        user,
        Confirmation(option_id=request.option_id, walltime_s=request.walltime_s, cost=request.cost),
        rates=app.deps.rates,
        text=request.request_text,
        chain=app.chain(),
    )
    return SubmitPlanResult.model_validate(outcome.model_dump())


class PlanStatusResult(_Result):
    plan: Plan
    jobs: list[JobStatus] = Field(description="Each submitted job as the executor sees it now")
    job_errors: list[str] = Field(default_factory=list)


def _job_ids(plan: Plan) -> list[str]:
    return [s.job_id for s in plan.segments if s.job_id]


async def get_plan_status(request: PlanIdInput, app: AppContext, user: str) -> PlanStatusResult:
    plan = await owned_plan(app, request.plan_id, user)
    jobs: list[JobStatus] = []
    errors: list[str] = []
    if plan.option is not None and _job_ids(plan):
        system = await app.kb.get_system(plan.option.system)
        executor = app.deps.open_executor(system)
        for job_id in _job_ids(plan):
            try:
                jobs.append(await executor.status(job_id))
            except RightsizeError as exc:
                errors.append(f"{job_id}: {exc}")
    return PlanStatusResult(plan=plan, jobs=jobs, job_errors=errors)


class CancelPlanInput(PlanIdInput):
    reason: str = Field(
        default="cancelled by the user", min_length=1, max_length=500,
        description="Why, for the plan's record",
    )  # fmt: skip
    wait_s: float = Field(
        default=5.0,
        ge=0,
        le=60,
        description="Wait this long for the Scheduler to confirm (0: return once asked)",
    )


class CancelPlanResult(_Result):
    plan_id: str
    status: PlanStatus = Field(description="As stored when the call returns")
    already_final: bool
    requested: bool = Field(description="The cancellation was handed to the Scheduler")
    jobs_in_flight: list[str] = Field(description="Jobs the Scheduler is cancelling")
    event_id: str | None
    message: str


async def cancel_plan(request: CancelPlanInput, app: AppContext, user: str) -> CancelPlanResult:
    """Ask the Scheduler (the ledger's one writer) to cancel the plan and its jobs."""
    outcome = await ledger.request_cancel(
        app.kb, app.bus, request.plan_id, user, request.reason, wait_s=request.wait_s
    )
    return CancelPlanResult.model_validate(outcome.model_dump())


# -- job history ------------------------------------------------------------------------


class JobHistoryInput(_Input):
    system: str | None = Field(
        default=None, min_length=1, max_length=64, description="Only jobs on this system",
        examples=["pitzer"],
    )  # fmt: skip
    plan_id: str | None = Field(
        default=None, min_length=1, max_length=200, description="Only this plan's jobs",
        examples=[PLAN_ID_EXAMPLE],
    )  # fmt: skip
    application: str | None = Field(
        default=None, min_length=1, max_length=200, description="Only this application"
    )
    submitted_after: datetime | None = Field(
        default=None, description="Only jobs submitted after this (ISO 8601)",
        examples=["2026-11-01T00:00:00Z"],
    )  # fmt: skip
    limit: int = Field(default=50, ge=1, le=1000, description="Jobs to return at most")


class JobHistoryResult(_Result):
    user: str
    jobs: list[JobRecord] = Field(description="The caller's jobs, newest first")


async def get_job_history(request: JobHistoryInput, app: AppContext, user: str) -> JobHistoryResult:
    if request.plan_id is not None:
        await owned_plan(app, request.plan_id, user)
    jobs = await app.kb.query_jobs(
        JobQuery(
            user=user,
            system=request.system,
            plan_id=request.plan_id,
            application=request.application,
            submitted_after=request.submitted_after,
            newest_first=True,
            limit=request.limit,
        )
    )
    return JobHistoryResult(user=user, jobs=jobs)


# -- registration -------------------------------------------------------------------------

InputT = TypeVar("InputT", bound=BaseModel)
ResultT = TypeVar("ResultT", bound=BaseModel)
Impl = Callable[[Any, AppContext, str], Awaitable[BaseModel]]

_READ = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True)
TOOLS: dict[str, tuple[Impl, type[BaseModel], type[BaseModel], ToolAnnotations, str]] = {
    "list_systems": (
        list_systems,
        ListSystemsInput,
        ListSystemsResult,
        _READ,
        "The center's systems: partitions, GPU partitions, node types, longest walltime.",
    ),
    "describe_partition": (
        describe_partition,
        DescribePartitionInput,
        PartitionDescription,
        _READ,
        "One partition's policy: node, core, memory and walltime limits, GPUs, charges.",
    ),
    "estimate_resources": (
        estimate_resources,
        EstimateResourcesInput,
        EstimateResourcesResult,
        _READ,
        "Runtime and memory estimates per option, for a WorkloadSpec or a PyTorch model "
        "file's text (the file's code is run to trace the model).",
    ),
    "what_if": (
        what_if,
        WhatIfInput,
        WhatIfResult,
        _READ,
        "Every way to run a workload: feasible plans ranked by the objective, with cost, "
        "wait and finish, and every infeasible option with why. Stores nothing.",
    ),
    "build_plan": (
        build_plan,
        BuildPlanInput,
        BuildPlanResult,
        ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False),
        "Plan a workload and store the recommended plan as the caller's draft.",
    ),
    "submit_plan": (
        submit_plan,
        SubmitPlanInput,
        SubmitPlanResult,
        ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=True),
        "Run exactly the option of a draft plan the user confirmed (option_id, walltime_s, "
        "cost as shown); refused with the reason if it no longer fits. Spends allocation, "
        "so it needs confirm=true after the user agreed. Retrying is safe.",
    ),
    "get_plan_status": (
        get_plan_status,
        PlanIdInput,
        PlanStatusResult,
        _READ,
        "One of the caller's plans and its jobs' current states.",
    ),
    "cancel_plan": (
        cancel_plan,
        CancelPlanInput,
        CancelPlanResult,
        ToolAnnotations(readOnlyHint=False, destructiveHint=True, idempotentHint=True),
        "Cancel one of the caller's plans: the Scheduler cancels its jobs still queued or "
        "running and submits nothing more for it.",
    ),
    "explain_infeasibility": (
        explain_infeasibility,
        ExplainInfeasibilityInput,
        ExplainInfeasibilityResult,
        _READ,
        "Why options (of a workload, or of one of the caller's plans) cannot run, closest "
        "first, and how many fail each constraint.",
    ),
    "get_job_history": (
        get_job_history,
        JobHistoryInput,
        JobHistoryResult,
        _READ,
        "The caller's jobs from the center's history, newest first.",
    ),
}


@contextlib.contextmanager
def tool_errors() -> Iterator[None]:
    """Expected failures become tool errors that name the field; anything else is a bug."""
    try:
        yield
    except RightsizeError as exc:
        raise ToolError(str(exc)) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        raise ToolError(f"{where}: {message}" if where else message) from exc


def flat_parameters(input_model: type[BaseModel]) -> list[inspect.Parameter]:
    """The input model's fields as keyword parameters: the tool takes flat arguments.

    Each keeps its type, default, description and examples (the schema an assistant sees);
    a tool whose fields all have defaults accepts ``{}``. The whole model, with its
    cross-field checks, is validated again inside the call.
    """
    kind = inspect.Parameter.KEYWORD_ONLY
    parameters = []
    for field_name, info in input_model.model_fields.items():
        default = (
            inspect.Parameter.empty
            if info.is_required()
            else info.get_default(call_default_factory=True)
        )
        annotation = Annotated[info.annotation, info]  # type: ignore[name-defined]
        parameters.append(
            inspect.Parameter(field_name, kind, default=default, annotation=annotation)
        )
    return parameters


def _tool(name: str, impl: Impl, input_model: type[BaseModel], result: type[BaseModel]) -> Any:
    async def tool(ctx: Context[AppContext, Any], **arguments: Any) -> Any:
        app: AppContext = ctx.request_context.lifespan_context
        user = current_user(app.deps.stdio_user)
        with app.deps.metrics.timing_tool(name), tool_errors():
            request = input_model.model_validate(arguments)
            return await impl(request, app, user)

    tool.__name__ = name
    tool.__doc__ = impl.__doc__
    parameters = flat_parameters(input_model)
    tool.__annotations__ = {
        **{p.name: p.annotation for p in parameters},
        "ctx": Context,
        "return": result,
    }
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("ctx", positional, annotation=Context), *parameters],
        return_annotation=result,
    )
    return tool


def register_tools(server: MCPServer[AppContext]) -> None:
    """Every tool, with its input model, result model and annotations."""
    add_tools(server, TOOLS)


def add_tools(server: MCPServer[AppContext], tools: Mapping[str, Any]) -> None:
    """The tools of a table (name -> impl, input model, result model, annotations,
    description) on ``server``: every tool module registers through here."""
    for name, (impl, input_model, result, hints, description) in tools.items():
        server.add_tool(
            _tool(name, impl, input_model, result),
            name=name,
            description=description,
            annotations=hints,
            structured_output=True,
        )
