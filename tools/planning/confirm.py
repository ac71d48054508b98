"""Submitting what the user confirmed: the same option, or a refusal that says why.

A user confirms one option of a plan (its ``option_id``, each job's walltime, the
expected cost); by the time they submit, the catalog, the queue or the goals' clock may
have moved. ``confirm`` takes a fresh ``Selection`` (the planner run again, now) and the
stored draft, and answers with the confirmed option to run unchanged, or a ``Refusal``
naming the field and the reason (the planner's own reason where the option now breaks a
limit, a goal or the queue). It never swaps in another option: what runs is what the
user agreed to spend allocation on.

Pure: the caller gathers the selection and the catalog.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import Catalog
from knowledge_base.errors import NotFoundError
from knowledge_base.records import Cost, Plan, PlanOption
from tools.actuators.policy import violations
from tools.planning.builder import job_request
from tools.planning.results import Infeasible, PlannedOption, option_id
from tools.planning.selector import Selection

__all__ = ["Confirmation", "Confirmed", "Refusal", "confirm", "draft_option_id"]

# Summaries round costs to 4 decimals; a confirmed cost within this of the option's is it.
_COST_TOLERANCE = 0.005


class Confirmation(BaseModel):
    """What the user agreed to: an option and, to be sure it is the one they saw, its
    walltime and expected cost (each checked when given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    option_id: str | None = Field(
        default=None, min_length=1, max_length=64, description="None: the draft's own option"
    )
    walltime_s: int | None = Field(default=None, ge=1, description="Per job, as shown")
    cost: float | None = Field(default=None, ge=0, description="Expected, in the plan's unit")


@dataclass(frozen=True, slots=True)
class Confirmed:
    """The plan to run: the draft with exactly the confirmed option."""

    plan: Plan
    option_id: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the confirmed option is not submitted; ``field`` names what the user gave."""

    field: str
    reason: str


def _planned_walltimes(plan: Plan) -> list[int]:
    return [s.walltime_s for s in plan.segments if s.job_id is None and s.state is None]


def draft_option_id(plan: Plan) -> str | None:
    """The id of the option a draft plan holds (None: it holds none)."""
    if plan.option is None:
        return None
    return option_id(plan.option, _planned_walltimes(plan) or [plan.option.walltime_s])


def _same_place(option: PlanOption, other: Infeasible) -> bool:
    return (option.system, option.partition, option.nodes, option.gpus_per_node) == (
        other.system,
        other.partition,
        other.nodes,
        other.gpus_per_node,
    ) and other.batch_size in (None, option.batch_size)


def _with(plan: Plan, chosen: PlannedOption) -> Plan:
    cost = chosen.cost
    return plan.model_copy(
        update={
            "option": chosen.option,
            "estimate": chosen.estimate,
            "segments": chosen.segments,
            "expected_cost": None if cost is None else Cost(amount=cost.amount, unit=cost.unit),
            "expected_wait_s": None
            if chosen.expected_wait_s is None
            else round(chosen.expected_wait_s),
        }
    )


def _policy(plan: Plan, catalog: Catalog) -> str | None:
    """The limits the option breaks in today's catalog, as one sentence (None: it fits)."""
    option = plan.option
    assert option is not None
    try:
        system = catalog.system(option.system)
    except NotFoundError as exc:
        return str(exc)
    qos = None
    with contextlib.suppress(NotFoundError):  # a partition gone: violations() says so
        qos = system.partition(option.partition).qos
    broken: list[str] = []
    for walltime_s in sorted(set(_planned_walltimes(plan) or [option.walltime_s])):
        for why in violations(job_request(plan.spec, option, qos, walltime_s), system):
            if why not in broken:
                broken.append(why)
    return "; ".join(broken) or None


def confirm(
    selection: Selection, draft: Plan, confirmation: Confirmation, catalog: Catalog
) -> Confirmed | Refusal:
    """The confirmed option of ``draft`` if it still fits now, else why not."""
    own = draft_option_id(draft)
    wanted = confirmation.option_id or own
    if wanted is None:
        return Refusal("option_id", f"plan {draft.id!r} holds no option; name one (option_id)")
    found = next((p for p in selection.ranked if p.option_id == wanted), None)
    if found is not None:
        plan = draft if wanted == own else _with(draft, found)
    elif wanted == own:
        plan = draft
        assert plan.option is not None
        # Not offered now. The planner says why if the place itself no longer fits
        # (a limit, a goal, the queue); otherwise the estimate moved and the option the
        # user confirmed is checked against the catalog as it stands.
        failed = next((i for i in selection.infeasible if _same_place(plan.option, i)), None)
        if failed is not None:
            return Refusal(
                "option_id",
                f"option {wanted} ({plan.option.system}/{plan.option.partition}) no longer "
                f"fits: {failed.reason} ({failed.constraint}); nothing was submitted",
            )
    else:
        offered = ", ".join(p.option_id for p in selection.ranked[:4]) or "none"
        return Refusal(
            "option_id",
            f"option {wanted} is not among the options that fit now (the best: {offered}); "
            "it may break a limit or goal now, or was never offered for this plan; plan "
            "again to see the options and why",
        )
    broken = _policy(plan, catalog)
    if broken is not None:
        return Refusal("option_id", f"option {wanted} breaks a limit now: {broken}")
    assert plan.option is not None
    if confirmation.walltime_s is not None and confirmation.walltime_s != plan.option.walltime_s:
        return Refusal(
            "walltime_s",
            f"you confirmed {confirmation.walltime_s} s per job; option {wanted} asks "
            f"{plan.option.walltime_s} s; confirm what it asks, or plan again",
        )
    if confirmation.cost is not None:
        cost = plan.expected_cost
        if cost is None:
            return Refusal(
                "cost",
                f"you confirmed a cost of {confirmation.cost:g}; option {wanted} has no "
                "published charge rate, so its cost is unknown",
            )
        if abs(cost.amount - confirmation.cost) > _COST_TOLERANCE * max(1.0, cost.amount):
            return Refusal(
                "cost",
                f"you confirmed a cost of {confirmation.cost:g}; option {wanted} is now "
                f"expected to cost {cost.amount:.4g} {cost.unit}; confirm that, or plan again",
            )
    return Confirmed(plan=plan, option_id=wanted)
