"""``rightsize synth``: fit a trace generator, sample synthetic SWF traces, evaluate them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail
from rightsize.progress import progress

if TYPE_CHECKING:  # the generators (torch, scipy) load when a command runs
    from simulations.synth.fidelity import FidelityReport
    from simulations.synth.generator import ModelKind

app = typer.Typer(
    help="Synthetic job traces fitted on a real SWF trace (Gaussian copula, TVAE, or a "
    "sequence model that keeps time of day, bursts and sessions).",
    no_args_is_help=True,
)

MODELS: dict[str, ModelKind] = {"copula": "copula", "tvae": "tvae", "sequence": "sequence"}
DEFAULT_EPOCHS: dict[str, int] = {"tvae": 60, "sequence": 12}


@app.command("fit")
def fit_command(
    trace: Path = typer.Option(..., "--trace", help="Real SWF trace (.swf or .swf.gz)"),
    model: str = typer.Option("copula", "--model", help="copula, tvae or sequence"),
    out: Path = typer.Option(..., "--out", help="Where to write the fitted model"),
    seed: int = typer.Option(0, "--seed"),
    min_class_jobs: int = typer.Option(
        30, "--min-class-jobs", help="Jobs a user needs in a size class to get its own class"
    ),
    marginal: str = typer.Option("empirical", "--marginal", help="copula: empirical or kde"),
    epochs: int | None = typer.Option(
        None, "--epochs", help="tvae (default 60) or sequence (default 12): training epochs"
    ),
    procs: int | None = typer.Option(None, "--procs", help="Machine size (default: header)"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a summary."),
) -> None:
    """Fit a generator on a real trace and save it."""
    from simulations.synth.columns import read_trace
    from simulations.synth.model_files import fit_model, save_model

    if model not in MODELS:
        fail(
            InvalidInputError("use copula, tvae or sequence", field="--model", value=model),
            as_json,
        )
    options: dict[str, Any] = {"min_class_jobs": min_class_jobs}
    if model == "copula":
        options["marginal"] = marginal
    else:
        options["epochs"] = DEFAULT_EPOCHS[model] if epochs is None else epochs
    try:
        with progress(f"fitting {model} on {trace.name}", quiet=as_json):
            fitted = fit_model(read_trace(trace, procs=procs), MODELS[model], seed=seed, **options)
        path = save_model(fitted, out)
    except RightsizeError as error:
        fail(error, as_json)
    meta = fitted.metadata
    summary = {
        "model": str(path),
        "kind": meta.kind,
        "trace": meta.trace,
        "training_jobs": meta.training_jobs,
        "classes": len(meta.classes.classes),
        "machine_procs": meta.machine_procs,
        "offered_load": meta.offered_load,
        "fit_seconds": meta.fit_seconds,
        "options": meta.options,
    }
    emit(
        summary,
        as_json,
        lambda: console.print(
            f"{meta.kind} model fitted on {meta.training_jobs:,} jobs of {meta.trace} "
            f"({len(meta.classes.classes)} classes) in {meta.fit_seconds:.1f} s -> {path}"
        ),
    )


def _looks_like_a_model(path: Path) -> None:
    """A fitted model is the zip archive ``torch.save`` writes; say so before torch reads."""
    import zipfile

    if path.is_file() and not zipfile.is_zipfile(path):
        with path.open("rb") as handle:
            head = handle.read(24)
        raise InvalidInputError(
            f"not a rightsize synth model file (`rightsize synth fit` writes zip archives; "
            f"this file starts {head!r})",
            source=str(path),
            field="MODEL",
        )


@app.command("sample")
def sample_command(
    model: Path = typer.Argument(..., help="A model written by `rightsize synth fit`"),
    jobs: int = typer.Option(..., "--jobs", help="How many jobs to generate"),
    out: Path = typer.Option(..., "--out", help="SWF file to write (.swf or .swf.gz)"),
    seed: int = typer.Option(0, "--seed"),
    match_load: bool = typer.Option(
        True, "--match-load/--no-match-load", help="Rescale gaps to the training trace's load"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a summary."),
) -> None:
    """Generate a synthetic SWF trace (constraints enforced on every row)."""
    from simulations.synth.generator import generate, write_trace
    from simulations.synth.model_files import load_model

    began = time.perf_counter()
    try:
        _looks_like_a_model(model)
        fitted = load_model(model)
        sample = generate(fitted, jobs, seed=seed, match_load=match_load)
        written = write_trace(out, sample, fitted.metadata, model_name=model.name)
    except RightsizeError as error:
        fail(error, as_json)
    seconds = time.perf_counter() - began
    summary = {
        "trace": str(out),
        "jobs": written,
        "seed": seed,
        "load_factor": sample.load_factor,
        "kept_share": sample.kept_share,
        "seconds": seconds,
    }
    emit(
        summary,
        as_json,
        lambda: console.print(
            f"{written:,} jobs -> {out} in {seconds:.2f} s (seed {seed}, load factor "
            f"{sample.load_factor:.3f}, kept share {sample.kept_share:.3f})"
        ),
    )


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _render(report: FidelityReport) -> None:
    table = Table(title=f"{Path(report.synthetic).name} vs {Path(report.real).name}")
    for column in ("column", "KS", "Wasserstein", "W / mean", "median real", "median synth"):
        table.add_column(column, justify="right")
    for c in report.columns:
        table.add_row(
            c.column,
            f"{c.ks:.3f}",
            f"{c.wasserstein:,.1f} {c.unit}",
            f"{c.wasserstein_relative:.3f}",
            f"{c.real_median:,.0f}",
            f"{c.synthetic_median:,.0f}",
        )
    console.print(table)
    s = report.scheduling
    easy = Table(
        title="EASY (user estimates)",
        caption="short: jobs under a minute; after short end: share of a user's next jobs "
        "(within the hour) submitted after its end",
    )
    for column in (
        "trace",
        "jobs",
        "mean bsld",
        "mean wait",
        "utilization",
        "short wait ratio",
        "after short end",
    ):
        easy.add_column(column, justify="right")
    for label, figures in (("real", s.real), ("synthetic", s.synthetic)):
        easy.add_row(
            label,
            f"{figures.jobs:,}",
            f"{figures.mean_bsld:.2f}",
            f"{figures.mean_wait_s / 3600:.2f} h",
            f"{figures.utilization:.3f}",
            _share(figures.short_wait_ratio),
            _share(figures.after_short_share),
        )
    console.print(easy)
    t = report.temporal
    console.print(
        f"time: hour-of-day TV {t.hour_of_day_tv:.3f}, day-of-week TV {t.day_of_week_tv:.3f}, "
        f"gap autocorrelation max |diff| {t.gap_autocorrelation_max_diff:.3f}, hourly "
        f"{t.hourly_autocorrelation_max_diff:.3f}; sessions {t.real.sessions:,} real "
        f"(mean {t.real.mean_session_jobs:.2f} jobs) vs {t.synthetic.sessions:,} "
        f"({t.synthetic.mean_session_jobs:.2f}), session jobs KS {t.session_jobs_ks:.3f}, "
        f"processor-seconds KS {t.session_processor_seconds_ks:.3f}; sequence similarity "
        f"{t.sequence_similarity:.3f}"
    )
    if t.real_work is not None and t.synthetic_work is not None:
        r, y = t.real_work, t.synthetic_work
        console.print(
            f"work in time (real vs synthetic): daily work CV {r.daily_work_cv:.2f} vs "
            f"{y.daily_work_cv:.2f}, busy days' jobs against their size (correlation) "
            f"{r.daily_jobs_work_correlation:+.2f} vs {y.daily_jobs_work_correlation:+.2f}, "
            f"backlog found by arrivals over its time mean {r.arrival_backlog_ratio:.2f} vs "
            f"{y.arrival_backlog_ratio:.2f}"
        )
    console.print(
        f"correlation: max |diff| {report.correlation.max_abs_difference:.3f}, mean "
        f"{report.correlation.mean_abs_difference:.3f}; constraints: "
        f"{report.constraints.rows - report.constraints.rows_with_violations:,}/"
        f"{report.constraints.rows:,} rows pass"
    )
    for check in report.checks:
        mark = "[green]pass[/]" if check.passed else "[red]FAIL[/]"
        console.print(f"  {mark} {check.name}: {check.value:.3f} (limit {check.limit:g})")
    for file in report.files:
        console.print(f"report: {file}")


@app.command("evaluate")
def evaluate_command(
    real: Path = typer.Option(..., "--real", help="The real SWF trace"),
    synthetic: Path = typer.Option(..., "--synthetic", help="The synthetic SWF trace"),
    report: Path | None = typer.Option(
        None, "--report", help="Write correlation.png, marginals.png, fidelity.json here"
    ),
    max_ks: float = typer.Option(0.1, "--max-ks", help="Target: largest KS per column"),
    max_bsld: float = typer.Option(
        0.2, "--max-bsld", help="Target: largest relative EASY bsld difference"
    ),
    max_hour_tv: float = typer.Option(
        0.05, "--max-hour-tv", help="Target: largest hour-of-day arrival TV distance"
    ),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when a target is missed."),
    procs: int | None = typer.Option(
        None, "--procs", min=1, help="Machine size (default: each trace's header)"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Compare a synthetic trace with the real one: KS, Wasserstein, correlations, EASY."""
    from simulations.synth.fidelity import Targets, evaluate

    try:
        targets = Targets(max_ks=max_ks, max_bsld_relative=max_bsld, max_hour_tv=max_hour_tv)
    except ValueError as error:
        fail(
            InvalidInputError(f"bad target: {error}", field="--max-ks/--max-bsld/--max-hour-tv"),
            as_json,
        )
    try:
        with progress(f"evaluating {synthetic.name}", quiet=as_json):
            result = evaluate(real, synthetic, report_dir=report, targets=targets, procs=procs)
    except RightsizeError as error:
        fail(error, as_json)
    emit(result, as_json, lambda: _render(result))
    if strict and not result.passed:
        raise typer.Exit(code=1)


