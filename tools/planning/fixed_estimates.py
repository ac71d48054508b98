"""Estimates someone else computed, behind the planner's estimator seam.

The Optimization agent plans with the estimates Resource Estimation sent it
(``plan.build_requested``); ``FixedEstimates`` answers the what-if's candidates from
them, so the planner runs exactly as ``rightsize plan`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from knowledge_base.records import ResourceEstimate
from tools.planning.estimation import Candidate, NoEstimate, Workload

__all__ = ["FixedEstimates"]


@dataclass(frozen=True)
class FixedEstimates:
    """The planner's estimator seam over estimates someone else computed.

    Matches a candidate by system, node type, nodes, cores, GPUs and batch size, and by
    partition unless ``any_partition``: the estimate of a hardware shape holds on every
    partition that runs on it (what a re-plan needs to consider moving).
    """

    estimates: tuple[ResourceEstimate, ...]
    any_partition: bool = False

    @property
    def estimator_id(self) -> str:
        ids = sorted({e.estimator_id for e in self.estimates})
        return "+".join(ids) or "none"

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        for known in self.estimates:
            option = known.option
            if (
                option.system == candidate.system.name
                and (self.any_partition or option.partition == candidate.partition.name)
                and option.node_type in (None, candidate.node_type.name)
                and option.nodes == candidate.nodes
                and option.cores_per_node == candidate.cores_per_node
                and option.gpus_per_node == candidate.gpus_per_node
                and option.batch_size == candidate.batch_size
            ):
                if option.partition == candidate.partition.name:
                    return known
                moved = option.model_copy(update={"partition": candidate.partition.name})
                return known.model_copy(update={"option": moved})
        return NoEstimate(f"Resource Estimation gave no estimate for {candidate.where}")
