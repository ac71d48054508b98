"""Which per-GPU correction of the per-operator model serves, and the one function that
applies it: every door that answers "how long on this GPU" goes through here.

Model Promotion (``agents.promotion_gpu``) promotes a ``GpuStepCorrection`` in the
registry (target ``GPU_CORRECTION_TARGET``). ``read_promoted_correction`` is the one rule
for which correction is current (the promoted record, its artifact readable, correcting
the per-operator model that serves); Model Promotion asks it for the incumbent, and
``PromotedGpuCorrection`` for the planner's chain and ``rightsize estimate --gpu``.

``PromotedGpuCorrection`` keeps the loaded correction keyed by the promoted record's id,
one per estimator chain (so one per knowledge base and process), by the registry's one
rule (``tools.estimators.promoted.record.PromotedRecord``, which the chain's promoted
runtime estimator follows too): it reads the registry on the first request, then only
when told another correction was promoted (``invalidate``: the Resource Estimation agent
hears ``estimator.promoted`` on the bus) or when ``recheck_s`` has passed since its last
read (a process that does not hear the bus, such as a second CLI or an MCP server beside
the agents); a read that finds the same id keeps the loaded artifact. So N requests cost
O(1) registry reads, not N.

``gpu_step`` prices a traced step on a GPU with the per-operator model and applies the
serving correction (its factor for that GPU model, the pooled factor for a GPU the center
never measured; where the center's runs of that GPU showed the host bounding the step,
at least the host's time per operator x the step's operators); ``CorrectionApplied``
says what was applied (factor, floor, the runs of that GPU it rests on) for the
answer's readers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import EstimatorRecord
from knowledge_base.store import KnowledgeBase
from tools.estimators.gpu.correction import (
    GPU_CORRECTION_TARGET,
    GpuStepCorrection,
    load_correction,
)
from tools.estimators.promoted.record import RECHECK_S, PromotedRecord

if TYPE_CHECKING:  # torch loads with the kernels; these are only types here
    from tools.estimators.gpu.estimator import GpuStepModel, Quantiles
    from tools.estimators.gpu.ops import GpuKernels
    from tools.estimators.gpu.specs import GpuSpec

__all__ = [
    "RECHECK_S",
    "CorrectedStep",
    "CorrectionApplied",
    "PromotedGpuCorrection",
    "ServingCorrection",
    "base_estimator_id",
    "gpu_step",
    "read_promoted_correction",
]


@dataclass(frozen=True, slots=True)
class ServingCorrection:
    """The promoted correction as loaded: its registry id and its held-out error."""

    record_id: str
    correction: GpuStepCorrection
    heldout_mape: float


class CorrectionApplied(BaseModel):
    """What a GPU answer's time was multiplied by, and what that rests on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    correction_id: str = Field(description="The promoted registry record")
    factor: float = Field(gt=0)
    runs: int = Field(ge=0, description="The center's measurements of this GPU model")
    pooled: bool = Field(description="No run of this GPU model: the pooled factor")
    heldout_mape: float = Field(description="The correction's held-out error at promotion")
    host_floor_s: float = Field(
        default=0.0, ge=0, description="The least the center's hosts take for this step"
    )


@dataclass(frozen=True, slots=True)
class CorrectedStep:
    """One step on one GPU as every door answers it."""

    step_s: Quantiles
    forward_backward_s: Quantiles
    estimator: str
    validation_mape: float | None
    correction: CorrectionApplied | None

    def describe(self) -> str:
        """The label's words for the correction ('' when none applied)."""
        applied = self.correction
        if applied is None:
            return ""
        where = (
            "no measurement of this GPU: the pooled factor"
            if applied.pooled
            else f"{applied.runs} measurements of this GPU"
        )
        floor = (
            f", at least {applied.host_floor_s * 1e3:.2f} ms (the host)"
            if applied.host_floor_s > 0
            else ""
        )
        return (
            f"x{applied.factor:.2f}{floor} from the center's own runs "
            f"({where}; {applied.correction_id})"
        )


def base_estimator_id() -> str:
    """The per-operator model's estimator id, from its file's meta (no torch)."""
    from tools.estimators.gpu.selection import read_meta

    return read_meta()[1]


