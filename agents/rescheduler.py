"""The Re-scheduler's rules: what to do when one of a plan's jobs ends or reports progress.

Pure functions, so the Scheduler's choices can be tested one by one and replayed. The
Scheduler senses (the plan and its ledger from the knowledge base, the job's last
progress line from its output, the partition's limits from the catalog), asks these
rules, and acts (submits, records, publishes a ``schedule.decision`` with the reason).

A plan's ledger is ``Plan.segments``: the cascade segments the planner laid out
(``job_id`` and ``state`` None) followed, in submission order, by one entry per job the
Scheduler submitted (a retry of a segment is another entry with the same ``index``;
an entry in state ``submitting`` without a job id is a submission under way).
``Plan.option`` is what the next job asks for: the Re-scheduler raises its memory after
an out-of-memory kill, and a retry's walltime after a timeout.

The rules, for a job that ended:

- COMPLETED with its last progress line at the total (or with no progress line): the plan
  is done. Below the total, a checkpointing workload gets the next cascade segment (the
  job stopped itself before its walltime, having checkpointed); a segment that made no
  progress stops the chain rather than loop.
- OUT_OF_MEMORY: the same segment again with more memory, in whole GB, capped at what
  the partition allows: where the job's predicted memory distribution is known
  (``JobEnd.memory_distribution_mb``, from the history estimator), the amount that
  covers all but ``memory_oom_target`` of the jobs that needed more than the request that
  was killed (the distribution conditioned on "it needed more than X"); otherwise, or
  when the kill went past everything the distribution foresaw, ``memory_growth`` x the
  memory. Stop with an explanation once the partition's limit was already tried or
  ``max_oom_attempts`` resubmissions are spent.
- TIMEOUT: a checkpointing workload that progressed resumes in the next segment; one that
  cannot checkpoint, or timed out before its first checkpoint, gets ``walltime_growth`` x
  the walltime where the partition's limit allows, and stops with an explanation (which
  of the two it was) where it does not.
- FAILED, CANCELLED, UNKNOWN: stop, saying what the batch system said.

And for a running job's progress: a projected run past the estimate's upper bound by
``divergence_factor``, or a job that cannot checkpoint projected to outrun its own
walltime, asks for a re-plan (the Scheduler asks once per job). The Intelligence Plane
answers with a revision (``plan.replan_decided``), which ``revise`` applies to the
ledger: new option and estimate, the planned segments from the revised one on, the job
it replaces marked ``replanned`` (its end then decides nothing), and one typed record
(``PlanRevision``) appended to the plan's re-plan history, ``Plan.replans``.

Whether a ledger entry's job is over is ``SegmentState.ended`` (``JobState.ended``, plus
``replanned``): one definition for the Scheduler, the MCP tools and the CLI.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import (
    CascadeSegment,
    Interval,
    JobState,
    Plan,
    PlanOption,
    PlanRevision,
    PlanStatus,
    ResourceEstimate,
    SegmentState,
)
from tools.estimators.history.memory import conditional_request

__all__ = [
    "Extend",
    "Finish",
    "JobEnd",
    "Limits",
    "NextJob",
    "Replan",
    "ReschedulePolicy",
    "as_of",
    "attempts_of",
    "entry_of",
    "in_flight",
    "next_planned_walltime_s",
    "on_job_end",
    "on_near_limit",
    "on_progress",
    "planned_segments",
    "resubmission",
    "revise",
    "submitted",
]

_GB = 1024


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReschedulePolicy(_Model):
    """How far the Re-scheduler may go on its own before it stops and explains."""

    max_oom_attempts: int = Field(
        default=3, ge=0, description="Resubmissions with more memory, per plan"
    )
    memory_growth: float = Field(
        default=1.5, gt=1, description="Memory x this after an OOM, without a distribution"
    )
    memory_oom_target: float = Field(
        default=0.02,
        gt=0,
        lt=1,
        description="After an OOM, the share of the jobs needing more than the killed request "
        "that the next request may still leave short (with a distribution)",
    )
    max_timeout_attempts: int = Field(
        default=2, ge=0, description="Resubmissions with a longer walltime, per plan"
    )
    walltime_growth: float = Field(default=2.0, gt=1, description="Walltime x this after one")
    max_segments: int = Field(
        default=100, ge=1, description="Most jobs one cascade may run before it is stopped"
    )
    divergence_factor: float = Field(
        default=1.5, gt=1, description="Re-plan when the projected run exceeds upper x this"
    )
    min_fraction_for_divergence: float = Field(
        default=0.05, gt=0, lt=1, description="Judge divergence only after this much progress"
    )
    min_seconds_for_divergence: float = Field(
        default=20, ge=0, description="... and after this long since the first progress line"
    )
    extend_in_place: bool = Field(
        default=False,
        description="Raise a running job's limit in place (up to its ceiling) near its end "
        "instead of letting it time out and resubmitting it; off unless the center gave "
        "Rightsize the rights (SLURM: AdminLevel=Operator), see docs/actuators.md",
    )
    extend_margin_s: float = Field(
        default=120, ge=0, description="Extend once a job has less than this left"
    )


class Limits(_Model):
    """What the plan's partition allows one job (from the catalog)."""

    where: str = Field(min_length=1, description="system/partition, for the explanations")
    max_memory_mb: int = Field(ge=1)
    max_walltime_s: int = Field(ge=60)


