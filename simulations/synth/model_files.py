"""Fitted generators on disk: one ``torch.save`` file, validated whole when loaded.

The file holds a plain dict: ``format`` (always :data:`FORMAT`), ``format_version``,
``kind`` (copula or tvae), ``metadata`` (:class:`SynthMetadata` as JSON-able data) and
``state`` (tensors, lists and numbers only). It is read with ``weights_only=True``, so a
file cannot run code when loaded; anything that is not such a dict, a newer format, a
metadata that does not validate or a state that does not fit its metadata raises
:class:`InvalidInputError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import MODEL_COLUMNS, Trace
from simulations.synth.copula import CopulaModel
from simulations.synth.generator import ModelKind, SynthMetadata, TraceModel
from simulations.synth.sequence import SequenceModel
from simulations.synth.tvae import TVAEModel

__all__ = ["FORMAT", "FORMAT_VERSION", "fit_model", "load_model", "read_torch_file", "save_model"]

FORMAT = "rightsize.synth"
FORMAT_VERSION = 3
# Version 2: sequence models condition on the queue state (simulations.synth.queue_state);
# a version-1 sequence file has a network of another shape and must be refitted.
# Version 3: the metadata records the training trace's hour-of-day shares, which a
# sequence model's thinning keeps; a version-2 file loads without them (None) and thins
# as before, keeping the drawn profile.
_SEQUENCE_SINCE = 2


def fit_model(trace: Trace, kind: ModelKind, *, seed: int = 0, **options: Any) -> TraceModel:
    """Fit a copula, a TVAE or a sequence model on ``trace``; ``options`` go to its ``fit``."""
    if kind == "copula":
        return CopulaModel.fit(trace, seed=seed, **options)
    if kind == "tvae":
        return TVAEModel.fit(trace, seed=seed, **options)
    if kind == "sequence":
        return SequenceModel.fit(trace, seed=seed, **options)
    raise InvalidInputError(
        "unknown model; use copula, tvae or sequence", field="model", value=kind
    )


def save_model(model: TraceModel, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "kind": model.metadata.kind,
            "metadata": model.metadata.model_dump(mode="json"),
            "state": model.state(),
        },
        out,
    )
    return out


def read_torch_file(path: Path, *, what: str, field: str) -> Any:
    """What ``torch.save`` wrote to ``path`` (tensors and plain containers only), or
    :class:`InvalidInputError` naming the file and ``field`` when it is not ``what``."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, OSError) as error:
        raise InvalidInputError(
            f"not {what} (torch.load failed: {str(error)[:200]})", source=str(path), field=field
        ) from error


def load_model(path: str | Path) -> TraceModel:
    """The model in ``path``, or :class:`InvalidInputError` saying why it is not one."""
    source = str(path)
    file = Path(path)
    if not file.is_file():
        raise InvalidInputError("model file not found", source=source, field="model", value=source)
    payload = read_torch_file(file, what="a rightsize synth model file", field="model")
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        found = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise InvalidInputError(
            f"not a rightsize synth model file: expected format {FORMAT!r}",
            source=source,
            field="format",
            value=found,
        )
    version = payload.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise InvalidInputError(
            f"unsupported model file version; this build reads 1..{FORMAT_VERSION}",
            source=source,
            field="format_version",
            value=version,
        )
    try:
        metadata = SynthMetadata.model_validate(payload.get("metadata"))
    except ValidationError as error:
        first = error.errors()[0]
        raise InvalidInputError(
            f"the model's metadata is invalid: {first['msg']}",
            source=source,
            field="metadata." + ".".join(str(p) for p in first["loc"]),
        ) from error
    if payload.get("kind") != metadata.kind:
        raise InvalidInputError(
            f"the file says kind {payload.get('kind')!r} but its metadata says {metadata.kind!r}",
            source=source,
            field="kind",
        )
    if tuple(metadata.columns) != MODEL_COLUMNS:
        raise InvalidInputError(
            f"the model was fitted on columns {metadata.columns}, this build models "
            f"{list(MODEL_COLUMNS)}",
            source=source,
            field="metadata.columns",
        )
    if metadata.kind == "sequence" and version < _SEQUENCE_SINCE:
        raise InvalidInputError(
            f"a sequence model file of version {version} predates the queue-state "
            f"conditioning (version {_SEQUENCE_SINCE}); refit it with rightsize synth fit "
            "--model sequence",
            source=source,
            field="format_version",
            value=version,
        )
    state = payload.get("state")
    if not isinstance(state, dict):
        raise InvalidInputError("the model file has no state", source=source, field="state")
    try:
        if metadata.kind == "copula":
            return CopulaModel.from_state(metadata, state)
        if metadata.kind == "sequence":
            return SequenceModel.from_state(metadata, state)
        return TVAEModel.from_state(metadata, state)
    except InvalidInputError as error:
        raise InvalidInputError(
            error.reason, source=source, field=error.field or "state", value=error.value
        ) from error
