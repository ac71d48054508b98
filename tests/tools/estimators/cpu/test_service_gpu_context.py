"""The model-file estimate's analytic GPU memory adds the CUDA context of the GPU's
generation, the one assumption the planner's analytic model and the white-box peak make
(``tools.estimators.gpu.memory.context``), not a flat 1,024 MiB of its own."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge_base.seed import load_seed_catalog
from tools.estimators.cpu.answer import estimate, hardware_options
from tools.estimators.cpu.dataset import GraphData
from tools.estimators.gpu.memory.context import CONTEXT_MB
from tools.profiling.analytic import analytic_memory_mb

SUMMARY = {"parameters": 1e6, "parameter_bytes": 4e6, "forward_flops": 1e9}


def test_untrained_gpu_memory_adds_the_context_of_each_gpus_generation() -> None:
    catalog = load_seed_catalog()
    options = hardware_options(["pitzer", "ascend", "owens"], catalog, 1)
    graph = GraphData(
        x=np.zeros((0, 1), dtype=np.float32),
        edge_index=np.zeros((2, 0), dtype=np.int64),
        summary=SUMMARY,
    )
    answers = estimate(
        {32: graph}, epochs=1, samples=320, optimizer="sgd", options=options, bundle=None
    )
    gpu = {o.name: o.gpu_model for o in options if o.spec.kind == "gpu"}
    assert {"pitzer", "ascend", "owens"} <= {name.split("/")[0] for name in gpu}
    model_mb = analytic_memory_mb(SUMMARY, "sgd")
    for answer in answers:
        if answer.hardware not in gpu:
            continue
        generation = "volta" if "V100" in gpu[answer.hardware] else None
        generation = generation or ("ampere" if "A100" in gpu[answer.hardware] else "pascal")
        assert answer.estimator == "analytic-opgraph"
        assert answer.peak_memory_mb.p50 == pytest.approx(model_mb + CONTEXT_MB[generation])
    volta = next(a for a in answers if a.hardware.startswith("pitzer/") and a.hardware in gpu)
    ampere = next(a for a in answers if a.hardware.startswith("ascend/") and a.hardware in gpu)
    assert volta.peak_memory_mb.p50 - ampere.peak_memory_mb.p50 == pytest.approx(300.0)
