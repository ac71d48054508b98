"""What the Intelligence Plane decides when a running plan falls behind its estimate (pure).

The Scheduler sees a job's progress diverge and asks for a re-plan
(``plan.replan_requested``: the job, how far it got, its pace as a projection of the whole
run, its walltime, whether the workload checkpoints). Optimization answers it with a plan
for the work a new job would have to do, at that pace, on every partition of the same
hardware (``plan.options_ready`` with ``replan``). The plane's graph holds both and asks
``decide_replan`` what to do about them:

- ``reestimate``: the workload's estimate scaled to the observed pace (the whole run; the
  Scheduler judges the next jobs against it, so a re-planned run is not flagged again).
- A workload that cannot checkpoint: if the job finishes within its walltime at this
  pace, **keep** it. If it will not, it is lost at its walltime whatever happens, so
  **resubmit** it now where Optimization found more room (a partition whose limit holds
  the run at this pace, within the user's goals); if nothing in scope gives more than it
  has, **stop** it now with the reason, instead of at its walltime and again on every
  retry.
- A workload that checkpoints never outruns anything: its cascade grows a segment at a
  time. If Optimization's plan for the rest differs from the one running (another
  partition, another walltime per segment, another number of segments), **extend**: the
  segments still to come follow the new plan, from the next segment boundary, so no
  work is lost; else **keep**.
- Past ``max_replans`` revisions for one plan: **keep**, saying so (the Re-scheduler's
  own rules still handle each job's end).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.events import PlanOptionsReady, PlanReplanDecided, PlanReplanRequested
from knowledge_base.records import CascadeSegment, Interval, Plan, ResourceEstimate

__all__ = ["ReplanBounds", "decide_replan", "limit_reached", "reestimate"]


class ReplanBounds(BaseModel):
    """How far the plane re-plans one plan on its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_replans: int = Field(default=2, ge=0, description="Revisions per plan, at most")
    walltime_slack: float = Field(
        default=1.0, gt=0, description="A job outruns its walltime past walltime x this"
    )


