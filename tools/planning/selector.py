"""The queue-aware selector: hard constraints first, then the user's objective.

Hard constraints, applied to every feasible option:

- budget (``goals.budget`` in ``goals.budget_unit``): the charge if every job runs to its
  walltime (the most the plan can cost) must fit; a budget in one center's unit cannot
  vouch for an option charged in another's, and dollars need a configured rate;
- deadline (``goals.deadline``): the expected wait plus the upper run-time estimate must
  end before it.

Objectives rank what is left:

- ``fastest``: expected run time;
- ``earliest_finish``: expected wait + run time (options whose wait is unknown rank after
  those whose wait is known, because an unknown wait is not a zero one);
- ``cheapest``: the expected charge. Charges of different kinds (SU, core-hours, and
  OSC's core-hours + GPU-hours, billed at their own $ rate) are not comparable without
  dollar rates: each option is then ranked by its charge over the cheapest option of its
  kind (1.0 = cheapest there), ties broken by finish time; with dollars for only some
  options, those rank first, by dollars;
- ``balanced``: finish time over the best finish + charge over the cheapest (same units);
- ``deadline``: the cheapest option that meets ``goals.deadline`` (required).

No feasible option left: no plan, and every option's reason, closest to feasible first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import Goals, Objective, WorkloadSpec
from tools.planning.analytic import ANALYTIC_ID, ANALYTIC_LABEL
from tools.planning.builder import BuildContext, PlanningConfig
from tools.planning.causes import shared_causes
from tools.planning.cost import USD, DollarRates, normalize_unit
from tools.planning.estimation import Estimator
from tools.planning.generic import GUESS_ID
from tools.planning.gpu_scaling import DEFAULT_GPU_EFFICIENCY, paying_gpus
from tools.planning.hardware import CPU_EFFICIENCY, GAVEL_FIT_LOGO_MAPE
from tools.planning.queue import QueueModel
from tools.planning.results import Infeasible, PlannedOption, PlanReport
from tools.planning.whatif import WhatIf, what_if

__all__ = ["Selection", "apply_constraints", "plan", "rank", "select"]

_SPECIAL_PURPOSE = re.compile(r"debug|dev|backfill|preempt|test", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Selection:
    """The outcome: a recommended plan (or none), every alternative, every reason."""

    workload: str
    objective: Objective
    recommended: PlannedOption | None
    ranked: list[PlannedOption]
    infeasible: list[Infeasible]
    best: dict[str, PlannedOption | None]
    notes: list[str] = field(default_factory=list)

    def report(self) -> PlanReport:
        def summary(plan: PlannedOption | None) -> object:
            return None if plan is None else plan.summary()

        return PlanReport.model_validate(
            {
                "workload": self.workload,
                "objective": self.objective.value,
                "recommended": summary(self.recommended),
                "feasible": [p.summary() for p in self.ranked],
                "infeasible": self.infeasible,
                "causes": shared_causes(self.infeasible, len(self.ranked)),
                "fastest": summary(self.best["fastest"]),
                "cheapest": summary(self.best["cheapest"]),
                "earliest_finish": summary(self.best["earliest_finish"]),
                "notes": self.notes,
            }
        )


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def _constraint_failure(
    plan: PlannedOption, constraint: str, reason: str, shortfall: float | None
) -> Infeasible:
    option = plan.option
    return Infeasible(
        system=option.system,
        partition=option.partition,
        node_type=option.node_type,
        nodes=option.nodes,
        gpus_per_node=option.gpus_per_node,
        batch_size=option.batch_size,
        constraint=constraint,
        reason=reason,
        shortfall=shortfall,
    )


def _budget_failure(plan: PlannedOption, goals: Goals) -> Infeasible | None:
    if goals.budget is None or goals.budget_unit is None:
        return None
    unit = normalize_unit(goals.budget_unit)
    if unit == USD:
        amount = plan.cost_usd_max
        if amount is None:
            return _constraint_failure(
                plan,
                "budget",
                "no dollar rate is configured for its charge unit, so a budget in USD "
                "cannot be checked (set RIGHTSIZE_USD_PER_SU / _PER_CORE_HOUR / _PER_GPU_HOUR)",
                None,
            )
    else:
        if plan.cost_max is None:
            return _constraint_failure(
                plan, "budget", "its charge rate is unpublished; the budget cannot be checked", None
            )
        if plan.cost_max.unit != unit:
            return _constraint_failure(
                plan,
                "budget",
                f"charged in {plan.cost_max.unit}s; the budget is in {unit}",
                None,
            )
        amount = plan.cost_max.amount
    if amount <= goals.budget:
        return None
    label = "USD" if unit == USD else unit
    return _constraint_failure(
        plan,
        "budget",
        f"costs up to {amount:,.2f} {label} (every job to its walltime); "
        f"the budget is {goals.budget:,.2f} {label}",
        amount / goals.budget - 1,
    )


def _deadline_failure(plan: PlannedOption, goals: Goals, now: datetime) -> Infeasible | None:
    if goals.deadline is None:
        return None
    available = (goals.deadline - now).total_seconds()
    if available <= 0:
        return _constraint_failure(
            plan, "deadline", f"the deadline {goals.deadline.isoformat()} has passed", None
        )
    if plan.finish_high_s <= available:
        return None
    wait = plan.expected_wait_s
    return _constraint_failure(
        plan,
        "deadline",
        f"may finish only in {_hours(plan.finish_high_s)} ("
        + (f"wait {_hours(wait)} + " if wait else "")
        + f"run up to {_hours(plan.run_high_s)}); the deadline is in {_hours(available)}",
        plan.finish_high_s / available - 1,
    )


def apply_constraints(
    whatif: WhatIf, goals: Goals, now: datetime
) -> tuple[list[PlannedOption], list[Infeasible]]:
    """Split feasible plans into those meeting the budget and deadline and those that do not."""
    kept: list[PlannedOption] = []
    failed: list[Infeasible] = []
    for plan in whatif.feasible:
        failure = _budget_failure(plan, goals) or _deadline_failure(plan, goals, now)
        if failure is None:
            kept.append(plan)
        else:
            failed.append(failure)
    return kept, failed


def _cost_group(plan: PlannedOption) -> tuple[str, bool]:
    """Charges comparable without dollars: same unit, and GPU-hours on top or not."""
    assert plan.cost is not None
    return plan.cost.unit, bool(plan.cost.gpu_hours)


def _cost_ratios(plans: Sequence[PlannedOption]) -> list[float]:
    """Each plan's charge over the cheapest comparable one (dollars if all have them).

    Without dollars, a charge is comparable only with charges in the same unit, and OSC's
    GPU jobs (core-hours plus GPU-hours, each with its own $ rate) only with GPU jobs.
    With dollars for only some plans (rates set for some units), those are ranked by
    dollars and come first; the rest follow, each against the cheapest of its kind, so
    a plan shown at $0.46 never ranks below one at $0.49.
    """
    dollars = [p.cost_usd for p in plans if p.cost_usd is not None]
    if dollars:
        floor = min(dollars)
        by_dollar = {
            id(p): (p.cost_usd / floor if floor > 0 else 1.0)
            for p in plans
            if p.cost_usd is not None
        }
        if len(by_dollar) == len(plans):
            return [by_dollar[id(p)] for p in plans]
        after = max(by_dollar.values())
        kinds = _kind_ratios([p for p in plans if p.cost_usd is None])
        rest = iter(kinds)
        return [by_dollar[id(p)] if id(p) in by_dollar else after + next(rest) for p in plans]
    return _kind_ratios(plans)


def _kind_ratios(plans: Sequence[PlannedOption]) -> list[float]:
    """Each plan's charge over the cheapest of its kind (same unit, GPU-hours or not)."""
    cheapest: dict[tuple[str, bool], float] = {}
    for p in plans:
        if p.cost is not None:
            group = _cost_group(p)
            cheapest[group] = min(cheapest.get(group, math.inf), p.cost.amount)
    ratios = []
    for p in plans:
        if p.cost is None:
            ratios.append(math.inf)
        else:
            floor = cheapest[_cost_group(p)]
            ratios.append(p.cost.amount / floor if floor > 0 else 1.0)
    return ratios


