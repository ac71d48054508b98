"""One table over several real traces: each generator fitted, sampled, checked (issue #21).

For every trace (cut to its first ``max_jobs`` jobs, header kept) and generator kind:
fit once (seed 0), sample as many jobs as the slice has with each seed, write the SWF and
evaluate it against the slice (:func:`~simulations.synth.fidelity.evaluate`): the largest
column KS, EASY bsld against the real one, the fidelity in time (hour-of-day and weekday
TV, autocorrelation differences, session KS, sequence similarity), the weekly load's
coefficient of variation, the work in time (the backlog arrivals find over its time
mean, a day's jobs against their size) and how short-run jobs fare (their EASY wait over
every job's, the share of the jobs following one submitted after its end), real /
synthetic. ``rightsize synth table`` and
``benchmarks/synth.py --traces`` print it, a row as each sample is checked.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from itertools import product
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import Trace, read_trace
from simulations.synth.fidelity import evaluate
from simulations.synth.generator import ModelKind, TraceModel, generate, write_trace
from simulations.synth.load import weekly_load_cv
from simulations.synth.model_files import fit_model
from simulations.synth.temporal import WorkProfile
from tools.traces.swf import SWFReader, write_swf

__all__ = ["HEADER", "TraceRow", "first_jobs", "row_line", "trace_table"]


class TraceRow(BaseModel):
    """One sample of one generator of one trace, against the trace."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    model: str
    seed: int
    fit_seed: int = 0
    jobs: int
    fit_s: float
    sample_s: float
    kept_share: float
    load_factor: float
    ks_max: float
    ks_max_column: str
    corr_max_abs_diff: float
    real_bsld: float
    bsld: float
    bsld_rel: float
    hour_tv: float
    weekday_tv: float
    gap_acf_diff: float
    hourly_acf_diff: float
    session_jobs_ks: float
    real_session_jobs: float
    session_jobs: float
    sequence_similarity: float
    real_found_ratio: float
    found_ratio: float
    real_day_corr: float
    day_corr: float
    real_week_cv: float
    week_cv: float
    real_short_wait_ratio: float | None = None
    short_wait_ratio: float | None = None
    real_after_short: float | None = None
    after_short: float | None = None
    constraints_passed: bool
    passed: bool


def first_jobs(source: Path, jobs: int, work: Path) -> Path:
    """``source`` cut to its first ``jobs`` records (header kept) in ``work``, or itself
    when it has no more."""
    with SWFReader(source) as reader:
        header = reader.header
        records = []
        for record in reader:
            records.append(record)
            if len(records) > jobs:
                break
    if len(records) <= jobs:
        return source
    out = work / f"{source.name.split('.swf')[0]}-first{jobs}.swf"
    write_swf(out, header, records[:jobs])
    return out


def _fit(
    trace: Trace, kind: ModelKind, epochs: dict[str, int], seed: int
) -> tuple[TraceModel, float]:
    """The model of ``kind`` fitted on ``trace`` with ``seed`` and the seconds it took."""
    options: dict[str, Any] = {"epochs": epochs[kind]} if kind in epochs else {}
    began = time.perf_counter()
    model = fit_model(trace, kind, seed=seed, **options)
    return model, time.perf_counter() - began


def _work(profile: WorkProfile | None) -> WorkProfile:
    """The work profile evaluate() fills for both traces (it knows their machines)."""
    if profile is None:
        raise RuntimeError("evaluate() left a trace's work profile out")
    return profile


def _row(
    real: Path,
    trace: Trace,
    kind: ModelKind,
    seed: int,
    fitted: tuple[TraceModel, float, int],
    work: Path,
    report_dir: Path | None,
) -> TraceRow:
    """``fitted``'s sample of ``seed`` against ``real`` (read as ``trace``); ``fitted``:
    the model, the seconds its fit took and its fit seed."""
    model, fit_s, fit_seed = fitted
    began = time.perf_counter()
    sample = generate(model, len(trace.table), seed=seed)
    synthetic = work / f"{real.name}-{kind}-{fit_seed}-{seed}.swf"
    write_trace(synthetic, sample, model.metadata)
    sample_s = time.perf_counter() - began
    report = evaluate(real, synthetic, report_dir=report_dir)
    t = report.temporal
    sampled = read_trace(synthetic)
    widest = max(report.columns, key=lambda c: c.ks)
    return TraceRow(
        trace=real.name,
        model=kind,
        seed=seed,
        fit_seed=fit_seed,
        jobs=len(trace.table),
        fit_s=fit_s,
        sample_s=sample_s,
        kept_share=sample.kept_share,
        load_factor=sample.load_factor,
        ks_max=widest.ks,
        ks_max_column=widest.column,
        corr_max_abs_diff=report.correlation.max_abs_difference,
        real_bsld=report.scheduling.real.mean_bsld,
        bsld=report.scheduling.synthetic.mean_bsld,
        bsld_rel=report.scheduling.bsld_relative_difference,
        hour_tv=t.hour_of_day_tv,
        weekday_tv=t.day_of_week_tv,
        gap_acf_diff=t.gap_autocorrelation_max_diff,
        hourly_acf_diff=t.hourly_autocorrelation_max_diff,
        session_jobs_ks=t.session_jobs_ks,
        real_session_jobs=t.real.mean_session_jobs,
        session_jobs=t.synthetic.mean_session_jobs,
        sequence_similarity=t.sequence_similarity,
        real_found_ratio=_work(t.real_work).arrival_backlog_ratio,
        found_ratio=_work(t.synthetic_work).arrival_backlog_ratio,
        real_day_corr=_work(t.real_work).daily_jobs_work_correlation,
        day_corr=_work(t.synthetic_work).daily_jobs_work_correlation,
        real_week_cv=weekly_load_cv(trace.table, trace.machine_procs),
        week_cv=weekly_load_cv(sampled.table, trace.machine_procs),
        real_short_wait_ratio=report.scheduling.real.short_wait_ratio,
        short_wait_ratio=report.scheduling.synthetic.short_wait_ratio,
        real_after_short=report.scheduling.real.after_short_share,
        after_short=report.scheduling.synthetic.after_short_share,
        constraints_passed=report.constraints.passed,
        passed=report.passed,
    )