class JobEnd(_Model):
    """A job of the plan ended: how, and how far its own progress lines say it got."""

    job_id: str = Field(min_length=1)
    state: JobState
    reason: str = ""
    exit_code: int | None = None
    done: float | None = Field(default=None, ge=0, description="Its last progress line")
    total: float | None = Field(default=None, gt=0)
    unit: str = "step"
    previous_done: float | None = Field(
        default=None, ge=0, description="Where the previous job of the chain left off"
    )
    memory_distribution_mb: tuple[tuple[float, float], ...] | None = Field(
        default=None,
        description="The job's predicted peak memory as (P(use <= MB), MB) pairs, ascending "
        "(the history estimator's quantiles), where one answered",
    )


class NextJob(_Model):
    """Submit another job for the plan."""

    kind: Literal["next_segment", "more_memory", "longer_walltime"]
    segment_index: int = Field(ge=0)
    attempt: int = Field(ge=1, description="Submissions of this segment, this one included")
    memory_mb: int = Field(ge=1)
    walltime_s: int = Field(ge=1)
    reason: str = Field(min_length=1)


class Finish(_Model):
    """The plan is over: completed, or stopped with the explanation."""

    status: PlanStatus
    reason: str = Field(min_length=1)


class Replan(_Model):
    """Progress diverges from the estimate: ask Optimization for a better plan."""

    reason: str = Field(min_length=1)
    remaining_fraction: float = Field(gt=0, le=1)
    projected_run_s: float = Field(gt=0, description="The whole run at this job's pace")


class Extend(_Model):
    """Raise the running job's limit in place, same job id."""

    from_s: int = Field(ge=1, description="Its limit now")
    to_s: int = Field(ge=1, description="The limit to ask for")
    reason: str = Field(min_length=1)


# -- reading the ledger -----------------------------------------------------------------


def _planned(segment: CascadeSegment) -> bool:
    return segment.job_id is None and segment.state is None


def submitted(plan: Plan) -> list[CascadeSegment]:
    """The jobs submitted for ``plan`` (and submissions under way), in submission order."""
    return [s for s in plan.segments if not _planned(s)]


def in_flight(plan: Plan) -> list[CascadeSegment]:
    """The submissions whose job is not over yet (under way, queued, running, unknown)."""
    return [s for s in submitted(plan) if s.state is not None and not s.state.ended]


def planned_segments(plan: Plan) -> int:
    """How many cascade segments the planner laid out (at least 1)."""
    return max(1, len({s.index for s in plan.segments if _planned(s)}))


