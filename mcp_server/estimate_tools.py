"""MCP ``estimate_resources``: a workload's or a model file's estimates, per option.

The same answer objects as ``rightsize estimate --json`` (``estimates``) and the
``estimate`` of each plan of ``rightsize plan --json``: one ``OptionAnswer`` per option
(``tools.planning.answer``), from the server's one estimator chain (``AppContext.chain``).
A model file comes flat (``model_file`` a path the server can read, ``model_class``,
``batch_size``, ``hardware``: ``SYSTEM/PARTITION``, ``SYSTEM``, ``all``, ``local`` (the
server's machine) or a GPU's name) or as its text (``model_file.source``).
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Literal, Self

from pydantic import Field, model_validator

from knowledge_base.errors import InvalidInputError
from knowledge_base.workload import WorkloadSpec
from mcp_server.context import AppContext
from mcp_server.tool_models import (
    MODEL_FILE_MAX_CHARS,
    WORKLOAD_EXAMPLE,
    _bounded,
    _Input,
    _Result,
)
from tools.planning.answer import OptionAnswer
from tools.planning.builder import BuildContext, PlanningConfig
from tools.planning.doors import ModelFileRequest, estimate_model_file
from tools.planning.whatif import what_if as run_what_if

__all__ = ["EstimateResourcesInput", "EstimateResourcesResult", "ModelFile", "estimate_resources"]

_HARDWARE = "local (the server's machine), all, SYSTEM, SYSTEM/PARTITION or a GPU's name"


class ModelFile(_Input):
    """The text of a PyTorch model file and how it trains (as ``rightsize estimate``)."""

    source: str = Field(min_length=1, max_length=MODEL_FILE_MAX_CHARS, description="Python text")
    model_class: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The nn.Module subclass in the file", examples=["Net"],
    )  # fmt: skip
    batch_sizes: list[int] = Field(
        min_length=1, max_length=16, description="Batch sizes to estimate", examples=[[32, 64]]
    )
    epochs: int = Field(default=50, ge=1, le=100_000, description="Training epochs")
    samples: int = Field(default=20_000, ge=1, le=10**12, description="Per epoch")
    optimizer: Literal["sgd", "adam"] = "sgd"
    hardware: list[str] = Field(
        default_factory=lambda: ["all"], min_length=1, max_length=32, description=_HARDWARE
    )
    input_shape: list[int] | None = Field(
        default=None, max_length=8, description="One sample's shape, e.g. C,H,W",
        examples=[[3, 32, 32]],
    )  # fmt: skip
    num_classes: int | None = Field(default=None, ge=1, le=10_000_000, description="Output classes")

    @model_validator(mode="after")
    def _sizes(self) -> Self:
        for size in self.batch_sizes:
            if not 1 <= size <= 65_536:
                raise ValueError(f"model_file.batch_sizes: {size} is not in 1..65536")
        for dim in self.input_shape or []:
            if not 1 <= dim <= 100_000:
                raise ValueError(f"model_file.input_shape: {dim} is not in 1..100000")
        return self


class EstimateResourcesInput(_Input):
    workload: WorkloadSpec | None = Field(
        default=None, description="Estimate this workload", examples=[WORKLOAD_EXAMPLE]
    )
    model_file: str | ModelFile | None = Field(
        default=None,
        description="Or a model file: its path on the server's machine (with model_class, "
        "batch_size, hardware), or its text and how it trains",
        examples=["examples/models/small_cnn.py"],
    )
    model_class: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="With a model_file path: the nn.Module subclass in it", examples=["SmallCNN"],
    )  # fmt: skip
    batch_size: int | list[int] | None = Field(
        default=None, description="With a model_file path: batch size(s)", examples=[[32, 64]]
    )
    hardware: list[str] | None = Field(
        default=None, max_length=32, description=f"With a model_file path: {_HARDWARE}",
        examples=[["pitzer/gpu", "local", "H100 SXM"]],
    )  # fmt: skip
    epochs: int = Field(default=50, ge=1, le=100_000, description="With a model_file path")
    samples: int = Field(default=20_000, ge=1, le=10**12, description="Per epoch, likewise")
    optimizer: Literal["sgd", "adam"] = Field(default="sgd", description="Likewise")
    top: int = Field(default=20, ge=1, le=500, description="Estimates to return at most")

    @model_validator(mode="after")
    def _one(self) -> Self:
        if (self.workload is None) == (self.model_file is None):
            raise ValueError("give exactly one of workload or model_file")
        if self.workload is not None:
            _bounded(self.workload)
        flat = self.model_class is not None or self.batch_size is not None or self.hardware
        if isinstance(self.model_file, str):
            if self.model_class is None or self.batch_size is None:
                raise ValueError("a model_file path needs model_class and batch_size")
            for size in self.batch_sizes():
                if not 1 <= size <= 65_536:
                    raise ValueError(f"batch_size: {size} is not in 1..65536")
        elif flat:
            raise ValueError("model_class, batch_size and hardware go with a model_file path")
        return self

    def batch_sizes(self) -> list[int]:
        size = self.batch_size
        return [size] if isinstance(size, int) else list(size or [])


class EstimateResourcesResult(_Result):
    estimates: list[OptionAnswer] = Field(
        default_factory=list,
        description="One per option (a workload's feasible ones, fastest first)",
    )
    options: int = Field(description="Options estimated in all")
    infeasible: int = 0
    no_estimate: list[str] = Field(
        default_factory=list, description="Options of a model file no estimator answered, why"
    )


# Where the request's fields are, as the planner's errors name them.
_FIELDS = {
    "workload.model": "model_file",
    "workload.model_class": "model_class",
    "workload.input_shape": "model_file.input_shape",
    "workload.model_params.num_classes": "model_file.num_classes",
    "gpus": "hardware",
}


def _model_request(request: EstimateResourcesInput, app: AppContext) -> ModelFileRequest:
    """The model file as ``rightsize estimate`` asks about it; a text is kept under the
    server's home by its content (the same text: the same file, traced once)."""
    if not app.deps.allow_model_code:
        raise InvalidInputError(
            "this server does not run model code (start it with --allow-model-code)",
            field="model_file",
        )
    given = request.model_file
    if isinstance(given, str):
        path = Path(given).expanduser()
        if not path.is_file():
            raise InvalidInputError("no such file on the server", field="model_file", value=given)
        assert request.model_class is not None  # checked by the input model
        return ModelFileRequest(
            model_file=path,
            model_class=request.model_class,
            batch_sizes=request.batch_sizes(),
            epochs=request.epochs,
            samples=request.samples,
            optimizer=request.optimizer,
            hardware=request.hardware or ["all"],
        )
    assert given is not None
    try:
        ast.parse(given.source)
    except SyntaxError as exc:
        raise InvalidInputError(
            f"does not parse: {exc.msg} at line {exc.lineno}", field="model_file.source"
        ) from None
    folder = app.deps.home.expanduser() / "model_files"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha1(given.source.encode()).hexdigest()[:16]}.py"
    if not path.exists():
        path.write_text(given.source, encoding="utf-8")
    return ModelFileRequest(
        model_file=path,
        model_class=given.model_class,
        batch_sizes=given.batch_sizes,
        epochs=given.epochs,
        samples=given.samples,
        optimizer=given.optimizer,
        hardware=given.hardware,
        input_shape=given.input_shape or [],
        num_classes=given.num_classes,
    )


