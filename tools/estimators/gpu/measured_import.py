"""A center's GPU measurements (``python -m tools.profiling.gpu_measure``) as the GPU step
measurements Model Promotion corrects the per-operator model on.

``gpu_measure`` writes one JSON line per configuration (``*-steps.jsonl``) and the
machine beside it (``*-provenance.json``). Each row the per-operator model can be asked
about again becomes a ``ProfileRecord`` of family ``GPU_STEP_FAMILY``
(``correction.measurement_record``): a named zoo model or a model file, FP32 (the model
prices no mixed precision), measured ``ok``. The zoo-space draws (a family with
parameters no workload spec names), mixed precision, failed rows and model files not
found are left out, each with its reason counted. The record ids come from the file's
content and the row's key, so importing the same file again replaces, never adds.
The GPU is named as the center's catalog names it (``--gpu-model``): the measured device's
own name (``NVIDIA H100 80GB HBM3``) is kept beside it in the record's hardware.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import ProfileRecord
from knowledge_base.workload import DNNTraining, Optimizer
from tools.estimators.gpu.correction import measurement_record

__all__ = ["GpuMeasurementImport", "records_from_gpu_measure"]

_OPTIMIZERS = {"sgd": Optimizer.SGD, "adam": Optimizer.ADAM}


class GpuMeasurementImport(BaseModel):
    """What an import found: records to store and what was left out, by reason."""

    model_config = ConfigDict(frozen=True)

    file: str
    gpu_model: str
    measured_gpu: str = Field(description="The device's own name, from the provenance")
    records: list[ProfileRecord]
    left_out: dict[str, int] = Field(description="reason -> rows")


def _provenance(steps: Path) -> tuple[str, datetime]:
    """The measured GPU's name and when, from the provenance file gpu_measure wrote."""
    name = (
        "provenance.json"  # as gpu_measure writes it
        if steps.name == "gpu_steps.jsonl"
        else steps.name.replace("-steps.jsonl", "-provenance.json")  # as data/ keeps it
    )
    path = steps.with_name(name)
    if name == steps.name or not path.exists():
        raise InvalidInputError(
            f"no {name} beside it (gpu_measure writes one: the GPU and when it measured)",
            field="file",
            value=str(steps),
        )
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        return str(found["gpu"]), datetime.fromisoformat(found["measured_at"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidInputError(
            f"unreadable provenance ({type(exc).__name__}: {exc})", field="file", value=str(path)
        ) from exc


def _workload(row: dict[str, Any], root: Path) -> DNNTraining | str:
    """The workload a row ran, or why it cannot be asked about again."""
    if row.get("status") != "ok":
        return f"not measured ({row.get('status', 'no status')})"
    if row.get("precision") != "fp32":
        return "mixed precision (the per-operator model prices FP32)"
    optimizer = _OPTIMIZERS.get(str(row.get("optimizer")))
    if optimizer is None:
        return f"optimizer {row.get('optimizer')!r}"
    batch = int(row["batch_size"])
    common = {"dataset_samples": batch, "epochs": 1, "batch_sizes": [batch], "optimizer": optimizer}
    if row.get("source") == "named":
        return DNNTraining(model=str(row["name"]), **common)
    if row.get("source") == "file":
        path = (root / str(row["name"])).resolve()
        if not path.exists():
            return "model file not found"
        return DNNTraining(model=str(path), model_class=str(row["class_name"]), **common)
    return "a zoo-space draw (no workload names a family's parameters)"


def records_from_gpu_measure(
    steps: Path, gpu_model: str, root: Path | None = None
) -> GpuMeasurementImport:
    """The GPU step measurements in ``steps`` (a gpu_measure ``*-steps.jsonl``), as
    ``gpu_model`` of the catalog; model files' paths are read relative to ``root``
    (default: the current directory, the repository gpu_measure ran in)."""
    if not steps.is_file():
        raise InvalidInputError("no such file", field="file", value=str(steps))
    measured_gpu, measured_at = _provenance(steps)
    text = steps.read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    records: list[ProfileRecord] = []
    left_out: Counter[str] = Counter()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            found = _workload(row, root or Path.cwd())
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInputError(
                f"line {number} is not a gpu_measure row ({type(exc).__name__}: {exc})",
                field="file",
                value=str(steps),
            ) from exc
        if isinstance(found, str):
            left_out[found] += 1
            continue
        key = hashlib.sha256(str(row["key"]).encode()).hexdigest()[:12]
        records.append(
            measurement_record(
                f"gpu-measure-{digest}-{key}",
                found,
                batch_size=int(row["batch_size"]),
                gpus=1,
                gpu_model=gpu_model,
                step_s=float(row["step_ms"]["p50"]) / 1e3,
                source="gpu_measure",
                hardware={"measured_gpu": measured_gpu, "row": str(row["key"])},
                # in the file's order, a second apart: the newest are held out
                created_at=measured_at + timedelta(seconds=number),
            )
        )
    return GpuMeasurementImport(
        file=str(steps),
        gpu_model=gpu_model,
        measured_gpu=measured_gpu,
        records=records,
        left_out=dict(left_out),
    )
