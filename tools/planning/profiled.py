"""An estimator from a workload's own downsized profiling runs (measured, not modelled).

The Profiling agent runs a user's workload briefly on each hardware option and stores a
``ProfileRecord`` (family ``PROFILE_FAMILY``); this estimator turns those measurements
into run time and memory for the full run. The estimator chain
(``tools.planning.chain``) puts it first: a measurement of this very workload beats
every model.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from knowledge_base.records import Interval, ProfileRecord, ResourceEstimate
from knowledge_base.workload import DNNTraining
from tools.planning.estimation import Candidate, NoEstimate, Workload

__all__ = ["PROFILE_FAMILY", "ProfiledWorkloadEstimator"]

PROFILE_FAMILY = "workload"
"""Profiles of users' own workloads (not the model zoo) carry this family."""


@dataclass(frozen=True)
class ProfiledWorkloadEstimator:
    """A workload's run time and memory from its own downsized profiling runs.

    Per step = the profiled median iteration time, scaled linearly with the batch size
    (a CPU or a saturated GPU does proportionally more work per sample); run time =
    start-up + epochs x steps per epoch x per step. Memory = the profiled peak. Only
    hardware that was profiled (same system and node type) is answered; intervals are
    x0.85-x1.4 for time (the run's own noise, the machine's other load) and x0.9-x1.25
    for memory.
    """

    model: str
    profiles: tuple[ProfileRecord, ...]

    @property
    def estimator_id(self) -> str:
        return f"profiled-{self.model.rsplit('/', 1)[-1]}"

    def estimate(self, workload: Workload, candidate: Candidate) -> ResourceEstimate | NoEstimate:
        if not isinstance(workload, DNNTraining) or workload.model != self.model:
            return NoEstimate("no profile of this workload")
        matching = [
            p
            for p in self.profiles
            if p.hardware.get("system") == candidate.system.name
            and p.hardware.get("node_type") == candidate.node_type.name
            and int(p.hardware.get("gpus", 0)) == candidate.gpus_per_node
            and p.iteration_s is not None
        ]
        if not matching:
            return NoEstimate(
                f"{self.model} was not profiled on {candidate.where} ({candidate.node_type.name})"
            )
        batch = candidate.batch_size or workload.batch_sizes[0]
        best = min(matching, key=lambda p: abs(int(p.config.get("batch_size", batch)) - batch))
        profiled_batch = int(best.config.get("batch_size", batch)) or batch
        assert best.iteration_s is not None
        step_s = best.iteration_s * batch / profiled_batch
        steps = workload.epochs * math.ceil(workload.dataset_samples / batch)
        startup_s = float(best.config.get("startup_s", 5.0))
        point = startup_s + steps * step_s
        runtime = Interval(
            point=point, low=point * 0.85, high=point * 1.4, coverage_basis="assumed"
        )
        peak = best.peak_memory_mb or 1024.0
        memory_point = peak * (1 + 0.1 * max(0.0, batch / profiled_batch - 1))
        memory = Interval(
            point=memory_point,
            low=memory_point * 0.9,
            high=memory_point * 1.25,
            coverage_basis="assumed",
        )
        spread = (
            statistics.pstdev([p.iteration_s or 0.0 for p in matching]) if len(matching) > 1 else 0
        )
        return ResourceEstimate(
            option=candidate.option(runtime, memory, batch),
            runtime_s=runtime,
            memory_mb=memory,
            estimator_id=self.estimator_id,
            validation_error=spread / best.iteration_s if best.iteration_s else None,
            error_metric="profile spread",
            label=f"measured: {len(matching)} profiling run(s) of this workload on "
            f"{candidate.node_type.name}",
        )
