"""How close a synthetic trace is to the real one: distributions, correlations, scheduling.

Three views, after seed 003's evaluation, plus what a scheduler sees:

- **Marginals**: per column (:data:`~simulations.synth.columns.COLUMNS`), the two-sample
  Kolmogorov-Smirnov distance (largest gap between the CDFs, 0..1) and the Wasserstein-1
  distance (in the column's unit, and over the real column's mean).
- **Joint**: Pearson correlation matrices of both traces (time and size columns in
  log1p, status and user as recorded; user is an id, so its row says little, but seed
  003's heatmaps show it) and their difference, drawn as heatmaps.
- **Scheduling utility**: both traces replayed under EASY with user estimates in the
  simulator; mean bounded slowdown, mean wait and utilization side by side, and two
  figures of how short-run jobs (under a minute) fare, which decide the bsld of a trace
  with many of them: their mean wait over every job's
  (:func:`~simulations.synth.load.short_wait_ratio`), and the share of the jobs users
  submit within the hour after one that come after its end
  (:func:`~simulations.synth.closed_loop.after_short_share`).

Both traces are read with the simulator's rules (jobs without a run time or a request
are dropped), so every figure covers the jobs a scheduler would see. The real run time
is compared as logged: the few real jobs that ran past their request (killed late) count
against the synthetic trace, which never does that.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import stats

from simulations.replay import replay
from simulations.synth.closed_loop import after_short_share
from simulations.synth.columns import COLUMNS, JobTable, Trace, read_trace
from simulations.synth.constraints import ConstraintReport, check_trace
from simulations.synth.load import easy_waits_s, short_wait_ratio
from simulations.synth.temporal import TemporalFidelity, compare_time
from simulations.workload import load_swf

__all__ = [
    "Check",
    "ColumnDistance",
    "CorrelationComparison",
    "EasyFigures",
    "FidelityReport",
    "SchedulingComparison",
    "Targets",
    "column_distances",
    "compare_correlations",
    "easy_figures",
    "evaluate",
    "write_figures",
]

_UNITS = {
    "interarrival_s": "s",
    "procs": "processors",
    "requested_time_s": "s",
    "run_s": "s",
    "status": "code",
    "user": "id",
}
_LOG_COLUMNS = ("interarrival_s", "procs", "requested_time_s", "run_s")


class Targets(BaseModel):
    """Issue #11's bar: every column within ``max_ks``; EASY bsld within
    ``max_bsld_relative``; issue #21's: arrivals per local hour within ``max_hour_tv``
    total-variation distance."""

    model_config = ConfigDict(extra="forbid")

    max_ks: float = Field(default=0.1, gt=0, le=1)
    max_bsld_relative: float = Field(default=0.2, gt=0)
    max_hour_tv: float = Field(default=0.05, gt=0, le=1)


class ColumnDistance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    column: str
    unit: str
    ks: float
    wasserstein: float = Field(description="In the column's unit")
    wasserstein_relative: float = Field(description="Over the real column's mean")
    real_median: float
    synthetic_median: float


class CorrelationComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    columns: list[str]
    real: list[list[float]]
    synthetic: list[list[float]]
    difference: list[list[float]] = Field(description="synthetic - real")
    max_abs_difference: float
    mean_abs_difference: float = Field(description="Over the off-diagonal cells")


class EasyFigures(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: int
    machine_procs: int
    mean_bsld: float
    mean_wait_s: float
    p90_wait_s: float
    utilization: float
    killed: int
    short_wait_ratio: float | None = Field(
        default=None,
        description="Short-run jobs' (under a minute) mean wait over every job's; None "
        "without short-run jobs",
    )
    after_short_share: float | None = Field(
        default=None,
        description="Of the jobs a user submits within the hour after a short-run job, "
        "the share submitted after it ended; None without such pairs",
    )


class SchedulingComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str = "easy"
    estimate: str = "user"
    real: EasyFigures
    synthetic: EasyFigures
    bsld_relative_difference: float = Field(description="(synthetic - real) / real")
    wait_relative_difference: float
    utilization_difference: float


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    value: float
    limit: float
    passed: bool


class FidelityReport(BaseModel):
    """What ``rightsize synth evaluate --json`` prints."""

    model_config = ConfigDict(extra="forbid")

    real: str
    synthetic: str
    real_jobs: int
    synthetic_jobs: int
    columns: list[ColumnDistance]
    correlation: CorrelationComparison
    temporal: TemporalFidelity
    scheduling: SchedulingComparison
    constraints: ConstraintReport
    targets: Targets
    checks: list[Check]
    passed: bool
    files: list[str] = Field(default_factory=list)


def column_distances(real: JobTable, synthetic: JobTable) -> list[ColumnDistance]:
    out = []
    for name in COLUMNS:
        a = real.column(name).astype(np.float64)
        b = synthetic.column(name).astype(np.float64)
        if name == "interarrival_s":
            # The first gap is undefined (0 by convention) in both.
            a, b = a[1:], b[1:]
        if a.size == 0 or b.size == 0:
            continue
        mean = float(np.abs(a).mean())
        w = float(stats.wasserstein_distance(a, b))
        out.append(
            ColumnDistance(
                column=name,
                unit=_UNITS[name],
                ks=float(stats.ks_2samp(a, b).statistic),
                wasserstein=w,
                wasserstein_relative=w / mean if mean > 0 else 0.0,
                real_median=float(np.median(a)),
                synthetic_median=float(np.median(b)),
            )
        )
    return out


def _correlation_matrix(table: JobTable) -> np.ndarray:
    columns = [
        np.log1p(np.maximum(table.column(c).astype(np.float64), 0))
        if c in _LOG_COLUMNS
        else table.column(c).astype(np.float64)
        for c in COLUMNS
    ]
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = np.corrcoef(np.column_stack(columns), rowvar=False)
    # A constant column (status 0 throughout, as in ALCF-Theta) correlates with nothing.
    out: np.ndarray = np.nan_to_num(np.atleast_2d(corr), nan=0.0)
    np.fill_diagonal(out, 1.0)
    return out


def compare_correlations(real: JobTable, synthetic: JobTable) -> CorrelationComparison:
    a, b = _correlation_matrix(real), _correlation_matrix(synthetic)
    diff = b - a
    off = ~np.eye(diff.shape[0], dtype=bool)
    return CorrelationComparison(
        columns=list(COLUMNS),
        real=np.round(a, 4).tolist(),
        synthetic=np.round(b, 4).tolist(),
        difference=np.round(diff, 4).tolist(),
        max_abs_difference=float(np.abs(diff[off]).max()),
        mean_abs_difference=float(np.abs(diff[off]).mean()),
    )


def easy_figures(
    path: str | Path, *, procs: int | None = None, trace: Trace | None = None
) -> EasyFigures:
    """EASY with user estimates over the whole trace, in the simulator; ``procs``: the
    machine's processors instead of the header's; ``trace`` (the same file, read): its
    short-run figures too."""
    result = replay(load_swf(path, procs=procs), policy="easy", estimate="user").result
    short = {}
    if trace is not None:  # one replay of the table for both figures
        wait = easy_waits_s(trace.table, trace.machine_procs)[0]
        short = {
            "short_wait_ratio": short_wait_ratio(trace.table, trace.machine_procs, wait_s=wait),
            "after_short_share": after_short_share(trace.table, trace.machine_procs, wait_s=wait),
        }
    return EasyFigures(
        jobs=result.jobs,
        machine_procs=result.machine_procs,
        mean_bsld=result.mean_bsld,
        mean_wait_s=result.mean_wait_s,
        p90_wait_s=result.p90_wait_s,
        utilization=result.utilization,
        killed=result.killed,
        **short,
    )


def _relative(synthetic: float, real: float) -> float:
    return (synthetic - real) / real if real else float("inf") if synthetic else 0.0


def evaluate(
    real: str | Path,
    synthetic: str | Path,
    *,
    report_dir: str | Path | None = None,
    targets: Targets | None = None,
    procs: int | None = None,
) -> FidelityReport:
    """Compare two SWF traces; write heatmaps and CDF plots when ``report_dir`` is given.
    ``procs``: the machine's processors for both traces, instead of their headers' (as in
    ``rightsize simulate``; a header may give none)."""
    goal = targets or Targets()
    real_trace = read_trace(real, procs=procs)
    synthetic_trace = read_trace(synthetic, procs=procs)
    columns = column_distances(real_trace.table, synthetic_trace.table)
    correlation = compare_correlations(real_trace.table, synthetic_trace.table)
    temporal = compare_time(
        real_trace.table,
        real_trace.clock,
        synthetic_trace.table,
        synthetic_trace.clock,
        real_procs=real_trace.machine_procs,
        synthetic_procs=synthetic_trace.machine_procs,
    )
    real_easy = easy_figures(real, procs=procs, trace=real_trace)
    synthetic_easy = easy_figures(synthetic, procs=procs, trace=synthetic_trace)
    scheduling = SchedulingComparison(
        real=real_easy,
        synthetic=synthetic_easy,
        bsld_relative_difference=_relative(synthetic_easy.mean_bsld, real_easy.mean_bsld),
        wait_relative_difference=_relative(synthetic_easy.mean_wait_s, real_easy.mean_wait_s),
        utilization_difference=synthetic_easy.utilization - real_easy.utilization,
    )
    constraints = check_trace(synthetic)
    checks = [
        Check(name=f"ks {c.column}", value=c.ks, limit=goal.max_ks, passed=c.ks <= goal.max_ks)
        for c in columns
    ]
    checks.append(
        Check(
            name="easy bsld relative difference",
            value=scheduling.bsld_relative_difference,
            limit=goal.max_bsld_relative,
            passed=abs(scheduling.bsld_relative_difference) <= goal.max_bsld_relative,
        )
    )
    checks.append(
        Check(
            name="hour-of-day arrival TV",
            value=temporal.hour_of_day_tv,
            limit=goal.max_hour_tv,
            passed=temporal.hour_of_day_tv <= goal.max_hour_tv,
        )
    )
    checks.append(
        Check(
            name="rows breaking a constraint",
            value=constraints.rows_with_violations,
            limit=0,
            passed=constraints.passed,
        )
    )
    report = FidelityReport(
        real=str(real),
        synthetic=str(synthetic),
        real_jobs=len(real_trace.table),
        synthetic_jobs=len(synthetic_trace.table),
        columns=columns,
        correlation=correlation,
        temporal=temporal,
        scheduling=scheduling,
        constraints=constraints,
        targets=goal,
        checks=checks,
        passed=all(c.passed for c in checks),
    )
    if report_dir is not None:
        files = write_figures(report, real_trace.table, synthetic_trace.table, report_dir)
        report.files = [str(f) for f in files]
        (Path(report_dir) / "fidelity.json").write_text(report.model_dump_json(indent=2))
        report.files.append(str(Path(report_dir) / "fidelity.json"))
    return report


def write_figures(
    report: FidelityReport, real: JobTable, synthetic: JobTable, directory: str | Path
) -> list[Path]:
    """``correlation.png`` (real, synthetic, difference heatmaps), ``marginals.png`` and
    ``temporal.png`` (arrivals per hour and weekday, autocorrelations)."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display here or in CI
    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    corr = report.correlation
    labels = corr.columns
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.4))
    spread = max(0.1, corr.max_abs_difference)
    panels = [
        ("real", np.array(corr.real), "coolwarm", -1.0, 1.0),
        ("synthetic", np.array(corr.synthetic), "coolwarm", -1.0, 1.0),
        ("synthetic - real", np.array(corr.difference), "PuOr", -spread, spread),
    ]
    for ax, (title, matrix, cmap, low, high) in zip(axes, panels, strict=True):
        image = ax.imshow(matrix, cmap=cmap, vmin=low, vmax=high)
        ax.set_xticks(range(len(labels)), labels, rotation=40, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        for i in range(len(labels)):
            for j in range(len(labels)):
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=8)
        ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(
        f"Pearson correlation (log1p of times and sizes): {Path(report.real).name} vs "
        f"{Path(report.synthetic).name}; max |diff| {corr.max_abs_difference:.3f}"
    )
    fig.tight_layout()
    heatmap = out / "correlation.png"
    fig.savefig(heatmap, dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    by_name = {c.column: c for c in report.columns}
    for ax, name in zip(axes.ravel(), COLUMNS, strict=True):
        for table, label in ((real, "real"), (synthetic, "synthetic")):
            values = np.sort(table.column(name).astype(np.float64))
            ax.step(values, np.linspace(0, 1, values.size), where="post", label=label)
        if name in _LOG_COLUMNS:
            ax.set_xscale("symlog", linthresh=1)
        distance = by_name.get(name)
        ax.set_title(f"{name}: KS {distance.ks:.3f}" if distance else name)
        ax.set_ylabel("fraction of jobs")
        ax.legend(loc="lower right")
    fig.tight_layout()
    marginals = out / "marginals.png"
    fig.savefig(marginals, dpi=110)
    plt.close(fig)
    return [heatmap, marginals, _temporal_figure(report.temporal, out / "temporal.png")]


def _temporal_figure(t: TemporalFidelity, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    panels = [
        ("hour_of_day", f"arrivals per local hour (TV {t.hour_of_day_tv:.3f})", "hour", 0),
        ("day_of_week", f"arrivals per weekday (TV {t.day_of_week_tv:.3f})", "Mon..Sun", 0),
        ("gap_autocorrelation", "autocorrelation of log gaps", "lag (jobs)", 1),
        ("hourly_autocorrelation", "autocorrelation of arrivals per hour", "lag (hours)", 1),
    ]
    for ax, (name, title, xlabel, first) in zip(axes.ravel(), panels, strict=True):
        for profile, label, style in ((t.real, "real", "-o"), (t.synthetic, "synthetic", "-s")):
            values = getattr(profile, name)
            ax.plot(range(first, first + len(values)), values, style, markersize=3, label=label)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.legend()
    fig.suptitle(
        f"time: sessions real {t.real.sessions:,} (mean {t.real.mean_session_jobs:.2f} jobs) vs "
        f"synthetic {t.synthetic.sessions:,} ({t.synthetic.mean_session_jobs:.2f}); "
        f"sequence similarity {t.sequence_similarity:.3f}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
