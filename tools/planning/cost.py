"""What a job is charged, in the center's own unit and by its own rules.

- TACC (``basis: node-hour``): ``SU = nodes x max(hours, min_charge) x rate``; whole
  nodes, 15-minute minimum, a rate per queue.
- OSC (``basis: core-hour``): core-hours, where memory above the per-core share is
  billed as cores (``ceil(memory / per-core memory)`` when that exceeds the cores asked
  for), a multi-node job is billed for its whole nodes, and GPU-hours are recorded on
  top (``nodes x GPUs x hours``).
- A partition with no published rate (``charge: null``) has no cost: ``None``, never a
  guess.

Centers are billed for time used, so a plan's expected charge uses the expected run time
and its maximum the full requested walltime. Dollars are not a property of any center
in our sources: they come only from configured rates (``DollarRates``) and always carry
the label saying which assumption made them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import ChargeBasis, NodeType, Partition
from knowledge_base.errors import InvalidInputError

__all__ = [
    "USD",
    "Charge",
    "DollarRates",
    "chain_charge",
    "charge",
    "dollars",
    "normalize_unit",
]

USD = "USD"
_UNIT_NAMES = {
    "su": "SU",
    "sus": "SU",
    "serviceunit": "SU",
    "serviceunits": "SU",
    "corehour": "core-hour",
    "corehours": "core-hour",
    "coreh": "core-hour",
    "usd": USD,
    "$": USD,
    "dollar": USD,
    "dollars": USD,
}


class DollarRates(BaseModel):
    """Assumed dollar rates (no center publishes one in our sources); None: unknown."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd_per_su: float | None = Field(default=None, ge=0)
    usd_per_core_hour: float | None = Field(default=None, ge=0)
    usd_per_gpu_hour: float | None = Field(default=None, ge=0)


@dataclass(frozen=True, slots=True)
class Charge:
    """An amount in a center's unit, plus GPU-hours where the center records them."""

    amount: float
    unit: str
    gpu_hours: float | None = None

    def __add__(self, other: Charge) -> Charge:
        gpu_hours = (
            None
            if self.gpu_hours is None and other.gpu_hours is None
            else (self.gpu_hours or 0.0) + (other.gpu_hours or 0.0)
        )
        return Charge(self.amount + other.amount, self.unit, gpu_hours)


def normalize_unit(unit: str, field: str = "goals.budget_unit") -> str:
    """'SU', 'core-hour' or 'USD' from the ways people write them."""
    key = "".join(ch for ch in unit.lower() if ch.isalnum() or ch == "$")
    if key in _UNIT_NAMES:
        return _UNIT_NAMES[key]
    raise InvalidInputError(
        "unknown charge unit; use 'SU', 'core-hour' or 'USD'", field=field, value=unit
    )


def _per_core_mb(partition: Partition, node_type: NodeType | None) -> float:
    if node_type is not None and node_type.usable_memory_mb and node_type.cores:
        return node_type.usable_memory_mb / node_type.cores
    return partition.max_memory_mb / partition.max_cores_per_node


def charge(
    partition: Partition,
    node_type: NodeType | None,
    *,
    nodes: int,
    cores_per_node: int,
    gpus_per_node: int,
    memory_mb: int,
    run_s: float,
) -> Charge | None:
    """What one job of ``run_s`` seconds is charged; None where no rate is published."""
    policy = partition.charge
    if policy is None:
        return None
    hours = max(run_s, policy.min_charge_minutes * 60) / 3600
    if policy.basis is ChargeBasis.NODE_HOUR:
        return Charge(nodes * hours * policy.rate, policy.unit)
    node_cores = node_type.cores if node_type is not None and node_type.cores else None
    billed = cores_per_node
    if policy.multi_node_whole_nodes and nodes > 1 and node_cores:
        billed = node_cores
    elif policy.memory_billed_as_cores:
        billed = max(billed, math.ceil(memory_mb / _per_core_mb(partition, node_type)))
        if node_cores:
            billed = min(billed, node_cores)
    gpu_hours = None
    if gpus_per_node and policy.gpu_hour_rate is not None:
        gpu_hours = nodes * gpus_per_node * hours * policy.gpu_hour_rate
    return Charge(nodes * billed * hours * policy.rate, policy.unit, gpu_hours)


def chain_charge(
    partition: Partition,
    node_type: NodeType | None,
    *,
    nodes: int,
    cores_per_node: int,
    gpus_per_node: int,
    memory_mb: int,
    runs_s: Sequence[float],
) -> Charge | None:
    """The charge of a chain of jobs (a cascade): each billed on its own, minimums included."""
    total: Charge | None = None
    counts: dict[float, int] = {}
    for run_s in runs_s:  # a cascade's jobs are mostly the same length: price each once
        counts[run_s] = counts.get(run_s, 0) + 1
    for run_s, count in counts.items():
        one = charge(
            partition,
            node_type,
            nodes=nodes,
            cores_per_node=cores_per_node,
            gpus_per_node=gpus_per_node,
            memory_mb=memory_mb,
            run_s=run_s,
        )
        if one is None:
            return None
        many = Charge(
            one.amount * count, one.unit, None if one.gpu_hours is None else one.gpu_hours * count
        )
        total = many if total is None else total + many
    return total


def dollars(amount: Charge | None, rates: DollarRates) -> tuple[float | None, str | None]:
    """(USD, the assumption it rests on), or (None, None) where a needed rate is unset."""
    if amount is None:
        return None, None
    if amount.unit == "SU":
        if rates.usd_per_su is None:
            return None, None
        return amount.amount * rates.usd_per_su, f"assumed ${rates.usd_per_su:g}/SU"
    if amount.unit == "core-hour":
        if rates.usd_per_core_hour is None:
            return None, None
        usd = amount.amount * rates.usd_per_core_hour
        basis = f"assumed ${rates.usd_per_core_hour:g}/core-hour"
        if amount.gpu_hours:
            if rates.usd_per_gpu_hour is None:
                return None, None
            usd += amount.gpu_hours * rates.usd_per_gpu_hour
            basis += f" + ${rates.usd_per_gpu_hour:g}/GPU-hour"
        return usd, basis
    return None, None