class _Ranking:
    """What every objective's ordering shares, computed once per selection."""

    def __init__(self, plans: Sequence[PlannedOption]) -> None:
        self.plans = list(plans)
        self.ratios = dict(zip((id(p) for p in plans), _cost_ratios(plans), strict=True))
        self.some_wait_known = any(p.expected_wait_s is not None for p in plans)
        self.best_finish = min((p.expected_finish_s for p in plans), default=1.0) or 1.0
        known = [r for r in self.ratios.values() if math.isfinite(r)]
        self.worst_known = max(known, default=1.0)

    def _finish(self, p: PlannedOption) -> tuple[bool, float]:
        return (self.some_wait_known and p.expected_wait_s is None, p.expected_finish_s)

    def _key(self, objective: Objective, p: PlannedOption) -> tuple[object, ...]:
        ratio = self.ratios[id(p)]
        if objective is Objective.FASTEST:
            head: tuple[object, ...] = (p.expected_run_s, p.expected_finish_s)
        elif objective is Objective.EARLIEST_FINISH:
            head = (*self._finish(p), p.expected_run_s)
        elif objective in (Objective.CHEAPEST, Objective.DEADLINE):
            head = (ratio, *self._finish(p))
        else:  # BALANCED
            cost = ratio if math.isfinite(ratio) else self.worst_known
            head = (p.expected_finish_s / self.best_finish + cost, *self._finish(p))
        # Ties (partitions sharing nodes and limits, or generic jobs whose guess is the same
        # everywhere) go to the cheaper of its kind, then to a general-purpose queue over a
        # debug, backfill or preemptible one (they carry rules the catalog does not record),
        # fewer jobs, a shorter request, then the name: a stable order, simplest first.
        return (
            *head,
            ratio,
            bool(_SPECIAL_PURPOSE.search(p.option.partition)),
            len(p.segment_walltimes_s),
            p.option.walltime_s,
            p.option.system,
            p.option.partition,
        )

    def ordered(self, objective: Objective) -> list[PlannedOption]:
        return sorted(self.plans, key=lambda p: self._key(objective, p))

    def best(self, objective: Objective) -> PlannedOption | None:
        return min(self.plans, key=lambda p: self._key(objective, p), default=None)


