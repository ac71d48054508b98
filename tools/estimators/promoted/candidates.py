"""Candidates for the promoted run-time model: trained, shadow-tested, saved, recorded.

Model Promotion (``agents.promotion``) decides when to retrain and which candidate to
promote; the work on the models is here: ``shadow`` trains one candidate and scores it
on held-out jobs, ``serving_copy`` is what serves once promoted, ``write_artifact``
saves a model as JSON and ``candidate_record`` is its registry record.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import EstimatorRecord, EstimatorStatus, JobRecord
from tools.estimators.promoted.runtime import (
    VALIDATION_KEY,
    HistoryRuntime,
    Metric,
    RuntimeModel,
    Trainer,
    errors_of,
)

__all__ = [
    "Shadowed",
    "best_candidate",
    "candidate_record",
    "serving_copy",
    "shadow",
    "write_artifact",
]


class Shadowed(BaseModel):
    """One candidate after the shadow test: its errors on the held-out jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    model: Any = Field(description="The RuntimeModel")
    error: float = Field(ge=0, description="On the policy's metric")
    errors: dict[str, float] = Field(description="Every metric, held out")
    train_errors: dict[str, float] = Field(default_factory=dict)


def best_candidate(candidates: Sequence[Shadowed]) -> Shadowed:
    """The candidate with the lowest held-out error (the first on a tie)."""
    return min(candidates, key=lambda c: c.error)


def shadow(
    trainer: Trainer,
    train: Sequence[JobRecord],
    holdout: Sequence[JobRecord],
    newest: datetime,
    metric: Metric,
) -> Shadowed | str:
    """Train one candidate and score it on the held-out jobs (or say why it could not)."""
    try:
        candidate = trainer(train)
    except InvalidInputError as exc:
        return str(exc)
    # Its data cutoff is the newest job it was shown, held-out ones included: "live"
    # jobs, on which drift is judged, are those that finished after it.
    candidate = candidate.with_trained_until(newest)
    errors = errors_of(candidate, holdout)
    train_errors = {f"train_{key}": value for key, value in errors_of(candidate, train).items()}
    return Shadowed(
        model=candidate,
        error=errors[VALIDATION_KEY[metric]],
        errors=errors,
        train_errors=train_errors,
    )


def serving_copy(model: RuntimeModel, holdout: Sequence[JobRecord]) -> RuntimeModel:
    """What a promoted candidate serves as: a history model sees the held-out jobs too
    (its features, not its trees); any other model as trained."""
    if isinstance(model, HistoryRuntime):
        return model.observing(holdout)
    return model


def write_artifact(folder: Path, record_id: str, model: RuntimeModel) -> Path:
    """``folder/record_id.json``: what ``runtime.load_runtime_model`` reads back."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record_id}.json"
    path.write_text(model.to_json())
    return path


def candidate_record(
    shadowed: Shadowed,
    record_id: str,
    *,
    target: str,
    status: EstimatorStatus,
    artifact: Path,
    training_rows: int,
    incumbent_error: float | None,
    metric: Metric,
    created_at: datetime,
    notes: str,
) -> EstimatorRecord:
    """A candidate's registry record: its held-out and training errors, and the
    incumbent's held-out error on the same jobs where there is one."""
    incumbent = (
        {f"incumbent_{VALIDATION_KEY[metric]}": incumbent_error}
        if incumbent_error is not None
        else {}
    )
    return EstimatorRecord(
        id=record_id,
        kind=shadowed.model.kind,
        target=target,
        status=status,
        validation={**shadowed.errors, **shadowed.train_errors, **incumbent},
        training_rows=training_rows,
        artifact_path=str(artifact),
        features=shadowed.model.features,
        created_at=created_at,
        notes=notes,
    )
