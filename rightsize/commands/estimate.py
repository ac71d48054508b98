"""``rightsize estimate`` (a user's model file) and ``rightsize profile`` (sweeps, training).

    rightsize estimate --model-file FILE.py --model-class NAME --batch-size 32 [64 ...]
                       [--epochs 50] [--samples 20000] [--optimizer sgd|adam]
                       [--hardware local|all|SYSTEM[/PARTITION] ...] [--threads N]
                       [--gpu NAME ...] [--gpu-spec FILE.json ...]
                       [--input-shape C,H,W --num-classes K] [--json]
    rightsize profile sweep --out FILE.jsonl [--count N] [--seed S] [--threads 1 2] ...
    rightsize profile train [--dataset FILE.jsonl] [--out FOLDER]

Exit status: 0 with estimates, 2 on bad input (the file does not import or trace, the
class is not an nn.Module, a batch runs out of memory, non-positive epochs or samples);
on bad input nothing is written to the estimator registry.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.table import Table

from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail, fit_columns
from rightsize.settings import Settings
from rightsize.wiring import chain_config, knowledge_base, promoted_loader

if TYPE_CHECKING:
    from tools.estimators.gpu.promoted import ServingCorrection
    from tools.estimators.gpu.specs import GpuSpec
    from tools.profiling.profiler import ForkedCall

__all__ = ["estimate_command", "profile_app", "register"]

profile_app = typer.Typer(help="Profile DNN training (sweeps) and train the DNN estimators.")


def register(app: typer.Typer) -> None:
    """Add ``estimate`` and the ``profile`` sub-app to the root command."""
    app.command(
        "estimate", context_settings={"allow_extra_args": True, "ignore_unknown_options": False}
    )(estimate_command)
    app.add_typer(profile_app, name="profile")


def _batch_sizes(first: list[int], extra: list[str]) -> list[int]:
    sizes = list(first)
    for value in extra:
        try:
            sizes.append(int(value))
        except ValueError:
            raise InvalidInputError(
                "unexpected argument (batch sizes are integers)", field="--batch-size", value=value
            ) from None
    for size in sizes:
        if size <= 0:
            raise InvalidInputError("must be positive", field="--batch-size", value=size)
    return sorted(set(sizes))


def _shape(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InvalidInputError(
            "expected integers like 3,32,32", field="--input-shape", value=text
        ) from None


async def _register(settings: Settings, bundle: object, folder: Path) -> list[str]:
    from tools.estimators.cpu.answer import register as register_bundle
    from tools.estimators.cpu.bundle import EstimatorBundle

    assert isinstance(bundle, EstimatorBundle)
    async with knowledge_base(settings) as kb:
        return await register_bundle(kb, bundle, folder)


def _table_row(row: dict[str, Any]) -> tuple[str, ...]:
    t, m, w = row["iteration_time_s"] or {}, row["peak_memory_mb"], row["run_s"]
    return (
        _hardware(row),
        str(row["batch_size"]),
        f"{t['p50']:.4g} ({t['p10']:.3g}-{t['p90']:.3g})" if t else "-",
        f"{m['p50']:.0f} MB ({m['p10']:.0f}-{m['p90']:.0f})",
        f"{w['p50'] / 3600:.2f} h ({w['p10'] / 3600:.2f}-{w['p90'] / 3600:.2f})",
        "yes" if row["fits"] else "no",
        _short(str(row["estimator"])),
    )


def _hardware(row: dict[str, Any]) -> str:
    system, partition = str(row["system"]), str(row["partition"])
    return partition if system in ("local", "gpu") else f"{system}/{partition}"


def _render(estimates: list[dict[str, Any]], refused: list[str]) -> None:
    table = Table(title="Estimated training (p50, with p10-p90)")
    for column in ("hardware", "batch", "s/iteration", "peak memory", "run", "fits", "by"):
        table.add_column(column)
    for row in estimates:
        table.add_row(*_table_row(row))
    wraps = ("run", "peak memory", "s/iteration", "batch", "fits")
    cells = ("run", "peak memory", "s/iteration")  # a figure, then its interval
    if fit_columns(table, console.width, wraps, wrap_cells=cells) > 0:
        table.columns.pop()  # too narrow for the "by" column: the lines below say it
        fit_columns(table, console.width, wraps, wrap_cells=cells)
    console.print(table)
    used: dict[str, list[str]] = {}
    for row in estimates:
        used.setdefault(str(row["estimator"]), []).append(_hardware(row))
    for name, where in sorted(used.items()):
        options = ", ".join(dict.fromkeys(where))
        console.print(f"estimator: {name} ({options})", highlight=False, soft_wrap=True)
    _footer(refused)


def _footer(refused: list[str]) -> None:
    for reason in refused:
        console.print(f"[yellow]no estimate[/] {reason}", highlight=False, soft_wrap=True)
    console.print(
        "[dim]peak memory: per GPU on GPUs; on CPUs the training process's host memory "
        "(trained CPU estimators: training above `import torch`, plus 230 MB for it); "
        "run = iterations x time + start-up (10/30/120 s at p10/p50/p90)[/]",
        highlight=False,
    )


COMPACT_OVER_ROWS = 12  # more rows than this: the best option per system, unless --details


def _render_compact(estimates: list[dict[str, Any]], refused: list[str]) -> None:
    """The best option of each system (shortest p50 run among those that fit)."""
    systems: dict[str, list[dict[str, Any]]] = {}
    for row in estimates:
        systems.setdefault(str(row["system"]), []).append(row)
    table = Table(
        title=f"Best option per system ({len(estimates)} estimates; --details for all)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("system", "best option", "batch", "run p50", "peak memory", "fit"):
        table.add_column(column)
    for name, rows in systems.items():
        fitting = [r for r in rows if r["fits"]]
        best = min(fitting or rows, key=lambda row: float(row["run_s"]["p50"]))
        table.add_row(
            name,
            str(best["partition"]),
            str(best["batch_size"]),
            f"{best['run_s']['p50'] / 3600:.2f} h",
            f"{best['peak_memory_mb']['p50']:.0f} MB",
            f"{len(fitting)} of {len(rows)}",
        )
    wraps = ("peak memory", "run p50", "fit")
    fit_columns(table, console.width, wraps, wrap_cells=wraps)
    console.print(table)
    console.print(
        "[dim]fit: options whose memory fits the hardware; --json or --details for every "
        "option and batch size[/]",
        highlight=False,
    )
    _footer(refused)


def _short(estimator: str) -> str:
    """``dnn-hybrid-iteration_s-3fa2, dnn-blackbox-peak_memory_mb-3fa2`` -> kinds only."""
    kinds = []
    for part in estimator.split(", "):
        pieces = part.split("-")
        kinds.append("-".join(pieces[:2]) if part.startswith("dnn-") else part)
    return ", ".join(dict.fromkeys(kinds))


def estimate_command(
    ctx: typer.Context,
    model_file: Path = typer.Option(..., "--model-file", help="Python file with the model"),
    model_class: str = typer.Option(..., "--model-class", help="nn.Module subclass in it"),
    batch_size: list[int] = typer.Option(..., "--batch-size", help="Batch size(s): 32 64 ..."),
    epochs: int = typer.Option(50, "--epochs"),
    samples: int = typer.Option(20000, "--samples", help="Training samples per epoch"),
    optimizer: str = typer.Option("sgd", "--optimizer", help="sgd or adam"),
    hardware: list[str] = typer.Option(
        [], "--hardware", help="local (default), all, SYSTEM or SYSTEM/PARTITION (repeatable)"
    ),
    gpu: list[str] = typer.Option(
        [],
        "--gpu",
        help="A GPU of the catalog, or a datasheet GPU no partition has (L4, H100 SXM, T4); "
        "a name several GPUs share is refused with all of them (repeatable)",
    ),
    gpu_spec: list[Path] = typer.Option(
        [], "--gpu-spec", help="A GPU's specs in NeuSight's device-config keys (repeatable)"
    ),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads (local)"),
    input_shape: str | None = typer.Option(None, "--input-shape", help="C,H,W of one sample"),
    num_classes: int | None = typer.Option(None, "--num-classes"),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    details: bool = typer.Option(
        False, "--details", help="Every option and batch size (default: best per system)"
    ),
    calibrate: bool = typer.Option(
        False,
        "--calibrate",
        help="Calibrate this host first where it has no calibration yet (`rightsize profile "
        "calibrate`, about 2 minutes, with a progress bar)",
    ),
    calibrate_limit: int | None = typer.Option(None, "--calibrate-limit", min=1, hidden=True),
) -> None:
    """Estimate time per iteration, peak memory and run time of your own model file.

    Every option is answered by the planner's estimator chain (``rightsize plan`` gives
    the same numbers for the same option); ``--gpu-spec`` files by the per-operator GPU
    model directly (no partition or catalog GPU stands for them)."""
    settings = Settings()
    refused: list[str] = []
    try:
        sizes = _batch_sizes(batch_size, list(ctx.args))
        if epochs <= 0:
            raise InvalidInputError("must be positive", field="--epochs", value=epochs)
        if samples <= 0:
            raise InvalidInputError("must be positive", field="--samples", value=samples)
        if optimizer not in {"sgd", "adam"}:
            raise InvalidInputError("must be sgd or adam", field="--optimizer", value=optimizer)
        if threads is not None and threads <= 0:
            raise InvalidInputError("must be positive", field="--threads", value=threads)
        from tools.planning.doors import ModelFileRequest

        hardware = hardware or ([] if gpu or gpu_spec else ["local"])
        request = ModelFileRequest(
            model_file=model_file,
            model_class=model_class,
            batch_sizes=sizes,
            epochs=epochs,
            samples=samples,
            optimizer=optimizer,
            hardware=hardware,
            gpus=gpu,
            threads=threads or 1,
            input_shape=_shape(input_shape) or [],
            num_classes=num_classes,
        )
        spec_targets = _spec_targets(gpu_spec)  # a bad spec file before the model loads
        if calibrate and any(h in ("local", "all") for h in hardware):
            _calibrate_if_needed(settings, request.threads, calibrate_limit, quiet=as_json)
        rows: list[dict[str, Any]] = []
        if hardware or gpu:
            # The smoke step's first child runs beside the estimates (forked before
            # they start any thread); read before anything is registered.
            smoke = _Smoke(request) if any(h in ("local", "all") for h in hardware) else None
            try:
                answers, refused, chain = asyncio.run(_answers(settings, request))
                if smoke is not None:
                    smoke.check()
            finally:
                if smoke is not None:
                    smoke.cancel()
            if any(a.gpus_per_node == 0 for a in answers):
                asyncio.run(_register_cpu_models(settings, chain))
            rows = [a.model_dump(mode="json") for a in answers]
        rows += _spec_rows(settings, request, spec_targets)
    except InvalidInputError as error:
        fail(_as_flags(error), as_json)
    except RightsizeError as error:
        fail(error, as_json)
    compact = len(rows) > COMPACT_OVER_ROWS and not details
    emit(
        {"estimates": rows, "no_estimate": refused},
        as_json,
        lambda: (_render_compact if compact else _render)(rows, refused),
    )


# The request's fields (``tools.planning.doors``, the planner's workload) as flags.
_FLAGS = {
    "workload.model": "--model-file",
    "workload.model_class": "--model-class",
    "workload.input_shape": "--input-shape",
    "workload.model_params.num_classes": "--num-classes",
    "hardware": "--hardware",
    "gpus": "--gpu",
}


def _as_flags(error: InvalidInputError) -> InvalidInputError:
    """The error naming the command's flag instead of the request's field."""
    flag = _FLAGS.get(error.field or "")
    if flag is None:
        return error
    reason = error.reason
    for name in sorted(_FLAGS, key=len, reverse=True):  # workload.model_params before .model
        reason = reason.replace(name, _FLAGS[name])
    return InvalidInputError(reason, source=error.source, field=flag, value=error.value)


async def _answers(settings: Settings, request: Any) -> tuple[list[Any], list[str], Any]:
    """Every option's answer from the process's estimator chain (``tools.planning.doors``)."""
    import torch  # noqa: F401  (torch sets its loggers' levels when it loads)

    from tools.planning.doors import estimate_model_file
    from tools.planning.service import shared_chain

    # A model that does not trace is one line naming it, not torch's logged traceback.
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    async with knowledge_base(settings) as kb:
        catalog = await kb.get_catalog()
        chain = shared_chain(kb, config=chain_config(settings), promoted=promoted_loader)
        answers, refused = await estimate_model_file(request, chain, catalog)
        return answers, refused, chain


async def _register_cpu_models(settings: Settings, chain: Any) -> None:
    """The CPU estimators that answered go in the registry (HARP's), once."""
    from tools.estimators.cpu.answer import register

    bundle, _, _, _ = chain.cpu_models.get()
    if bundle is not None:
        async with knowledge_base(settings) as kb:
            await register(kb, bundle, chain.cpu_models.bundle_folder)


class _Smoke:
    """``--hardware local``: one real training step per batch size, each in a
    memory-capped child (``cpu.answer.start_smoke_step``). The first child starts before
    the estimates and runs beside them on the machine's other core; ``check`` reads it
    and runs the rest. A batch that does not fit this machine, or a step that fails, is
    bad input."""

    def __init__(self, request: Any) -> None:
        from tools.estimators.cpu.answer import start_smoke_step
        from tools.estimators.model_file import load_user_model

        self.request = request
        self.user = load_user_model(
            request.model_file,
            request.model_class,
            input_shape=request.input_shape or None,
            num_classes=request.num_classes,
        )
        # Tracing the model (fake tensors) and the child's optimizer both import
        # torch._dynamo: once here, before the fork, so the child inherits it.
        import torch._dynamo  # noqa: F401

        first = request.batch_sizes[0]
        self.running: ForkedCall | None = start_smoke_step(self.user, first, request.optimizer)

    def check(self) -> None:
        from tools.estimators.cpu.answer import smoke_outcome, smoke_step

        request = self.request
        running, self.running = self.running, None
        for size in request.batch_sizes:
            if running is not None:  # the first batch size's child, started in __init__
                result = smoke_outcome(running)
                running = None
            else:
                result = smoke_step(self.user, size, request.optimizer)
            _refuse_failed_step(request, size, result)

    def cancel(self) -> None:
        if self.running is not None:
            self.running.cancel()
            self.running = None


def _refuse_failed_step(request: Any, size: int, result: dict[str, object]) -> None:
    status = result.get("status")
    if status == "out_of_memory":
        raise InvalidInputError(
            f"one training step runs out of memory on this machine "
            f"({result.get('error', '')})".rstrip(" ()"),
            source=str(request.model_file),
            field="--batch-size",
            value=size,
        )
    if status == "crashed":
        raise InvalidInputError(
            f"one training step fails: {result.get('error', '')}",
            source=str(request.model_file),
            field="--model-class",
            value=request.model_class,
        )


async def _gpu_correction(settings: Settings) -> ServingCorrection | None:
    """The promoted per-GPU correction, from the owner the planner's chain asks."""
    from tools.planning.service import shared_chain

    async with knowledge_base(settings) as kb:
        return await shared_chain(kb, config=chain_config(settings)).serving_gpu_correction()


def _spec_targets(spec_files: list[Path]) -> list[GpuSpec]:
    """The GPUs ``--gpu-spec`` files describe (a bad file: an InvalidInputError naming it)."""
    from tools.estimators.gpu.specs import load_spec_file

    return [load_spec_file(path) for path in spec_files]


def _spec_rows(settings: Settings, request: Any, targets: list[GpuSpec]) -> list[dict[str, Any]]:
    """``--gpu-spec`` answers from the per-operator GPU model (issue #16), as answers."""
    if not targets:
        return []
    from tools.estimators.gpu.answer import gpu_option_estimates
    from tools.estimators.model_file import load_user_model
    from tools.planning.answer import AnswerBasis, OptionAnswer, Quantiles

    user = load_user_model(
        request.model_file,
        request.model_class,
        input_shape=request.input_shape or None,
        num_classes=request.num_classes,
    )
    # The same answer as the planner's for the same GPU: the center's promoted correction
    # applies here too.
    correction = asyncio.run(_gpu_correction(settings))
    rows = gpu_option_estimates(
        lambda size: user.task(size, meta=True),
        {size: {} for size in request.batch_sizes},
        targets,
        epochs=request.epochs,
        samples=request.samples,
        optimizer=request.optimizer,
        correction=correction,
    )
    answers = []
    for row in rows:
        memory = row.peak_memory_mb
        answers.append(
            OptionAnswer(
                system="gpu",
                partition=row.hardware,
                nodes=1,
                gpus_per_node=1,
                batch_size=row.batch_size,
                iteration_time_s=Quantiles(**row.iteration_time_s.model_dump()),
                peak_memory_mb=Quantiles.around(memory.p10, memory.p50, memory.p90),
                run_s=Quantiles(**row.walltime_s.model_dump()),
                estimator=row.estimator,
                coverage_basis=AnswerBasis(interval="held_out"),
                fits=row.fits,
                validation_error=row.validation_mape,
                note=row.note,
            ).model_dump(mode="json")
        )
    return answers


@profile_app.command("calibrate")
def calibrate_command(
    threads: list[int] = typer.Option([1, 2], "--threads", help="Thread counts (repeatable)"),
    limit: int | None = typer.Option(
        None, "--limit", min=1, help="At most this many zoo steps a thread count"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a report."),
) -> None:
    """Calibrate the per-operator CPU model on this host: time the shipped sweep's zoo
    steps here (about 2 minutes; a run cut short resumes) and refit its step law."""
    settings = Settings()
    try:
        model, folder, here = _calibrate_here(settings, threads, limit, quiet=as_json)
    except RightsizeError as error:
        fail(error, as_json)
    calibration = model.meta["host_calibration"]
    report = {
        "folder": str(folder),
        "estimator": model.estimator_id,
        "host": {k: here[k] for k in ("cpu_model", "cpu_isa", "cpu_cores")},
        "steps": calibration["steps"],
        "zoo_family_out_mape": calibration["zoo_family_out_mape"],
        "step_law": {"before": calibration["shipped_step"], "after": model.step},
        "interval_log_q10_q90": [model.log_q10, model.log_q90],
    }
    emit(report, as_json, lambda: console.print_json(data=report))


def _calibrate_if_needed(
    settings: Settings, threads: int, limit: int | None, *, quiet: bool
) -> None:
    """``estimate --calibrate``: calibrate this host at ``threads`` unless a calibration
    saved here already has that thread count's step law."""
    from tools.estimators.cpu.answer import load_host_opcost

    found = load_host_opcost(settings.home)
    timed = (found.meta.get("host_calibration") or {}).get("steps", {}) if found else {}
    if timed.get(f"t{threads}"):
        return
    _calibrate_here(settings, [threads], limit, quiet=quiet)


def _calibrate_here(
    settings: Settings, threads: list[int], limit: int | None, *, quiet: bool
) -> tuple[Any, Path, dict[str, Any]]:
    """Time the shipped sweep's zoo steps on this host (a progress bar unless ``quiet``;
    a run cut short resumes) and save the per-operator CPU model refitted on them: the
    model, its folder and this host's descriptors."""
    from tools.estimators.cpu.answer import load_opcost
    from tools.estimators.cpu.host_calibration import (
        calibrate,
        calibrated_dir,
        save_calibrated,
        time_zoo_steps,
        zoo_items,
    )
    from tools.profiling.profiler import hardware_descriptors

    shipped = load_opcost(settings.cpu_opcost)
    if shipped is None:
        raise InvalidInputError("no per-operator CPU model to calibrate", field="model")
    unknown = sorted(set(threads) - set(shipped.threads))
    if unknown:
        raise InvalidInputError(
            f"the model has step laws for {shipped.threads} thread(s) only",
            field="--threads",
            value=", ".join(str(t) for t in unknown),
        )
    here = hardware_descriptors(1)
    folder = calibrated_dir(settings.home, str(here["cpu_model"]), str(here["cpu_isa"]))
    items, geometry = zoo_items()
    wanted = [i for i in items if int(i["threads"]) in threads]
    total = len(wanted) if limit is None else limit * len(threads)
    if not quiet:
        console.print(
            f"timing up to {total} zoo steps on {here['cpu_model']} ({here['cpu_isa']}) "
            f"into {folder / 'steps.jsonl'}",
            highlight=False,
        )
    from rightsize.progress import progress

    with progress("timing zoo steps", total=total, quiet=quiet) as bar:
        timed = time_zoo_steps(
            wanted,
            folder / "steps.jsonl",
            threads=threads,
            limit=limit,
            progress=lambda _item, _seconds: bar.advance(),
        )
    provenance = {
        **here,
        "threads": sorted(threads),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "command": "rightsize profile calibrate",
    }
    model = calibrate(shipped, wanted, timed, geometry, provenance)
    save_calibrated(model, folder)
    return model, folder, here


@profile_app.command("sweep")
def sweep_command(
    out: Path = typer.Option(Path("data/dnn_profiles/cpu_sweep.jsonl"), "--out"),
    count: int = typer.Option(2600, "--count", min=1, help="Configurations to plan"),
    seed: int = typer.Option(0, "--seed"),
    families: list[str] | None = typer.Option(None, "--family", help="Only these (repeatable)"),
    threads: list[int] = typer.Option([1, 2], "--threads", help="Thread counts (repeatable)"),
    time_limit_s: float | None = typer.Option(None, "--time-limit-s"),
    as_json: bool = typer.Option(
        False, "--json", help="The sweep's output to stderr; a JSON summary on stdout."
    ),
) -> None:
    """Run (or resume) a profiling sweep into a JSONL dataset with provenance."""
    command = [
        sys.executable,
        "-m",
        "tools.profiling.sweep",
        "--out",
        str(out),
        "--count",
        str(count),
        "--seed",
        str(seed),
        "--threads",
        *[str(t) for t in threads],
    ]
    if families:
        command += ["--families", *families]
    if time_limit_s is not None:
        command += ["--time-limit-s", str(time_limit_s)]
    # OpenMP reads its wait policy when torch loads: hence a fresh interpreter.
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    if not as_json:
        raise typer.Exit(code=subprocess.call(command, env=env))
    code = subprocess.call(command, env=env, stdout=sys.stderr)
    rows = 0
    if out.is_file():
        with out.open("rb") as lines:
            rows = sum(1 for line in lines if line.strip())
    emit({"dataset": str(out), "rows": rows, "exit_code": code}, True, lambda: None)
    raise typer.Exit(code=code)


@profile_app.command("train")
def train_command(
    dataset: Path | None = typer.Option(None, "--dataset", help="Sweep JSONL (default: shipped)"),
    out: Path | None = typer.Option(
        None, "--out", help="Train afresh and save here (e.g. data/dnn_profiles/models)"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a report."),
) -> None:
    """Train (or load) the DNN estimators and register them in the knowledge base."""
    settings = Settings()
    try:
        from tools.estimators.cpu.answer import load_bundle, train_to
        from tools.estimators.cpu.paths import default_dataset_path

        if dataset is None and settings.dnn_profiles is not None:
            dataset = default_dataset_path(settings.dnn_profiles)
        if out is not None:
            bundle, folder = train_to(settings.home, out, dataset), out
        else:
            bundle, folder = load_bundle(settings.home, dataset, models=settings.dnn_models)
        ids = asyncio.run(_register(settings, bundle, folder))
    except RightsizeError as error:
        fail(error, as_json)
    report = {
        "folder": str(folder),
        "estimators": ids,
        "selected": bundle.meta.selected,
        "validation": {
            target: {kind: s.model_dump() for kind, s in kinds.items()}
            for target, kinds in bundle.meta.validation.items()
        },
    }
    emit(report, as_json, lambda: console.print_json(data=report))