def rank(plans: Sequence[PlannedOption], objective: Objective) -> list[PlannedOption]:
    """``plans`` best first for ``objective`` (ties broken by finish, then run time)."""
    return _Ranking(plans).ordered(objective)


def _notes(plans: Sequence[PlannedOption], objective: Objective) -> list[str]:
    notes = []
    analytic = [p for p in plans if p.estimate.estimator_id == ANALYTIC_ID]
    if analytic:
        notes.append(_analytic_note(plans, analytic))
    estimators = sorted({(p.estimate.estimator_id, p.estimate.label) for p in plans})
    for estimator_id, label in estimators:
        if estimator_id == GUESS_ID:
            notes.append(
                f"estimates from the {label}: no history estimator is trained for these "
                "systems, so the same guess stands on every system"
            )
    unknown = sorted({p.where for p in plans if p.expected_wait_s is None})
    if unknown:
        shown = ", ".join(unknown[:4]) + (
            f" and {len(unknown) - 4} more" if len(unknown) > 4 else ""
        )
        notes.append(
            f"queue wait unknown for {shown} (no queue snapshot covers them): "
            "their finish times assume no wait"
        )
    groups = {_cost_group(p) for p in plans if p.cost is not None}
    priced = sum(1 for p in plans if p.cost_usd is not None)
    rates = "RIGHTSIZE_USD_PER_SU, RIGHTSIZE_USD_PER_CORE_HOUR, RIGHTSIZE_USD_PER_GPU_HOUR"
    if len(groups) > 1 and priced == 0:
        names = sorted(unit + ("s + GPU-hours" if gpu else "s") for unit, gpu in groups)
        notes.append(
            f"charges in {' and '.join(names)} cannot be compared without dollar rates "
            f"({rates}): 'cheapest' ranks each option against the cheapest of its kind"
        )
    elif 0 < priced < len(plans):
        unpriced = sorted(
            {
                p.cost.unit + (" + GPU-hours" if p.cost.gpu_hours else "")
                for p in plans
                if p.cost is not None and p.cost_usd is None
            }
        )
        notes.append(
            f"dollar rates price {priced} of {len(plans)} options: 'cheapest' ranks those by "
            f"dollars, then the rest ({', '.join(unpriced) or 'unpublished charges'}) each "
            f"against the cheapest of its kind; set {rates} to compare all"
        )
    bases = sorted({p.cost_usd_basis for p in plans if p.cost_usd_basis})
    if bases:
        notes.append("dollar figures are assumptions: " + "; ".join(bases))
    if any(p.cost is None for p in plans):
        notes.append("some partitions publish no charge rate: their cost is shown as unknown")
    return notes


