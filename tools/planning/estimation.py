"""The estimator seam: what planning asks of any estimator, and the order it asks them in.

An estimator answers one question: what does this workload need on this candidate
(a partition, a node type, a count of nodes, cores and GPUs, a batch size)? It returns a
``ResourceEstimate`` (runtime and memory as intervals, its id, its validation error, a
label for users), or ``NoEstimate`` with the reason it cannot answer. Planning asks a
sequence of estimators in order and takes the first answer: trained estimators first
(HARP's DNN estimators, issue #4, plug in here; the history estimator for generic
jobs), the analytic fallback last.

Estimators must be pure and cheap: a what-if over the whole catalog asks a few hundred
candidates and has 50 ms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from knowledge_base.catalog import NodeType, Partition, System
from knowledge_base.records import Interval, PlanOption, ResourceEstimate
from knowledge_base.workload import DNNTraining, GenericJob

__all__ = ["Candidate", "Estimator", "NoEstimate", "Workload", "estimate_first"]

Workload = DNNTraining | GenericJob


@dataclass(frozen=True, slots=True)
class Candidate:
    """One hardware shape a workload could run on; the what-if enumerates these."""

    system: System
    partition: Partition
    node_type: NodeType
    nodes: int
    cores_per_node: int
    gpus_per_node: int
    batch_size: int | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def where(self) -> str:
        return f"{self.system.name}/{self.partition.name}"

    def option(
        self, runtime_s: Interval, memory_mb: Interval, batch_size: int | None = None
    ) -> PlanOption:
        """This shape as a plan option sized by an estimate's upper bounds."""
        return PlanOption(
            system=self.system.name,
            partition=self.partition.name,
            node_type=self.node_type.name,
            nodes=self.nodes,
            cores_per_node=self.cores_per_node,
            gpus_per_node=self.gpus_per_node,
            memory_mb=max(1, math.ceil(memory_mb.high)),
            walltime_s=max(1, math.ceil(runtime_s.high)),
            batch_size=batch_size,
        )


@dataclass(frozen=True, slots=True)
class NoEstimate:
    """An estimator's refusal, with the reason a user should see."""

    reason: str


@runtime_checkable
class Estimator(Protocol):
    """Anything that can estimate a workload on a candidate."""

    @property
    def estimator_id(self) -> str: ...

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        """The estimate, or NoEstimate when this estimator cannot speak for the candidate."""
        ...


def estimate_first(
    estimators: Sequence[Estimator], workload: Workload, candidate: Candidate
) -> ResourceEstimate | NoEstimate:
    """The first estimate any of ``estimators`` gives, else every reason they refused."""
    reasons = []
    for estimator in estimators:
        answer = estimator.estimate(workload, candidate)
        if isinstance(answer, ResourceEstimate):
            return answer
        reasons.append(answer.reason)
    return NoEstimate("; ".join(reasons) or "no estimator configured")