def as_of(plan: Plan, job_id: str) -> Plan:
    """``plan`` as it stood while ``job_id`` ran: later submissions dropped, the job running.

    Decisions about a job's end are taken on this view, so handling the same end twice
    (a redelivered event) decides the same thing however far the plan has moved since.
    """
    segments: list[CascadeSegment] = []
    found = False
    for segment in plan.segments:
        if _planned(segment):
            segments.append(segment)
        elif not found:
            if segment.job_id == job_id:
                found = True
                segment = segment.model_copy(update={"state": SegmentState.RUNNING})
            segments.append(segment)
    return plan.model_copy(update={"segments": segments}) if found else plan


def entry_of(plan: Plan, job_id: str) -> CascadeSegment | None:
    for segment in plan.segments:
        if segment.job_id == job_id:
            return segment
    return None


def attempts_of(plan: Plan, index: int) -> int:
    """Submissions of segment ``index`` so far."""
    return sum(1 for s in submitted(plan) if s.index == index)


def next_planned_walltime_s(plan: Plan, index: int, default_s: int) -> int:
    """The walltime the planner gave segment ``index`` (beyond the plan: ``default_s``)."""
    for segment in plan.segments:
        if segment.index == index and _planned(segment):
            return segment.walltime_s
    return default_s


def _count(plan: Plan, state: JobState) -> int:
    return sum(1 for s in submitted(plan) if s.state == SegmentState.of(state))


# -- the rules ----------------------------------------------------------------------------


def _mb(value: float) -> str:
    return f"{value / _GB:.1f} GB" if value >= _GB else f"{value:.0f} MB"