def _analytic_note(plans: Sequence[PlannedOption], analytic: Sequence[PlannedOption]) -> str:
    """Which options the analytic fallback estimated, and what its error rests on for
    them: Gavel's GPUs for GPU options, an assumed efficiency for CPU ones; the others'
    estimators named (a GPU option answered by the per-operator model is not off by the
    fallback's 28%)."""
    cpu = sum(1 for p in analytic if not p.option.gpus_per_node)
    gpu = len(analytic) - cpu
    kinds = [f"{n} {kind}" for n, kind in ((cpu, "CPU-only"), (gpu, "GPU")) if n]
    which = (
        f"all {len(plans)} options ({' and '.join(kinds)})"
        if len(analytic) == len(plans)
        else f"{' and '.join(kinds)} options (of {len(plans)})"
    )
    caveats = []
    if gpu:
        caveats.append(
            f"on Gavel's measured GPUs the model is off by {GAVEL_FIT_LOGO_MAPE:.0%} (MAPE, "
            "leaving one GPU out)"
        )
    if cpu:
        caveats.append(f"its CPU efficiency ({CPU_EFFICIENCY:.0%} of peak) is an assumption")
    note = f"estimates from the {ANALYTIC_LABEL} for {which}: wide intervals; " + (
        ", and ".join(caveats)
    )
    others = sorted({p.estimate.estimator_id for p in plans} - {ANALYTIC_ID})
    if others:
        note += f"; the other {len(plans) - len(analytic)} from {', '.join(others)}"
    return note


def _closest_first(infeasible: list[Infeasible]) -> list[Infeasible]:
    return sorted(
        infeasible,
        key=lambda i: (i.shortfall is None, i.shortfall if i.shortfall is not None else 0.0),
    )


def select(
    whatif: WhatIf,
    spec: WorkloadSpec,
    *,
    objective: Objective | None,
    now: datetime,
    gpu_efficiency: float = DEFAULT_GPU_EFFICIENCY,
) -> Selection:
    """Apply the hard constraints, rank by the objective, and explain what is left out.

    GPUs that would not pay (``gpu_scaling.paying_gpus``) are left out before ranking, so
    no objective, the default ``earliest_finish`` included, asks for idle GPUs.
    """
    goals = spec.goals
    chosen = objective or goals.objective
    if chosen is Objective.DEADLINE and goals.deadline is None:
        raise InvalidInputError(
            "the 'deadline' objective needs goals.deadline", field="goals.deadline", value=None
        )
    kept, failed = apply_constraints(whatif, goals, now)
    kept, wasteful = paying_gpus(kept, gpu_efficiency)
    infeasible = _closest_first([*whatif.infeasible, *failed, *wasteful])
    ranking = _Ranking(kept)
    ranked = ranking.ordered(chosen)
    best: dict[str, PlannedOption | None] = {
        name: ranking.best(objective_)
        for name, objective_ in (
            ("fastest", Objective.FASTEST),
            ("cheapest", Objective.CHEAPEST),
            ("earliest_finish", Objective.EARLIEST_FINISH),
        )
    }
    notes = _notes(kept, chosen)
    if wasteful:
        notes.append(
            f"{len(wasteful)} options with more GPUs left out: each added GPU must speed the "
            f"run by {gpu_efficiency:.0%} of its share (PlanningConfig.gpu_efficiency)"
        )
    if not kept:
        notes.insert(
            0,
            "no plan: none of the "
            f"{len(whatif.feasible) + len(whatif.infeasible)} options meets every limit and "
            "goal; the reasons follow, closest to feasible first",
        )
    return Selection(
        workload=spec.name,
        objective=chosen,
        recommended=ranked[0] if ranked else None,
        ranked=ranked,
        infeasible=infeasible,
        best=best,
        notes=notes,
    )


def plan(
    spec: WorkloadSpec,
    catalog: Catalog,
    *,
    now: datetime,
    objective: Objective | None = None,
    queue: QueueModel | None = None,
    rates: DollarRates | None = None,
    config: PlanningConfig | None = None,
    estimators: Sequence[Estimator] | None = None,
) -> Selection:
    """The whole pipeline: what-if over the catalog, constraints, objective (pure)."""
    context = BuildContext(
        spec=spec, config=config or PlanningConfig(), rates=rates or DollarRates(), queue=queue
    )
    return select(
        what_if(spec, catalog, context, estimators),
        spec,
        objective=objective,
        now=now,
        gpu_efficiency=context.config.gpu_efficiency,
    )