def _time(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def reestimate(estimate: ResourceEstimate, projected_run_s: float) -> ResourceEstimate:
    """``estimate`` scaled to the observed pace: the whole run takes ``projected_run_s``."""
    runtime = estimate.runtime_s
    ratio = projected_run_s / runtime.point if runtime.point > 0 else 1.0
    low = min(projected_run_s, runtime.low * ratio)
    high = max(projected_run_s, runtime.high * ratio)
    return estimate.model_copy(
        update={
            # Rescaled by the observed pace: the width is kept, its coverage is not measured.
            "runtime_s": Interval(
                point=projected_run_s,
                low=low,
                high=high,
                coverage=runtime.coverage,
                coverage_basis="assumed",
            ),
            "label": f"{estimate.label or estimate.estimator_id}; re-estimated at the observed "
            f"pace (x{ratio:.2f})",
        }
    )


def limit_reached(request: PlanReplanRequested, revision: int, bounds: ReplanBounds) -> str:
    return (
        f"re-plan {revision} not made: the plan had its {bounds.max_replans} re-plans "
        f"(max_replans); the Re-scheduler's rules go on handling each job's end "
        f"(asked because: {request.reason})"
    )


def _where(plan: Plan) -> str:
    option = plan.option
    if option is None:
        return "?"
    jobs = len(plan.segments)
    chain = f"{jobs} jobs of {_time(option.walltime_s)}" if jobs > 1 else _time(option.walltime_s)
    return f"{option.system}/{option.partition} ({chain})"


def _remaining_planned(plan: Plan, after: int | None) -> list[CascadeSegment]:
    """The planned (not yet submitted) segments after index ``after``."""
    planned = [s for s in plan.segments if s.job_id is None and s.state is None]
    return [s for s in planned if after is None or s.index > after]


class _Answer:
    """Builds the decision event for one request (what every answer shares)."""

    def __init__(
        self,
        plan: Plan,
        request: PlanReplanRequested,
        revision: int,
        estimate: ResourceEstimate | None,
    ) -> None:
        self.plan, self.request, self.revision, self.estimate = plan, request, revision, estimate

    def __call__(
        self,
        action: Literal["keep", "extend", "resubmit", "stop"],
        reason: str,
        *,
        offered: Plan | None = None,
        start_index: int | None = None,
    ) -> PlanReplanDecided:
        return PlanReplanDecided(
            plan_id=self.plan.id,
            revision=self.revision,
            action=action,
            reason=reason,
            job_id=self.request.job_id,
            estimate=self.estimate,
            option=offered.option if offered is not None else None,
            start_index=start_index,
            segments=list(offered.segments) if offered is not None else [],
        )


def decide_replan(
    *,
    revision: int,
    plan: Plan,
    request: PlanReplanRequested,
    proposal: PlanOptionsReady | None,
    bounds: ReplanBounds | None = None,
) -> PlanReplanDecided:
    """The plane's answer to one re-plan request (``plan``: the plan as it runs now)."""
    bounds = bounds or ReplanBounds()
    estimate = (
        reestimate(plan.estimate, request.projected_run_s)
        if plan.estimate is not None and request.projected_run_s
        else None
    )
    answer = _Answer(plan, request, revision, estimate)
    if revision > bounds.max_replans:
        return answer("keep", limit_reached(request, revision, bounds))
    offered = proposal.recommended if proposal is not None else None
    if offered is not None and offered.option is None:
        offered = None
    if request.checkpointable is False:
        return _unresumable(request, plan, offered, proposal, bounds, answer)
    # Checkpointing: nothing is lost at a segment boundary; follow the better plan there.
    if offered is None or offered.option is None:
        why = "; ".join((proposal.infeasible if proposal else [])[:2]) or "no option in scope"
        return answer(
            "keep",
            f"{request.reason}; nothing in scope runs the remaining work better ({why}); the "
            "cascade carries on at the observed pace, a segment at a time",
        )
    current, new = plan.option, offered.option
    upcoming = _remaining_planned(plan, request.segment_index)
    same_place = (
        current is not None
        and (current.system, current.partition) == (new.system, new.partition)
        and current.walltime_s == new.walltime_s
    )
    if same_place and len(upcoming) == len(offered.segments):
        return answer(
            "keep",
            f"{request.reason}; the plan running is still the best for the remaining work "
            f"({offered.reason})",
        )
    start = (request.segment_index or 0) + 1
    return answer(
        "extend",
        f"{request.reason}; at that pace the remaining work is {len(offered.segments)} "
        f"segment(s) on {_where(offered)} instead of {len(upcoming)} more on {_where(plan)}: "
        f"from segment {start} on, at the next segment boundary ({offered.reason})",
        offered=offered,
        start_index=start,
    )


def _unresumable(
    request: PlanReplanRequested,
    plan: Plan,
    offered: Plan | None,
    proposal: PlanOptionsReady | None,
    bounds: ReplanBounds,
    answer: _Answer,
) -> PlanReplanDecided:
    """A workload that cannot checkpoint: keep it, move it whole, or stop it now."""
    pace = request.projected_run_s or 0.0
    done = request.done_fraction or 0.0
    walltime = request.job_walltime_s or (plan.option.walltime_s if plan.option else 0)
    elapsed = request.job_elapsed_s or 0.0
    needs = elapsed + (1 - done) * pace
    if walltime and needs <= walltime * bounds.walltime_slack:
        return answer(
            "keep",
            f"{request.reason}; at this pace job {request.job_id} still ends within its "
            f"walltime (~{_time(needs)} of {_time(walltime)}): left alone",
        )
    lost = (
        f"at this pace job {request.job_id} needs ~{_time(needs)} but has {_time(walltime)}; "
        "it cannot checkpoint, so at its walltime the run is lost"
    )
    room = 0
    if offered is not None and offered.option is not None:
        room = offered.segments[0].walltime_s if offered.segments else offered.option.walltime_s
    if offered is None or room <= walltime:
        if offered is None:
            closest = "; ".join((proposal.infeasible if proposal else [])[:3]) or "nothing in scope"
        else:
            closest = f"the most any partition in scope gives it is {_time(room)}, what it has"
        return answer(
            "stop",
            f"{lost}, and no partition in scope holds the whole run at this pace "
            f"(~{_time(pace)}): {closest}. Stopped at {done:.0%} instead of at its walltime "
            "and again on every retry; it needs a partition with a longer limit, or "
            "checkpointing to run as a cascade",
        )
    return answer(
        "resubmit",
        f"{lost}: cancelled at {done:.0%} and resubmitted from the start on "
        f"{_where(offered)}, which holds ~{_time(pace)} at this pace ({offered.reason})",
        offered=offered,
        start_index=request.segment_index or 0,
    )
