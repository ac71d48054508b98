"""GPU step measurements made for tests: the shipped model's prediction of a small CNN's
step on a catalog GPU, times a known factor (what a correction has to learn)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from knowledge_base.store import KnowledgeBase
from knowledge_base.workload import DNNTraining
from tools.estimators.gpu.correction import measurement_record, predicted_step_s
from tools.estimators.gpu.specs import catalog_gpus

REPO = Path(__file__).resolve().parents[4]
V100 = "NVIDIA Tesla V100 (Volta)"
A100 = "NVIDIA A100 80GB"
START = datetime(2026, 1, 1, tzinfo=UTC)


def small_cnn(batch: int = 64) -> DNNTraining:
    return DNNTraining(
        model=str(REPO / "examples/models/small_cnn.py"),
        model_class="SmallCNN",
        dataset_samples=50_000,
        epochs=4,
        batch_sizes=[batch],
    )


async def store_measurements(
    kb: KnowledgeBase, factors: list[tuple[str, float]], seed: int = 3
) -> None:
    """Store one measurement per (GPU, factor), a minute apart, oldest first: the
    prediction x factor x a 5% jitter, at batch 32, 64, 128 in turn."""
    gpus = catalog_gpus(await kb.get_catalog())
    rng = random.Random(seed)
    records = []
    for n, (gpu, factor) in enumerate(factors):
        batch = [32, 64, 128][n % 3]
        predicted = predicted_step_s(small_cnn(batch), batch, 1, gpus[gpu])
        records.append(
            measurement_record(
                f"m{seed}-{n}",
                small_cnn(batch),
                batch_size=batch,
                gpus=1,
                gpu_model=gpu,
                step_s=predicted * factor * rng.uniform(0.95, 1.05),
                source="profiling",
                created_at=START + timedelta(minutes=n + 100 * seed),
            )
        )
    await kb.add_profiles(records)
