"""``rightsize history-bench``: replay an SWF trace and score run-time predictors on it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail
from rightsize.progress import progress

if TYPE_CHECKING:  # the replay loads xgboost: imported when the command runs
    from tools.estimators.metrics import PredictorScore
    from tools.estimators.replay import BenchResult

__all__ = ["history_bench"]

_LABELS = {
    "user_request": "user request",
    "last2": "last-2 (EASY++)",
    "model_p50": "model p50 (best expected accuracy)",
    "model_estimate": "model estimate (= p50)",
    "model_safe": "model safe",
    "model_safe_at_request": "model safe, capped at request",
    "last2_submit_order": "last-2 in submit order (sees the future)",
}


def _table(title: str, predictors: dict[str, PredictorScore]) -> Table:
    table = Table(title=title)
    for column in ("predictor", "accuracy", "median APE %", "under-prediction"):
        table.add_column(column, justify="left" if column == "predictor" else "right")
    for name, figures in predictors.items():
        table.add_row(
            _LABELS.get(name, name),
            f"{figures.accuracy:.3f}",
            f"{figures.median_ape:.1f}",
            f"{figures.under_rate:.3f}",
        )
    return table


def _render(result: BenchResult) -> None:
    console.print(
        _table(
            f"{result.trace}: {result.jobs} jobs scored of {result.jobs_read} read, "
            f"{result.seconds:.1f} s",
            result.predictors,
        )
    )
    if result.memory is not None:
        console.print(
            _table(f"memory per processor: {result.memory.jobs} jobs", result.memory.predictors)
        )
    if result.lines_skipped:
        reasons = ", ".join(f"{k} {v}" for k, v in result.skipped_by_reason.items())
        console.print(f"skipped {result.lines_skipped} lines: {reasons}")
    for note in result.notes:
        console.print(f"note: {note}")


def history_bench(
    trace: Path = typer.Option(..., "--trace", help="An SWF trace, .swf or .swf.gz"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Replay only the first N jobs of the trace."
    ),
) -> None:
    """Replay a trace in time order; score the user's request, last-2 and the model.

    Accuracy is Tsafrir's mean of min(p, r) / max(p, r); median APE is in percent;
    under-prediction is the fraction of jobs with p < r. Only jobs with a run time and a
    requested time are scored, and every predictor learns a job's run time only after
    the job has ended.
    """
    from tools.estimators.replay import history_bench as run_history_bench

    try:
        with progress(f"replaying {trace.name}", quiet=as_json):
            result = run_history_bench(trace, limit=limit)
    except RightsizeError as error:
        fail(error, as_json)
    except OSError as error:
        fail(InvalidInputError(f"cannot read the trace: {error}", source=str(trace)), as_json)
    emit(result, as_json, lambda: _render(result))