async def read_promoted_correction(
    kb: KnowledgeBase, base_estimator: str
) -> tuple[EstimatorRecord | None, ServingCorrection | None, str]:
    """The promoted record, the correction it serves (None: the model as shipped) and,
    in words, what serves and why (one registry read)."""
    record = await kb.promoted_estimator(GPU_CORRECTION_TARGET)
    serving, words = _serving(record, base_estimator)
    return record, serving, words


def _serving(
    record: EstimatorRecord | None, base_estimator: str
) -> tuple[ServingCorrection | None, str]:
    if record is None:
        return None, "the per-operator model as shipped"
    try:
        correction = load_correction(Path(record.artifact_path or ""))
    except (OSError, ValueError) as exc:
        return None, f"the model as shipped ({record.id} unreadable: {exc})"
    if correction.base_estimator != base_estimator:
        return None, (
            f"the model as shipped ({record.id} corrects {correction.base_estimator}, "
            f"not {base_estimator})"
        )
    mape = record.validation.get("mape")
    heldout = float(mape) if isinstance(mape, int | float) else float("inf")
    return ServingCorrection(record.id, correction, heldout), f"correction {record.id}"


class _NotServed(ValueError):
    """The promoted correction does not serve (its words say why)."""


class PromotedGpuCorrection:
    """The process's serving GPU correction for one knowledge base (see the module): the
    registry's rule (``PromotedRecord``) with the correction's loader."""

    def __init__(
        self,
        *,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
        base_estimator: Callable[[], str] = base_estimator_id,
    ) -> None:
        self._base_estimator = base_estimator
        self._record: PromotedRecord[ServingCorrection] = PromotedRecord(
            GPU_CORRECTION_TARGET, self._load, recheck_s=recheck_s, clock=clock
        )

    def _load(self, record: EstimatorRecord) -> ServingCorrection:
        try:
            serving, words = _serving(record, self._base_estimator())
        except (OSError, ValueError) as exc:  # the model file itself cannot be read
            raise _NotServed(f"the per-operator GPU model cannot be read: {exc}") from exc
        if serving is None:
            raise _NotServed(words)
        return serving

    @property
    def recheck_s(self) -> float:
        return self._record.recheck_s

    @property
    def problem(self) -> str | None:
        """Why the promoted correction is not serving (None: it serves, or none is)."""
        return self._record.problem

    @property
    def registry_reads(self) -> int:
        return self._record.registry_reads

    def invalidate(self) -> None:
        """Another correction may have been promoted: read the registry on next use."""
        self._record.invalidate()

    async def current(self, kb: KnowledgeBase) -> ServingCorrection | None:
        """The serving correction; reads the registry only when due (see the module)."""
        return await self._record.current(kb)


def gpu_step(
    model: GpuStepModel,
    kernels: GpuKernels,
    spec: GpuSpec,
    *,
    parameters: int,
    optimizer: str,
    gpus: int = 1,
    link_gbs: float | None = None,
    correction: ServingCorrection | None = None,
    gpu_model: str | None = None,
) -> CorrectedStep:
    """One step of ``kernels`` on ``spec`` by the per-operator model, corrected by the
    serving correction for ``gpu_model`` (the catalog's name; default the spec's)."""
    extra = {"link_gbs": link_gbs} if link_gbs is not None else {}
    step = model.estimate(
        kernels, spec, parameters=parameters, optimizer=optimizer, gpus=gpus, **extra
    )
    step_s, forward_backward_s = step.step_s, step.forward_backward_s
    applied = None
    if correction is not None:
        name = gpu_model or spec.name
        fitted = correction.correction
        factor = fitted.factor(name)
        runs = fitted.rows.get(name, 0)
        floor = fitted.host_floor_s(name, kernels.host_operators)
        applied = CorrectionApplied(
            correction_id=correction.record_id,
            factor=factor,
            runs=runs,
            pooled=name not in fitted.factors,
            heldout_mape=correction.heldout_mape,
            host_floor_s=floor,
        )
        step_s = step_s.scaled(factor).at_least(floor)
        forward_backward_s = forward_backward_s.scaled(factor).at_least(floor)
    return CorrectedStep(
        step_s=step_s,
        forward_backward_s=forward_backward_s,
        estimator=step.estimator,
        validation_mape=step.validation_mape,
        correction=applied,
    )