HEADER = (
    f"{'trace':<14} {'model':<8} {'fit/draw':>8} {'jobs':>6} {'KS max':>13} "
    f"{'EASY bsld real/syn':>19} "
    f"{'rel':>6} {'hour TV':>7} {'wday TV':>7} {'gapACF':>6} {'hrACF':>6} "
    f"{'sess KS':>7} {'jobs/sess r/s':>13} {'seq sim':>7} {'week CV r/s':>11} "
    f"{'found/mean r/s':>14} {'day n~w r/s':>13} {'short r/s':>9} {'after r/s':>9} "
    f"{'pass':>4}"
)


def row_line(r: TraceRow) -> str:
    """``r`` as a line under :data:`HEADER`."""
    short = "-".join(r.trace.split("-")[:2])
    return (
        f"{short:<14} {r.model:<8} {f'{r.fit_seed}/{r.seed}':>8} {r.jobs:>6} "
        f"{r.ks_max:>5.3f} {r.ks_max_column[:7]:>7} "
        f"{r.real_bsld:>9.1f}/{r.bsld:<9.1f} {r.bsld_rel:>+6.0%} "
        f"{r.hour_tv:>7.3f} {r.weekday_tv:>7.3f} {r.gap_acf_diff:>6.3f} "
        f"{r.hourly_acf_diff:>6.3f} {r.session_jobs_ks:>7.3f} "
        f"{r.real_session_jobs:>6.2f}/{r.session_jobs:<6.2f} "
        f"{r.sequence_similarity:>7.3f} {r.real_week_cv:>5.2f}/{r.week_cv:<5.2f} "
        f"{r.real_found_ratio:>6.2f}/{r.found_ratio:<7.2f} "
        f"{r.real_day_corr:>+6.2f}/{r.day_corr:<+6.2f} "
        f"{_pair(r.real_short_wait_ratio, r.short_wait_ratio)} "
        f"{_pair(r.real_after_short, r.after_short)} "
        f"{'yes' if r.passed else 'no':>4}"
    )


def _pair(real: float | None, synthetic: float | None) -> str:
    """Two shares as ``real/synthetic`` under a 9-wide column, '-' for one missing."""
    shown = ["-" if x is None else f"{x:.2f}" for x in (real, synthetic)]
    return f"{shown[0]:>4}/{shown[1]:<4}"


def trace_table(
    traces: Sequence[Path],
    kinds: Sequence[str],
    *,
    seeds: int = 1,
    fit_seeds: int = 1,
    max_jobs: int = 20_000,
    sequence_epochs: int = 8,
    tvae_epochs: int = 60,
    report: Path | None = None,
    on_row: Callable[[TraceRow], None] | None = None,
) -> list[TraceRow]:
    """Every trace x kind x fit seed x seed (:class:`TraceRow`), in that order; each model
    fitted with seeds 0..``fit_seeds``-1 (one fit each: how much the figures move from fit
    to fit, HPC2N-2002's EASY bsld +19% to +58% over three) and each fit sampled with
    seeds 0..``seeds``-1; ``report``: the first fit's seed 0's plots and fidelity.json under
    ``report/TRACE/KIND``; ``on_row``: called with each row as it is checked (the whole
    table takes minutes a trace)."""
    for name, value, least in (
        ("seeds", seeds, 1),
        ("fit_seeds", fit_seeds, 1),
        ("max_jobs", max_jobs, 2),
        ("sequence_epochs", sequence_epochs, 1),
        ("tvae_epochs", tvae_epochs, 1),
    ):
        if value < least:
            raise InvalidInputError(f"must be at least {least}", field=name, value=value)
    known: tuple[ModelKind, ...] = get_args(ModelKind)
    checked = [next((k for k in known if k == kind), None) for kind in kinds]
    for kind, found in zip(kinds, checked, strict=True):
        if found is None:
            raise InvalidInputError(
                f"unknown generator (known: {', '.join(known)})", field="model", value=kind
            )
    for path in traces:
        if not Path(path).is_file():
            raise InvalidInputError("trace file not found", field="trace", value=str(path))
    epochs = {"sequence": sequence_epochs, "tvae": tvae_epochs}
    rows: list[TraceRow] = []
    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        for path in traces:
            real = first_jobs(Path(path), max_jobs, work)
            trace = read_trace(real)
            for kind, fit_seed in product((k for k in checked if k is not None), range(fit_seeds)):
                model, fit_s = _fit(trace, kind, epochs, fit_seed)  # seeds sample each fit
                for seed in range(seeds):
                    report_dir = None
                    if report is not None and seed == 0 and fit_seed == 0:
                        report_dir = report / real.name.split(".swf")[0] / kind
                    fitted = (model, fit_s, fit_seed)
                    rows.append(_row(real, trace, kind, seed, fitted, work, report_dir))
                    if on_row is not None:
                        on_row(rows[-1])
    return rows
