"""Fixtures and helpers the tools' tests share: a SQLite knowledge base, the small CNN
model file's workload, a clock tests move by hand, and the estimator registry's setup
(a promoted GPU correction, counted registry reads)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from knowledge_base.records import EstimatorRecord, EstimatorStatus
from knowledge_base.sqlite import SQLiteKnowledgeBase
from knowledge_base.workload import DNNTraining, Goals, WorkloadSpec

if TYPE_CHECKING:  # the GPU modules are imported by the tests that use them
    from tools.estimators.gpu.correction import GpuStepCorrection
    from tools.estimators.gpu.planner import GpuOpCostEstimator

REPO = Path(__file__).resolve().parents[2]
SMALL_CNN = REPO / "examples/models/small_cnn.py"
V100 = "NVIDIA Tesla V100 (Volta)"


@pytest.fixture
async def sqlite_kb(tmp_path: Path) -> AsyncIterator[SQLiteKnowledgeBase]:
    """A fresh SQLite knowledge base (``kb``, from tests/conftest.py, is every backend)."""
    async with SQLiteKnowledgeBase(tmp_path / "kb.db") as store:
        yield store


def small_cnn_spec(
    batch: int = 64, *, systems: Sequence[str] = ("owens",), gpu_only: bool = False
) -> WorkloadSpec:
    """Training ``examples/models/small_cnn.py`` (2 epochs of 5,000 samples) on ``systems``."""
    return WorkloadSpec(
        name="cnn",
        user="alice",
        workload=DNNTraining(
            model=str(SMALL_CNN),
            model_class="SmallCNN",
            dataset_samples=5000,
            epochs=2,
            batch_sizes=[batch],
        ),
        goals=Goals(systems=list(systems), gpu_only=gpu_only),
    )


def opcost_of(estimators: Sequence[object]) -> GpuOpCostEstimator:
    """The per-operator GPU estimator inside a DNN chain (each link wraps one)."""
    from tools.estimators.gpu.memory.planner import WhiteBoxGpuMemory
    from tools.estimators.gpu.planner import GpuOpCostEstimator

    inner = [e.inner for e in estimators if isinstance(e, WhiteBoxGpuMemory)]
    return next(e for e in inner if isinstance(e, GpuOpCostEstimator))


class Clock:
    """A monotonic clock a test moves by hand (``now_s += ...``)."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def clock() -> Clock:
    return Clock()


def count_registry_reads(
    kb: SQLiteKnowledgeBase, monkeypatch: pytest.MonkeyPatch, target: str
) -> list[str]:
    """Counts the reads of ``target``'s promoted record (the real ones answer)."""
    reads: list[str] = []
    real = kb.promoted_estimator

    async def counted(asked: str) -> EstimatorRecord | None:
        if asked == target:
            reads.append(asked)
        return await real(asked)

    monkeypatch.setattr(kb, "promoted_estimator", counted)
    return reads


async def promote_gpu_correction(
    kb: SQLiteKnowledgeBase,
    folder: Path,
    record_id: str,
    factors: dict[str, float],
    *,
    base: str | None = None,
    mape: float = 0.05,
    hosts: dict[str, float] | None = None,
) -> GpuStepCorrection:
    """Store a per-GPU correction's artifact and promote it, as Model Promotion does
    (``hosts``: GPU model -> the host's seconds per dispatched operator)."""
    from tools.estimators.gpu.correction import (
        GPU_CORRECTION_KIND,
        GPU_CORRECTION_TARGET,
        GpuStepCorrection,
    )
    from tools.estimators.gpu.promoted import base_estimator_id

    correction = GpuStepCorrection(
        base_estimator=base or base_estimator_id(),
        factors=factors,
        pooled_factor=1.25,
        rows={gpu: 6 for gpu in factors},
        host_s_per_operator=hosts or {},
    )
    path = folder / f"{record_id}.json"
    path.write_text(correction.model_dump_json(), encoding="utf-8")
    await kb.put_estimator(
        EstimatorRecord(
            id=record_id,
            kind=GPU_CORRECTION_KIND,
            target=GPU_CORRECTION_TARGET,
            status=EstimatorStatus.SHADOW,
            validation={"mape": mape},
            artifact_path=str(path),
        )
    )
    await kb.promote_estimator(record_id)
    return correction
