"""The one answer object every door gives for one option: ``OptionAnswer``.

``rightsize estimate --json`` lists them in ``estimates``, ``rightsize plan --json`` gives
each feasible plan's in ``estimate``, MCP ``estimate_resources`` returns them in
``estimates`` and ``what_if`` in each plan's ``estimate``. All of them are made here, by
``answer_of``, from the ``ResourceEstimate`` the estimator chain gave for the option
(``tools.planning.estimation.estimate_first``): one question, one function, one object.

    system, partition         where (``local`` for this machine, ``gpu`` for a GPU named
                              by ``--gpu`` / ``--gpu-spec`` that no partition stands for)
    nodes, gpus_per_node      how much
    batch_size                the training batch (None for a generic job)
    iteration_time_s          one training iteration, p10/p50/p90 (None for a generic job)
    peak_memory_mb            per GPU on GPU options, per node (host) on CPU options
    run_s                     the whole run: iterations x time + start-up
    estimator                 the estimator that answered (registry id)
    coverage_basis            what the interval rests on, and what share of the traced
                              work was priced from learned data, analytically or not at all
"""

from __future__ import annotations

import math
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge_base.records import GpuMemoryPeak, Interval, ResourceEstimate
from knowledge_base.workload import DNNTraining, GenericJob
from tools.planning.analytic import STARTUP_LOW_S, STARTUP_POINT_S, STARTUP_S

__all__ = ["AnswerBasis", "OptionAnswer", "Quantiles", "answer_of", "iterations_of", "upper_bound"]


def upper_bound(low: float, point: float, least: float = 0.02) -> float:
    """An upper bound above ``point`` for an estimate that is not exact: as far above as
    ``low`` lies below, at least ``least`` of the point."""
    return point + max(point - low, least * point)


class Quantiles(BaseModel):
    """p10 <= p50 <= p90 of one quantity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p10: float = Field(ge=0)
    p50: float = Field(ge=0)
    p90: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if not self.p10 <= self.p50 <= self.p90:
            raise ValueError(f"need p10 <= p50 <= p90, got {self.p10}, {self.p50}, {self.p90}")
        return self

    @classmethod
    def of(cls, interval: Interval, scale: float = 1.0, minus: tuple[float, ...] = ()) -> Quantiles:
        """``interval`` (low, point, high) as quantiles, each less ``minus`` and over
        ``scale``."""
        low, point, high = (
            max(0.0, (value - (minus[i] if minus else 0.0)) / scale)
            for i, value in enumerate((interval.low, interval.point, interval.high))
        )
        point = max(point, low)
        return cls(p10=low, p50=point, p90=max(high, point))

    @classmethod
    def around(cls, p10: float, p50: float, p90: float) -> Quantiles:
        """Quantiles of an estimate that is not exact: an upper bound at the point is
        moved above it, as far as the lower bound lies below (at least 2%)."""
        return cls(p10=min(p10, p50), p50=p50, p90=p90 if p90 > p50 else upper_bound(p10, p50))


class AnswerBasis(BaseModel):
    """What an answer rests on.

    ``interval``: how its p10-p90 was set (``held_out``: residuals on data the estimator
    was not fitted on; ``in_sample``: its own training residuals; ``assumed``: fixed
    multipliers; ``exact``: measured, no spread). The shares: of the traced work (FLOPs
    and bytes) of the model, the part priced from learned data, analytically, and not at
    all; None where the estimator does not report them (then ``unreported`` says so).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval: Literal["held_out", "in_sample", "assumed", "exact"]
    learned_share: float | None = Field(default=None, ge=0, le=1)
    analytic_share: float | None = Field(default=None, ge=0, le=1)
    unpriced_share: float | None = Field(default=None, ge=0, le=1)
    unreported: bool = Field(
        default=True, description="The estimator did not report the shares of traced work"
    )


class OptionAnswer(BaseModel):
    """One option's estimate, the same through every door (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    partition: str
    nodes: int = Field(ge=1)
    gpus_per_node: int = Field(ge=0)
    batch_size: int | None
    iteration_time_s: Quantiles | None = Field(description="Per training iteration")
    peak_memory_mb: Quantiles = Field(description="Per GPU on GPU options, else per node")
    run_s: Quantiles = Field(description="Iterations x time + start-up (10/30/120 s)")
    estimator: str
    coverage_basis: AnswerBasis
    fits: bool = Field(default=True, description="The peak memory (p90) fits the hardware")
    validation_error: float | None = Field(
        default=None, description="The time estimator's held-out error (0.2 = 20%), if known"
    )
    gpu_memory: GpuMemoryPeak | None = Field(
        default=None, description="White-box peak per GPU (allocated, reserved, context MiB)"
    )
    note: str = ""

    @property
    def hardware(self) -> str:
        """How a table names the option: ``SYSTEM/PARTITION``, ``local``, or the GPU."""
        if self.system in ("local", "gpu"):
            return self.partition
        return f"{self.system}/{self.partition}"


def iterations_of(workload: DNNTraining, batch_size: int) -> int:
    """Training iterations of the whole run at ``batch_size``."""
    return workload.epochs * math.ceil(workload.dataset_samples / batch_size)


def answer_of(
    estimate: ResourceEstimate,
    workload: DNNTraining | GenericJob,
    *,
    system: str | None = None,
    partition: str | None = None,
    capacity_mb: float | None = None,
) -> OptionAnswer:
    """The answer object of one option from the chain's estimate for it.

    The time per iteration is the run less the start-up every DNN estimator adds
    (``STARTUP_*``), over the iterations; the run is the estimate's. ``system`` and
    ``partition`` name options outside the catalog (``local``); ``capacity_mb``: the memory
    that must hold the peak (None: the option's own limits were checked by the planner).
    """
    option = estimate.option
    batch = option.batch_size
    iteration: Quantiles | None = None
    if isinstance(workload, DNNTraining) and batch:
        iteration = Quantiles.of(
            estimate.runtime_s,
            scale=iterations_of(workload, batch),
            minus=(STARTUP_LOW_S, STARTUP_POINT_S, STARTUP_S),
        )
    on_gpu = option.gpus_per_node > 0 and estimate.gpu_memory_mb is not None
    memory = estimate.gpu_memory_mb if on_gpu and estimate.gpu_memory_mb else estimate.memory_mb
    peak = Quantiles.of(memory)
    basis = estimate.runtime_s.coverage_basis
    exact = estimate.runtime_s.low == estimate.runtime_s.high
    shares = estimate.work_priced
    return OptionAnswer(
        system=system or option.system,
        partition=partition or option.partition,
        nodes=option.nodes,
        gpus_per_node=option.gpus_per_node,
        batch_size=batch,
        iteration_time_s=iteration,
        peak_memory_mb=peak,
        run_s=Quantiles.of(estimate.runtime_s),
        estimator=estimate.estimator_id,
        coverage_basis=AnswerBasis(
            interval="exact" if exact else basis,
            learned_share=None if shares is None else shares.learned,
            analytic_share=None if shares is None else shares.analytic,
            unpriced_share=None if shares is None else shares.unpriced,
            unreported=shares is None,
        ),
        fits=capacity_mb is None or peak.p90 <= capacity_mb,
        validation_error=estimate.validation_error,
        gpu_memory=estimate.gpu_memory if on_gpu else None,
        note=estimate.label,
    )
