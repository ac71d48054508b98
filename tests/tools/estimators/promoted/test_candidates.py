"""A run-time candidate is trained, scored on held-out jobs, saved and recorded here
(tools.estimators.promoted.candidates); Model Promotion only decides."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import EstimatorStatus, JobRecord
from tests.tools.estimators.promoted.jobs import job
from tools.estimators.promoted.candidates import (
    Shadowed,
    best_candidate,
    candidate_record,
    serving_copy,
    shadow,
    write_artifact,
)
from tools.estimators.promoted.runtime import (
    LogLinearRuntime,
    RuntimeModel,
    fit_loglinear,
    load_runtime_model,
)

START = datetime(2026, 1, 1, tzinfo=UTC)


def _jobs(count: int, seed: int = 1) -> list[JobRecord]:
    rng = random.Random(seed)
    return [job(n, START + timedelta(minutes=30 * n), rng=rng) for n in range(count)]


def test_a_candidate_is_scored_on_the_held_out_jobs_only() -> None:
    jobs = _jobs(120)
    train, holdout = jobs[:90], jobs[90:]
    newest = max(j.end_time for j in jobs if j.end_time)
    found = shadow(fit_loglinear, train, holdout, newest, "log")
    assert isinstance(found, Shadowed)
    assert found.model.trained_until == newest
    assert found.error == found.errors["log_error"] and 0 < found.error < 0.3
    assert set(found.train_errors) == {f"train_{k}" for k in found.errors}
    # a model scored on other jobs gets another error: the held-out ones decide
    other = shadow(fit_loglinear, train, _jobs(30, seed=9), newest, "log")
    assert isinstance(other, Shadowed) and other.error != found.error


def test_a_trainer_that_declines_says_why() -> None:
    def declines(records: Sequence[JobRecord]) -> RuntimeModel:
        raise InvalidInputError("too few jobs", field="jobs", value=len(records))

    said = shadow(declines, _jobs(10), _jobs(5), START, "mape")
    assert isinstance(said, str) and "too few jobs" in said


def test_the_best_candidate_has_the_lowest_held_out_error() -> None:
    model = fit_loglinear(_jobs(60))
    worse = Shadowed(model=model, error=0.4, errors={"log_error": 0.4})
    better = Shadowed(model=model, error=0.2, errors={"log_error": 0.2})
    assert best_candidate([worse, better]) is better
    assert best_candidate([better, Shadowed(model=model, error=0.2, errors={})]) is better


def test_a_saved_candidate_loads_back_and_its_record_carries_its_errors(tmp_path: Path) -> None:
    jobs = _jobs(120)
    found = shadow(fit_loglinear, jobs[:90], jobs[90:], START, "mape")
    assert isinstance(found, Shadowed)
    model = serving_copy(found.model, jobs[90:])
    assert model is found.model  # a log-linear model serves as trained
    path = write_artifact(tmp_path / "estimators", "runtime_s-loglinear-x", model)
    record = candidate_record(
        found,
        "runtime_s-loglinear-x",
        target="runtime_s",
        status=EstimatorStatus.SHADOW,
        artifact=path,
        training_rows=90,
        incumbent_error=0.5,
        metric="mape",
        created_at=START,
        notes="n",
    )
    assert record.validation["incumbent_mape"] == 0.5
    assert record.validation["mape"] == found.errors["mape"]
    assert record.kind == model.kind and record.training_rows == 90
    loaded = load_runtime_model(record)
    assert isinstance(loaded, LogLinearRuntime)
    assert loaded.predict_records(jobs[90:]) == model.predict_records(jobs[90:])
    no_incumbent = candidate_record(
        found,
        "y",
        target="runtime_s",
        status=EstimatorStatus.RETIRED,
        artifact=path,
        training_rows=90,
        incumbent_error=None,
        metric="mape",
        created_at=START,
        notes="n",
    )
    assert not any(key.startswith("incumbent") for key in no_incumbent.validation)
