"""``rightsize history-bench``: replay an SWF trace and score run-time or memory predictors."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail
from rightsize.progress import progress

if TYPE_CHECKING:  # the replay loads xgboost: imported when the command runs
    from tools.estimators.history.metrics import PredictorScore
    from tools.estimators.history.replay import BenchResult
    from tools.estimators.history.replay_cpu import CpuBenchResult
    from tools.estimators.history.replay_memory import MemoryBenchResult, MemoryPart

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
    if result.lines_skipped:
        reasons = ", ".join(f"{k} {v}" for k, v in result.skipped_by_reason.items())
        console.print(f"skipped {result.lines_skipped} lines: {reasons}")
    for note in result.notes:
        console.print(f"note: {note}")


_MEMORY_LABELS = {
    "user_request": "user request",
    "last3_max_x1": "last-three-max x1",
    "last3_max_x1.5": "last-three-max x1.5",
    "last3_max_x2": "last-three-max x2",
    "last3_max_tuned": "last-three-max, k tuned knowing the answers",
    "model": "model request",
}


def _memory_table(title: str, part: MemoryPart) -> Table:
    table = Table(title=title)
    for column in ("rule", "k", "jobs", "OOM rate", "waste"):
        table.add_column(column, justify="left" if column == "rule" else "right")
    for name, figures in part.predictors.items():
        table.add_row(
            _MEMORY_LABELS.get(name, name),
            "" if figures.factor is None else f"{figures.factor:.2f}",
            str(figures.jobs),
            f"{figures.oom_rate:.4f}",
            f"{figures.waste:.3f}",
        )
    return table


def _render_memory(result: MemoryBenchResult) -> None:
    console.print(
        _memory_table(
            f"{result.trace}: memory per processor, {result.jobs_scored} jobs with a use of "
            f"{result.jobs_read} read, target OOM {result.target_oom_rate:.0%}, "
            f"{result.seconds:.0f} s",
            result.all_jobs,
        )
    )
    console.print(_memory_table("held out: the later half (submit order)", result.held_out))
    for part, name in ((result.all_jobs, "all jobs"), (result.held_out, "held out")):
        if part.model_waste_vs_tuned is not None:
            console.print(
                f"{name}: model waste / tuned last-three-max waste = "
                f"{part.model_waste_vs_tuned:.2f} (at the model's OOM rate)"
            )
    console.print(
        "OOM rate: request < use; waste: sum(max(request - use, 0)) / sum(use). "
        "Only ended jobs are learned from."
    )
    if result.kept_out:
        console.print("kept out: " + ", ".join(f"{k} {v}" for k, v in result.kept_out.items()))
    for note in result.notes:
        console.print(f"note: {note}")


_CPU_LABELS = {
    "user_last": "the user's last efficiency",
    "user_median": "the user's median of ten",
    "model": "model median",
}


def _render_cpu(result: CpuBenchResult) -> None:
    parts = (("all jobs", result.all_jobs), ("held out: the later half", result.held_out))
    table = Table(
        title=f"{result.trace}: CPU efficiency (CPU time / (run x processors)), "
        f"{result.jobs_with_efficiency} jobs with one of {result.jobs_read} read, "
        f"{result.seconds:.0f} s"
    )
    for column in ("predictor", *(f"MAE, {name}" for name, _ in parts)):
        table.add_column(column, justify="left" if column == "predictor" else "right")
    for key, label in _CPU_LABELS.items():
        table.add_row(
            label, *(f"{part.mae[key]:.3f}" if key in part.mae else "" for _, part in parts)
        )
    console.print(table)
    for name, part in parts:
        if part.interval_coverage is None:
            continue
        console.print(
            f"{name}: {part.jobs} jobs, mean efficiency {part.mean_efficiency:.2f}; the model's "
            f"0.1-0.9 interval holds {part.interval_coverage:.0%} (mean width "
            f"{part.interval_width:.2f}); {part.low_predicted} put below 50 %, "
            f"{part.low_precision or 0:.0%} of them ran below it"
        )
    if result.kept_out:
        console.print("kept out: " + ", ".join(f"{k} {v}" for k, v in result.kept_out.items()))
    for note in result.notes:
        console.print(f"note: {note}")


def history_bench(
    trace: Path = typer.Option(..., "--trace", help="An SWF trace, .swf or .swf.gz"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="Replay only the first N jobs of the trace."
    ),
    target: str = typer.Option(
        "runtime",
        "--target",
        help="What to predict: runtime, memory (per processor) or cpu-efficiency.",
    ),
    predictions_out: Path | None = typer.Option(
        None,
        "--predictions-out",
        help="With --target memory: write job_id,submit_s,used_kb,request_kb to this CSV.",
    ),
) -> None:
    """Replay a trace in time order; score the user's request, last-2 and the model.

    Accuracy is Tsafrir's mean of min(p, r) / max(p, r); median APE is in percent;
    under-prediction is the fraction of jobs with p < r. Only jobs with a run time and a
    requested time are scored, and every predictor learns a job's run time only after
    the job has ended.

    With ``--target memory``: the memory request per processor of the user, of
    last-three-max x k and of the model, as OOM rate and waste (a trace without used
    memory is an error). With ``--target cpu-efficiency``: the mean absolute error of the
    user's last efficiency, their median and the model's (a trace without CPU time,
    SWF field 6, is an error).
    """
    if target not in ("runtime", "memory", "cpu-efficiency"):
        fail(
            InvalidInputError(
                "must be runtime, memory or cpu-efficiency", field="--target", value=target
            ),
            as_json,
        )
    if predictions_out is not None and target != "memory":
        fail(
            InvalidInputError(
                "--predictions-out needs --target memory",
                field="--predictions-out",
                value=str(predictions_out),
            ),
            as_json,
        )
    if target == "memory":
        _memory_bench(trace, as_json, limit, predictions_out)
        return
    if target == "cpu-efficiency":
        _cpu_bench(trace, as_json, limit)
        return
    from tools.estimators.history.replay import history_bench as run_history_bench

    try:
        with progress(f"replaying {trace.name}", quiet=as_json):
            result = run_history_bench(trace, limit=limit)
    except RightsizeError as error:
        fail(error, as_json)
    except OSError as error:
        fail(InvalidInputError(f"cannot read the trace: {error}", source=str(trace)), as_json)
    emit(result, as_json, lambda: _render(result))


def _memory_bench(
    trace: Path, as_json: bool, limit: int | None, predictions_out: Path | None
) -> None:
    from tools.estimators.history.replay_memory import memory_bench

    try:
        with progress(f"replaying {trace.name} (memory)", quiet=as_json):
            result = memory_bench(trace, limit=limit, predictions_out=predictions_out)
    except RightsizeError as error:
        fail(error, as_json)
    except OSError as error:
        fail(InvalidInputError(f"cannot read or write: {error}", source=str(trace)), as_json)
    emit(result, as_json, lambda: _render_memory(result))


def _cpu_bench(trace: Path, as_json: bool, limit: int | None) -> None:
    from tools.estimators.history.replay_cpu import cpu_bench

    try:
        with progress(f"replaying {trace.name} (CPU efficiency)", quiet=as_json):
            result = cpu_bench(trace, limit=limit)
    except RightsizeError as error:
        fail(error, as_json)
    except OSError as error:
        fail(InvalidInputError(f"cannot read the trace: {error}", source=str(trace)), as_json)
    emit(result, as_json, lambda: _render_cpu(result))