def _time(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _progress(end: JobEnd) -> str:
    if end.done is None:
        return "no progress line"
    total = f"/{end.total:g}" if end.total else ""
    return f"{end.unit} {end.done:g}{total}"


def _next_segment(
    plan: Plan, end: JobEnd, index: int, policy: ReschedulePolicy, why: str
) -> NextJob | Finish:
    jobs = len(submitted(plan))
    if jobs >= policy.max_segments:
        return Finish(
            status=PlanStatus.FAILED,
            reason=f"{why}, but the cascade already ran {jobs} jobs, the most allowed "
            f"(max_segments={policy.max_segments}); stopping at {_progress(end)}",
        )
    if end.previous_done is not None and end.done is not None and end.done <= end.previous_done:
        return Finish(
            status=PlanStatus.FAILED,
            reason=f"segment {index} (job {end.job_id}) made no progress: it resumed at "
            f"{end.unit} {end.previous_done:g} and stopped at {end.done:g}; stopping the "
            "cascade rather than loop",
        )
    assert plan.option is not None
    walltime_s = next_planned_walltime_s(plan, index + 1, plan.option.walltime_s)
    return NextJob(
        kind="next_segment",
        segment_index=index + 1,
        attempt=1,
        memory_mb=plan.option.memory_mb,
        walltime_s=walltime_s,
        reason=f"{why} at {_progress(end)}; segment {index + 1} resumes from its checkpoint",
    )


def _more_memory(
    plan: Plan, end: JobEnd, index: int, limits: Limits, policy: ReschedulePolicy
) -> NextJob | Finish:
    assert plan.option is not None
    current = plan.option.memory_mb
    tried = [current]
    ooms = _count(plan, JobState.OUT_OF_MEMORY) + 1  # this one included
    if current >= limits.max_memory_mb:
        return Finish(
            status=PlanStatus.FAILED,
            reason=f"job {end.job_id} ran out of memory with {_mb(current)}, the most "
            f"{limits.where} allows a job (max_memory_mb); the workload cannot fit this "
            "partition: plan it on nodes with more memory or reduce its batch size",
        )
    if ooms > policy.max_oom_attempts:
        return Finish(
            status=PlanStatus.FAILED,
            reason=f"job {end.job_id} ran out of memory with {_mb(current)}; that is "
            f"{ooms} out-of-memory kills and the bounded attempts "
            f"(max_oom_attempts={policy.max_oom_attempts}) are used up",
        )
    raised: float | None = None
    basis = f"x{policy.memory_growth:g}"
    if end.memory_distribution_mb:
        levels, values = zip(*end.memory_distribution_mb, strict=True)
        raised = conditional_request(levels, values, current, policy.memory_oom_target)
        if raised is not None:
            basis = (
                f"the predicted distribution given it needed more than {_mb(current)}, "
                f"covering all but {policy.memory_oom_target:.0%} of such jobs"
            )
    wanted = math.ceil((raised or current * policy.memory_growth) / _GB) * _GB
    memory_mb = min(max(wanted, current + 1), limits.max_memory_mb)
    tried.append(memory_mb)
    capped = " (the partition's limit)" if memory_mb == limits.max_memory_mb else ""
    return NextJob(
        kind="more_memory",
        segment_index=index,
        attempt=attempts_of(plan, index) + 1,
        memory_mb=memory_mb,
        walltime_s=plan.option.walltime_s,
        reason=f"job {end.job_id} ran out of memory with {_mb(current)} ({end.reason or 'killed'}"
        f"); resubmitting segment {index} with {_mb(memory_mb)}{capped} ({basis}), "
        f"attempt {ooms} of {policy.max_oom_attempts}",
    )


def _longer_walltime(
    plan: Plan,
    end: JobEnd,
    index: int,
    limits: Limits,
    policy: ReschedulePolicy,
    checkpointable: bool,
) -> NextJob | Finish:
    """A timeout with nothing to resume from: more walltime, where the partition allows."""
    assert plan.option is not None
    entry = entry_of(plan, end.job_id)
    current = entry.limit_s if entry is not None else plan.option.walltime_s
    timeouts = _count(plan, JobState.TIMEOUT) + 1
    # A checkpointing workload lands here when it timed out before its first checkpoint.
    why = "made no progress to resume from" if checkpointable else "cannot checkpoint"
    if current >= limits.max_walltime_s:
        needs = (
            "a unit of its work (an epoch) and its start-up take longer than one job may "
            "run there; it needs a partition with a longer limit"
            if checkpointable
            else "it needs a partition with a longer limit (or checkpointing, to run as a cascade)"
        )
        return Finish(
            status=PlanStatus.FAILED,
            reason=f"job {end.job_id} ran out of walltime at {_time(current)}, the longest "
            f"{limits.where} allows, and the workload {why}; {needs}",
        )
    if timeouts > policy.max_timeout_attempts:
        return Finish(
            status=PlanStatus.FAILED,
            reason=f"job {end.job_id} timed out at {_time(current)}; that is {timeouts} "
            f"timeouts and the bounded attempts (max_timeout_attempts="
            f"{policy.max_timeout_attempts}) are used up",
        )
    wanted = math.ceil(current * policy.walltime_growth / 60) * 60
    walltime_s = min(wanted, limits.max_walltime_s)
    return NextJob(
        kind="longer_walltime",
        segment_index=index,
        attempt=attempts_of(plan, index) + 1,
        memory_mb=plan.option.memory_mb,
        walltime_s=walltime_s,
        reason=f"job {end.job_id} timed out at {_time(current)} and {why}; "
        f"resubmitting with {_time(walltime_s)} ({limits.where} allows "
        f"{_time(limits.max_walltime_s)}), attempt {timeouts} of {policy.max_timeout_attempts}",
    )


def on_job_end(
    plan: Plan,
    end: JobEnd,
    *,
    limits: Limits,
    checkpointable: bool,
    policy: ReschedulePolicy | None = None,
) -> NextJob | Finish:
    """What to do now that ``end.job_id`` of ``plan`` ended (``plan`` as stored before)."""
    policy = policy or ReschedulePolicy()
    if plan.option is None:
        return Finish(status=PlanStatus.FAILED, reason=f"plan {plan.id} has no option to run")
    entry = entry_of(plan, end.job_id)
    index = entry.index if entry is not None else 0
    state = end.state
    if state is JobState.COMPLETED:
        if end.done is None or end.total is None or end.done >= end.total:
            jobs = len(submitted(plan))
            return Finish(
                status=PlanStatus.COMPLETED,
                reason=f"job {end.job_id} completed ({_progress(end)}) after {jobs} "
                f"job{'s' if jobs != 1 else ''}",
            )
        if not checkpointable:
            return Finish(
                status=PlanStatus.COMPLETED,
                reason=f"job {end.job_id} exited 0 at {_progress(end)}; the workload does "
                "not checkpoint, so there is nothing to resume",
            )
        return _next_segment(plan, end, index, policy, f"segment {index} checkpointed and stopped")
    if state is JobState.OUT_OF_MEMORY:
        return _more_memory(plan, end, index, limits, policy)
    if state is JobState.TIMEOUT:
        progressed = end.done is not None and (
            end.previous_done is None or end.done > end.previous_done
        )
        if checkpointable and progressed:
            return _next_segment(plan, end, index, policy, f"segment {index} hit its walltime")
        return _longer_walltime(plan, end, index, limits, policy, checkpointable)
    if state is JobState.CANCELLED:
        return Finish(
            status=PlanStatus.CANCELLED,
            reason=f"job {end.job_id} was cancelled ({end.reason or 'no reason given'})",
        )
    if state is JobState.FAILED:
        code = f"exit code {end.exit_code}" if end.exit_code is not None else "no exit code"
        return Finish(
            status=PlanStatus.FAILED,
            reason=f"job {end.job_id} failed ({code}{'; ' + end.reason if end.reason else ''}) "
            f"at {_progress(end)}; a failure that is neither memory nor time is not "
            "retried automatically",
        )
    return Finish(
        status=PlanStatus.FAILED,
        reason=f"job {end.job_id} ended in state {state.value}: the batch system no longer "
        "knows it",
    )


def on_near_limit(
    *,
    job_elapsed_s: float,
    limit_s: int,
    ceiling_s: int | None,
    tried: bool,
    projected_run_s: float | None = None,
    policy: ReschedulePolicy | None = None,
) -> Extend | None:
    """Extend a running job that is within ``extend_margin_s`` of its limit ``limit_s``
    while its ceiling allows more; never past the ceiling, never twice from one limit
    (``tried``: the ledger holds a raise or a refusal from ``limit_s``).

    The new limit is the job's projected run (``projected_run_s``, from its own pace)
    plus the margin, else the limit x ``walltime_growth``; at least one minute more,
    rounded up to whole minutes (SLURM's unit), capped at the ceiling.
    """
    policy = policy or ReschedulePolicy()
    if not policy.extend_in_place or ceiling_s is None or tried or limit_s >= ceiling_s:
        return None
    left_s = limit_s - job_elapsed_s
    if left_s > policy.extend_margin_s:
        return None
    if projected_run_s is not None and projected_run_s > job_elapsed_s:
        wanted = projected_run_s + policy.extend_margin_s
        why = f"its pace projects {_time(projected_run_s)}"
    else:
        wanted = limit_s * policy.walltime_growth
        why = f"no projection: x{policy.walltime_growth:g}"
    wanted = max(wanted, limit_s + 60)
    to_s = min(ceiling_s, math.ceil(wanted / 60) * 60)
    return Extend(
        from_s=limit_s,
        to_s=to_s,
        reason=f"still running after {_time(job_elapsed_s)}, {_time(max(0.0, left_s))} before "
        f"its limit of {_time(limit_s)}; {why}: extended in place to {_time(to_s)} "
        f"(the plan allows up to {_time(ceiling_s)})",
    )


def on_progress(
    expected_run_s: Interval,
    *,
    elapsed_s: float,
    fraction_at_start: float,
    fraction_now: float,
    policy: ReschedulePolicy | None = None,
    job_elapsed_s: float | None = None,
    job_walltime_s: int | None = None,
    checkpointable: bool = True,
) -> Replan | None:
    """Re-plan when this job's pace projects a run well past the estimate's upper bound,
    or, for a workload that cannot checkpoint, past the job's own walltime.

    ``elapsed_s`` is the time since this job's first progress line; the fractions are of
    the whole workload, at that first line and now. ``job_elapsed_s`` is the time since
    the job started (start-up included), ``job_walltime_s`` its limit.
    """
    policy = policy or ReschedulePolicy()
    gained = fraction_now - fraction_at_start
    too_early = elapsed_s < max(policy.min_seconds_for_divergence, 1e-9)
    if gained < policy.min_fraction_for_divergence or too_early or fraction_now >= 1:
        return None
    projected_s = elapsed_s / gained
    remaining = max(1e-6, 1 - fraction_now)
    if not checkpointable and job_elapsed_s is not None and job_walltime_s is not None:
        needs_s = job_elapsed_s + remaining * projected_s
        if needs_s > job_walltime_s:
            return Replan(
                reason=f"at {fraction_now:.0%} after {_time(job_elapsed_s)} this job's pace "
                f"projects {_time(needs_s)} for it, past its walltime of "
                f"{_time(job_walltime_s)}; it cannot checkpoint, so a timeout loses the run",
                remaining_fraction=remaining,
                projected_run_s=projected_s,
            )
    bound_s = expected_run_s.high * policy.divergence_factor
    if projected_s <= bound_s:
        return None
    return Replan(
        reason=f"at {fraction_now:.0%} after {_time(elapsed_s)} this job's pace projects "
        f"{_time(projected_s)} for the whole run; the estimate said at most "
        f"{_time(expected_run_s.high)} (re-plan past x{policy.divergence_factor:g})",
        remaining_fraction=remaining,
        projected_run_s=projected_s,
    )


# -- revisions (re-plans the Intelligence Plane decided) ----------------------------------


def resubmission(plan: Plan, job_id: str | None, checkpointable: bool) -> tuple[int, int] | None:
    """(segment, attempt) of the job that replaces ``job_id``, if a re-plan may replace it.

    It may while ``job_id`` is the plan's job in flight, or once a re-plan marked it
    ``replanned`` (asked again, the same answer: the submission is found in the ledger).
    A workload that checkpoints resumes in the next segment; one that cannot starts its
    segment over as another attempt. None when ``job_id`` ended on its own (or is
    unknown): the Re-scheduler's rules have taken its end in hand.
    """
    jobs = submitted(plan)
    at = next((i for i, s in enumerate(jobs) if s.job_id == job_id), None)
    if job_id is None or at is None:
        return None
    entry = jobs[at]
    running = at == len(jobs) - 1 and not (entry.state is not None and entry.state.ended)
    if not running and entry.state is not SegmentState.REPLANNED:
        return None
    if checkpointable:
        return entry.index + 1, 1
    attempt = sum(1 for s in jobs[: at + 1] if s.index == entry.index)
    return entry.index, attempt + 1


def revise(
    plan: Plan,
    record: PlanRevision,
    *,
    option: PlanOption | None = None,
    estimate: ResourceEstimate | None = None,
    start_index: int | None = None,
    segments: list[CascadeSegment] | None = None,
    replaced: str | None = None,
) -> Plan | None:
    """``plan`` with one revision applied and recorded (None: it was applied already).

    The planned segments from ``start_index`` on become ``segments`` (renumbered from
    there); ``option`` keeps the larger of the memories (an out-of-memory retry may have
    raised it past the planner's); ``replaced`` is marked ``replanned`` in the ledger.
    """
    if any(r.revision == record.revision for r in plan.replans):
        return None
    update: dict[str, object] = {"replans": [*plan.replans, record]}
    if estimate is not None:
        update["estimate"] = estimate
    if option is not None:
        memory = max(option.memory_mb, plan.option.memory_mb if plan.option else 0)
        update["option"] = option.model_copy(update={"memory_mb": memory})
    entries = list(plan.segments)
    if start_index is not None and segments:
        kept = [s for s in entries if not (_planned(s) and s.index >= start_index)]
        fresh = [
            CascadeSegment(index=start_index + i, walltime_s=s.walltime_s)
            for i, s in enumerate(segments)
        ]
        planned = sorted([s for s in kept if _planned(s)] + fresh, key=lambda s: s.index)
        entries = planned + [s for s in kept if not _planned(s)]
    if replaced is not None:
        entries = [
            s.model_copy(update={"state": SegmentState.REPLANNED})
            if s.job_id == replaced and not (s.state is not None and s.state.ended)
            else s
            for s in entries
        ]
    update["segments"] = entries
    return plan.model_copy(update=update)