@app.command("table")
def table_command(
    traces: list[Path] = typer.Argument(..., help="Real SWF traces (.swf or .swf.gz)"),
    models: list[str] = typer.Option(
        ["sequence"], "--model", help="copula, tvae or sequence (repeatable)"
    ),
    seeds: int = typer.Option(1, "--seeds", min=1, help="Samples per trace and model"),
    fit_seeds: int = typer.Option(
        1, "--fit-seeds", min=1, help="Fits per trace and model (seeds 0..N-1), each sampled"
    ),
    max_jobs: int = typer.Option(
        20_000, "--max-jobs", min=2, help="Each trace cut to its first jobs (header kept)"
    ),
    sequence_epochs: int = typer.Option(8, "--sequence-epochs", min=1),
    tvae_epochs: int = typer.Option(60, "--tvae-epochs", min=1),
    report: Path | None = typer.Option(
        None, "--report", help="Seed 0's plots and fidelity.json under DIR/TRACE/MODEL"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the table."),
) -> None:
    """One table over several traces: each generator fitted (once, or per fit seed), sampled
    per seed, and checked (column KS, EASY bsld, time and work in time, real / synthetic)."""
    from simulations.synth.trace_table import HEADER, TraceRow, row_line, trace_table

    if not as_json:
        typer.echo(
            f"# first {max_jobs:,} jobs of each trace; {fit_seeds} fit(s) x {seeds} seed(s); "
            f"sequence {sequence_epochs} epochs; targets: EASY bsld within 20%, hour-of-day "
            "TV <= 0.05"
        )
        typer.echo(HEADER)

    def show(row: TraceRow) -> None:
        if not as_json:
            typer.echo(row_line(row))  # each row as it comes: a trace takes minutes

    try:
        rows = trace_table(
            traces,
            models,
            seeds=seeds,
            fit_seeds=fit_seeds,
            max_jobs=max_jobs,
            sequence_epochs=sequence_epochs,
            tvae_epochs=tvae_epochs,
            report=report,
            on_row=show,
        )
    except RightsizeError as error:
        fail(error, as_json)
    if as_json:
        emit([r.model_dump() for r in rows], as_json, lambda: None)


@app.command("schedulers")
def schedulers_command(
    trace: Path | None = typer.Option(
        None, "--trace", help="Real SWF trace (default: SDSC-SP2 from the shared data)"
    ),
    split: float | None = typer.Option(None, "--split", help="Training share (default 0.7)"),
    seeds: int | None = typer.Option(None, "--seeds", help="Seeds per source (default 3)"),
    first_seed: int | None = typer.Option(None, "--first-seed", help="Default 0"),
    windows: str | None = typer.Option(
        None,
        "--windows",
        help="Held-out sequences of 1,024 jobs at fixed random places, or 'all' (default): "
        "the held-out part cut into consecutive sequences",
    ),
    sources: str | None = typer.Option(
        None, "--sources", help="real, synthetic or both, comma-separated (default both)"
    ),
    ppo_epochs: int | None = typer.Option(None, "--ppo-epochs", help="Default 20"),
    trajectories: int | None = typer.Option(
        None, "--trajectories", help="PPO training sequences per epoch"
    ),
    updates: int | None = typer.Option(None, "--updates", help="PPO steps per epoch's batch"),
    learning_rate: float | None = typer.Option(None, "--learning-rate"),
    entropy: float | None = typer.Option(None, "--entropy"),
    baseline: str | None = typer.Option(
        None, "--baseline", help="SJF, F1, FCFS or none: what PPO's reward is relative to"
    ),
    imitate: str | None = typer.Option(
        None,
        "--imitate",
        help="SJF, F1, FCFS or none: PPO starts from a clone of this heuristic instead "
        "('none': random weights)",
    ),
    residual: str | None = typer.Option(
        None,
        "--residual",
        help="SJF, FCFS or none: PPO starts as this heuristic exactly and learns a "
        "correction (default SJF unless --imitate)",
    ),
    validation_share: float | None = typer.Option(
        None,
        "--validation-share",
        help="Share of each training source's last jobs PPO validates on, never trains on "
        "(default 0.2)",
    ),
    cem_generations: int | None = typer.Option(
        None, "--cem-generations", help="0: no learned priority (default 10)"
    ),
    generator_epochs: int | None = typer.Option(None, "--generator-epochs", help="Default 10"),
    generator_file: Path | None = typer.Option(
        None, "--generator-file", help="Sequence model to load, or to fit once and save"
    ),
    fit_generator_once: bool = typer.Option(
        False, "--fit-generator-once", help="One sequence model (seed 0) for every seed"
    ),
    synthetic_jobs: int | None = typer.Option(
        None, "--synthetic-jobs", help="Jobs per synthetic trace (default: the training part's)"
    ),
    save_policies: Path | None = typer.Option(
        None, "--save-policies", help="Folder for the PPO networks' weights"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the table."),
) -> None:
    """Seed 003's question: PPO and the learned priority trained on a real trace and on
    the sequence model's synthetic one, on held-out real jobs, beside FCFS, SJF, F1 and
    EASY++ (minutes a seed: `rightsize -v synth schedulers` logs each result as it
    comes)."""
    from simulations.learned.rl_experiment import main

    given: dict[str, object] = {
        "--trace": trace,
        "--split": split,
        "--seeds": seeds,
        "--first-seed": first_seed,
        "--windows": windows,
        "--sources": sources,
        "--ppo-epochs": ppo_epochs,
        "--trajectories": trajectories,
        "--updates": updates,
        "--learning-rate": learning_rate,
        "--entropy": entropy,
        "--baseline": baseline,
        "--imitate": imitate,
        "--residual": residual,
        "--validation-share": validation_share,
        "--cem-generations": cem_generations,
        "--generator-epochs": generator_epochs,
        "--generator-file": generator_file,
        "--synthetic-jobs": synthetic_jobs,
        "--save-policies": save_policies,
    }
    # The experiment owns its defaults and checks: only what was given is passed on.
    argv = [part for flag, v in given.items() if v is not None for part in (flag, str(v))]
    argv += ["--fit-generator-once"] * fit_generator_once + ["--json"] * as_json
    try:
        code = main(argv, prog="rightsize synth schedulers")
    except RightsizeError as error:
        fail(error, as_json)
    if code:
        raise typer.Exit(code=code)
