"""``rightsize measurements import gpu FILE --gpu-model NAME``: a center's own GPU
measurements into the knowledge base, where Model Promotion corrects the per-operator GPU
model on them.

FILE is what ``python -m tools.profiling.gpu_measure`` wrote on one of the center's GPU
nodes (``gpu_steps.jsonl``, ``provenance.json`` beside it); ``--gpu-model`` names that
GPU as the catalog does. Re-importing the same file replaces its records (``--json``:
``stored``, ``left_out`` by reason). The next retraining of DNN time (Profiling's
request to Model Promotion) fits on them with the rest.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from pydantic import BaseModel

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail
from rightsize.settings import Settings

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Measurements the estimators learn from.")
import_app = typer.Typer(no_args_is_help=True, help="Import measurements made elsewhere.")
app.add_typer(import_app, name="import")


class GpuImported(BaseModel):
    """What ``measurements import gpu`` stored and left out."""

    file: str
    gpu_model: str
    measured_gpu: str
    stored: int
    left_out: dict[str, int]


@import_app.command("gpu")
def gpu_command(
    file: Path = typer.Argument(..., help="gpu_measure's gpu_steps.jsonl (provenance beside)"),
    gpu_model: str = typer.Option(
        ..., "--gpu-model", help="The GPU as the catalog names it (e.g. 'NVIDIA H100 PCIe 80GB')"
    ),
    root: Path = typer.Option(
        Path("."), "--root", help="Where the model files' paths in FILE are (the repository)"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """Store GPU step measurements for Model Promotion's per-GPU correction."""
    from rightsize.wiring import knowledge_base
    from tools.estimators.gpu.measured_import import records_from_gpu_measure
    from tools.estimators.gpu.specs import catalog_gpus, resolve_gpu_name

    settings = Settings()

    async def run() -> GpuImported:
        async with knowledge_base(settings) as kb:
            known = catalog_gpus(await kb.get_catalog())
            model = resolve_gpu_name(gpu_model, known, field="--gpu-model").model
            if model not in known:
                raise InvalidInputError(
                    f"not a GPU of the catalog (known: {'; '.join(sorted(known)) or 'none'})",
                    field="--gpu-model",
                    value=gpu_model,
                )
            found = await asyncio.to_thread(records_from_gpu_measure, file, model, root)
            stored = await kb.add_profiles(found.records) if found.records else 0
        return GpuImported(
            file=found.file,
            gpu_model=found.gpu_model,
            measured_gpu=found.measured_gpu,
            stored=stored,
            left_out=found.left_out,
        )

    try:
        result = asyncio.run(run())
    except RightsizeError as error:
        fail(error, as_json)

    def render() -> None:
        left = "; ".join(f"{n} {why}" for why, n in result.left_out.items()) or "none"
        console.print(
            f"{result.stored} GPU step measurements of {result.measured_gpu} stored as "
            f"{result.gpu_model}; left out: {left}",
            highlight=False,
        )

    emit(result, as_json, render)
