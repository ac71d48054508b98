"""Adding GPUs must pay: options past the point where an added GPU stops paying are left out.

For each place and batch size (system, partition, node type, batch), options are taken in
order of total GPUs. Going from g to g' GPUs must give a speedup of at least
``efficiency`` x g'/g (the parallel efficiency of the step, run time estimated); the first
step below it stops the climb, and it and every larger option of that place are left out
with the figures, so no objective can pick GPUs the job would not use. The default, 0.7,
is ``PlanningConfig.gpu_efficiency``. Pure: the same plans give the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from tools.planning.results import Infeasible, PlannedOption

__all__ = ["DEFAULT_GPU_EFFICIENCY", "gpus", "paying_gpus"]

DEFAULT_GPU_EFFICIENCY = 0.7


def gpus(plan: PlannedOption) -> int:
    return plan.option.nodes * plan.option.gpus_per_node


def _percent(step: float, efficiency: float) -> str:
    """The efficiency as a percentage, with a decimal where whole percents would read as the bar."""
    whole = f"{step:.0%}"
    return f"{step:.1%}" if whole == f"{efficiency:.0%}" else whole


def _left_out(plan: PlannedOption, base: PlannedOption, efficiency: float) -> Infeasible:
    more, fewer = gpus(plan), gpus(base)
    speedup = base.expected_run_s / plan.expected_run_s if plan.expected_run_s > 0 else 0.0
    step = speedup / (more / fewer)
    option = plan.option
    return Infeasible(
        system=option.system,
        partition=option.partition,
        node_type=option.node_type,
        nodes=option.nodes,
        gpus_per_node=option.gpus_per_node,
        batch_size=option.batch_size,
        constraint="gpu_efficiency",
        reason=(
            f"{more} GPUs would run {speedup:.2f}x as fast as {fewer} "
            f"({_percent(step, efficiency)} efficiency; "
            f"an added GPU must give {efficiency:.0%}, PlanningConfig.gpu_efficiency)"
        ),
        shortfall=efficiency / step - 1 if step > 0 else None,
    )


def paying_gpus(
    plans: Sequence[PlannedOption], efficiency: float = DEFAULT_GPU_EFFICIENCY
) -> tuple[list[PlannedOption], list[Infeasible]]:
    """The plans whose GPUs pay, and the rest with their figures."""
    if efficiency <= 0:
        return list(plans), []
    groups: dict[tuple[object, ...], list[PlannedOption]] = {}
    for p in plans:
        if gpus(p) > 0:
            o = p.option
            groups.setdefault((o.system, o.partition, o.node_type, o.batch_size), []).append(p)
    dropped: dict[int, Infeasible] = {}
    for group in groups.values():
        group.sort(key=lambda p: (gpus(p), p.option.nodes, p.expected_run_s))
        kept = group[0]
        stopped = False
        for p in group[1:]:
            if stopped:
                dropped[id(p)] = _left_out(p, kept, efficiency)
                continue
            if gpus(p) == gpus(kept):
                continue  # another layout of as many GPUs: judged like its twin
            speedup = kept.expected_run_s / p.expected_run_s if p.expected_run_s > 0 else 0.0
            if speedup / (gpus(p) / gpus(kept)) < efficiency:
                dropped[id(p)] = _left_out(p, kept, efficiency)
                stopped = True
            else:
                kept = p
    return [p for p in plans if id(p) not in dropped], list(dropped.values())