async def estimate_resources(
    request: EstimateResourcesInput, app: AppContext, user: str
) -> EstimateResourcesResult:
    catalog = await app.kb.get_catalog()
    chain = app.chain()
    if request.model_file is not None:
        asked = _model_request(request, app)
        try:
            answers, refused = await estimate_model_file(asked, chain, catalog)
        except InvalidInputError as exc:
            text = str(exc)
            for prefix in (exc.source, exc.field):
                if prefix:
                    text = text.removeprefix(f"{prefix}: ")
            field = _FIELDS.get(exc.field or "", exc.field or "model_file")
            if not isinstance(request.model_file, str):
                text = text.replace(str(asked.model_file), "model.py")
                text = text.replace(asked.model_file.name, "model.py")
                field = "model_file.source" if field == "model_file" else field
            raise InvalidInputError(text, field=field, value=exc.value) from None
        return EstimateResourcesResult(
            estimates=answers[: request.top],
            options=len(answers) + len(refused),
            no_estimate=refused,
        )
    assert request.workload is not None
    spec = request.workload
    estimators = await chain.estimators(spec, catalog)
    context = BuildContext(spec=spec, config=PlanningConfig(), rates=app.deps.rates, queue=None)
    result = run_what_if(spec, catalog, context, estimators)
    ranked = sorted(result.feasible, key=lambda p: p.expected_run_s)
    answers = [a for a in (p.answer() for p in ranked[: request.top]) if a is not None]
    return EstimateResourcesResult(
        estimates=answers,
        options=len(result.feasible) + len(result.infeasible),
        infeasible=len(result.infeasible),
    )
