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
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich import box
from rich.table import Table

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError, RightsizeError
from rightsize.output import console, emit, fail
from rightsize.settings import Settings
from rightsize.wiring import knowledge_base

if TYPE_CHECKING:
    from tools.estimators.gpu.promoted import ServingCorrection
    from tools.estimators.gpu.specs import GpuSpec

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


async def _catalog(settings: Settings) -> Catalog:
    async with knowledge_base(settings) as kb:
        return await kb.get_catalog()


async def _register(settings: Settings, bundle: object, folder: Path) -> list[str]:
    from tools.estimators.dnn.bundle import EstimatorBundle
    from tools.estimators.dnn.service import register as register_bundle

    assert isinstance(bundle, EstimatorBundle)
    async with knowledge_base(settings) as kb:
        return await register_bundle(kb, bundle, folder)


def _render(estimates: list[dict[str, object]]) -> None:
    table = Table(title="Estimated training (p50, with p10-p90)")
    for column in ("hardware", "batch", "s/iteration", "peak memory", "walltime", "fits", "by"):
        table.add_column(column, overflow="fold")
    for row in estimates:
        t, m, w = row["iteration_time_s"], row["peak_memory_mb"], row["walltime_s"]
        assert isinstance(t, dict) and isinstance(m, dict) and isinstance(w, dict)
        table.add_row(
            str(row["hardware"]),
            str(row["batch_size"]),
            f"{t['p50']:.4g} ({t['p10']:.3g}-{t['p90']:.3g})",
            f"{m['p50']:.0f} MB ({m['p10']:.0f}-{m['p90']:.0f})",
            f"{w['p50'] / 3600:.2f} h ({w['p10'] / 3600:.2f}-{w['p90'] / 3600:.2f})",
            "yes" if row["fits"] else "no",
            _short(str(row["estimator"])),
        )
    console.print(table)
    for name in sorted({str(row["estimator"]) for row in estimates}):
        console.print(f"estimator: {name}", highlight=False, soft_wrap=True)
    console.print(
        "[dim]peak memory: training memory above the process's resident set after "
        "`import torch` (host) or on the GPU; walltime = iterations x time + start-up "
        "(10/30/120 s at p10/p50/p90)[/]",
        highlight=False,
    )


COMPACT_OVER_ROWS = 12  # more rows than this: the best option per system, unless --details


def _render_compact(estimates: list[dict[str, object]]) -> None:
    """The best option of each system (shortest p50 walltime among those that fit)."""
    systems: dict[str, list[dict[str, object]]] = {}
    for row in estimates:
        systems.setdefault(str(row["hardware"]).split("/")[0], []).append(row)
    table = Table(
        title=f"Best option per system ({len(estimates)} estimates; --details for all)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for column in ("system", "best option", "batch", "walltime p50", "peak memory", "fit"):
        table.add_column(column, overflow="fold")
    for name, rows in systems.items():
        fitting = [r for r in rows if r["fits"]]

        def walltime(row: dict[str, object]) -> float:
            value = row["walltime_s"]
            assert isinstance(value, dict)
            return float(value["p50"])

        best = min(fitting or rows, key=walltime)
        memory = best["peak_memory_mb"]
        assert isinstance(memory, dict)
        table.add_row(
            name,
            str(best["hardware"]).split("/", 1)[-1],
            str(best["batch_size"]),
            f"{walltime(best) / 3600:.2f} h",
            f"{memory['p50']:.0f} MB",
            f"{len(fitting)} of {len(rows)}",
        )
    console.print(table)
    console.print(
        "[dim]fit: options whose memory fits the hardware; walltime = iterations x time + "
        "start-up (10/30/120 s at p10/p50/p90); --json or --details for every option and "
        "batch size[/]",
        highlight=False,
    )


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
        help="A GPU model of the catalog's hardware table, or a datasheet GPU no partition "
        "has (L4, H100 SXM, T4) (repeatable)",
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
) -> None:
    """Estimate time per iteration, peak memory and walltime of your own model file."""
    settings = Settings()
    try:
        from tools.estimators.dnn.dataset import graph_data
        from tools.estimators.dnn.service import (
            estimate,
            hardware_options,
            load_bundle,
            load_host_opcost,
            load_opcost,
            smoke_step,
        )
        from tools.estimators.dnn.usermodel import load_user_model

        sizes = _batch_sizes(batch_size, list(ctx.args))
        if epochs <= 0:
            raise InvalidInputError("must be positive", field="--epochs", value=epochs)
        if samples <= 0:
            raise InvalidInputError("must be positive", field="--samples", value=samples)
        if optimizer not in {"sgd", "adam"}:
            raise InvalidInputError("must be sgd or adam", field="--optimizer", value=optimizer)
        if threads is not None and threads <= 0:
            raise InvalidInputError("must be positive", field="--threads", value=threads)
        # Everything about the input is checked before anything is trained or registered,
        # the GPUs asked for before the model file is loaded.
        hardware = hardware or ([] if gpu or gpu_spec else ["local"])
        needs_catalog = bool(gpu) or any(h != "local" for h in hardware)
        catalog = asyncio.run(_catalog(settings)) if needs_catalog else None
        targets = _gpu_targets(gpu, gpu_spec, catalog)
        user = load_user_model(
            model_file, model_class, input_shape=_shape(input_shape), num_classes=num_classes
        )
        # The GPU answers first: their fake-tensor trace names the operator a model
        # fails on; the CPU estimators' op graph is built only when they are asked.
        gpu_rows = _gpu_rows(settings, user, sizes, targets, epochs, samples, optimizer)
        graphs = {size: graph_data(user.graph(size)) for size in sizes} if hardware else {}
        options = hardware_options(hardware, catalog, threads)
        if any(o.local for o in options):
            for size in sizes:
                result = smoke_step(user, size, optimizer, threads or 1)
                status = result.get("status")
                if status == "out_of_memory":
                    raise InvalidInputError(
                        f"one training step runs out of memory on this machine "
                        f"({result.get('error', '')})".rstrip(" ()"),
                        source=str(model_file),
                        field="--batch-size",
                        value=size,
                    )
                if status == "crashed":
                    raise InvalidInputError(
                        f"one training step fails: {result.get('error', '')}",
                        source=str(model_file),
                        field="--model-class",
                        value=model_class,
                    )
        estimates = []
        if options:
            bundle, folder = load_bundle(settings.home)
            ids = asyncio.run(_register(settings, bundle, folder))
            chosen = {
                target: next((i for i in ids if f"-{kind}-{target}-" in i), kind)
                for target, kind in bundle.meta.selected.items()
            }
            estimates = estimate(
                graphs,
                epochs=epochs,
                samples=samples,
                optimizer=optimizer,
                options=options,
                bundle=bundle,
                bundle_ids=chosen,
                opcost=load_opcost(),
                host_opcost=load_host_opcost(settings.home),
            )
    except RightsizeError as error:
        fail(error, as_json)
    rows = [e.model_dump(mode="json") for e in estimates] + gpu_rows
    compact = len(rows) > COMPACT_OVER_ROWS and not details
    emit({"estimates": rows}, as_json, lambda: (_render_compact if compact else _render)(rows))


async def _gpu_correction(settings: Settings) -> ServingCorrection | None:
    """The promoted per-GPU correction, from the owner the planner's chain asks."""
    from tools.planning.service import shared_chain

    async with knowledge_base(settings) as kb:
        return await shared_chain(kb).serving_gpu_correction()


def _gpu_targets(
    names: list[str], spec_files: list[Path], catalog: Catalog | None
) -> list[GpuSpec]:
    """The GPUs ``--gpu`` / ``--gpu-spec`` ask about (an unknown name or a bad file: an
    InvalidInputError naming it)."""
    if not names and not spec_files:
        return []
    from tools.estimators.gpu.answer import gpu_targets

    return gpu_targets(names, spec_files, catalog)


def _gpu_rows(
    settings: Settings,
    user: object,
    sizes: list[int],
    targets: list[GpuSpec],
    epochs: int,
    samples: int,
    optimizer: str,
) -> list[dict[str, object]]:
    """``--gpu`` / ``--gpu-spec`` answers from the per-operator GPU model (issue #16)."""
    if not targets:
        return []
    from tools.estimators.dnn.usermodel import UserModel
    from tools.estimators.gpu.answer import gpu_option_estimates

    assert isinstance(user, UserModel)
    # The same answer as the planner's for the same GPU: the center's promoted correction
    # applies here too (each entry's ``correction`` says so).
    correction = asyncio.run(_gpu_correction(settings))
    rows = gpu_option_estimates(
        lambda size: user.task(size, meta=True),
        {size: {} for size in sizes},
        targets,
        epochs=epochs,
        samples=samples,
        optimizer=optimizer,
        correction=correction,
    )
    return [row.model_dump(mode="json") for row in rows]


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
        from tools.estimators.dnn.host_calibration import (
            calibrate,
            calibrated_dir,
            save_calibrated,
            time_zoo_steps,
            zoo_items,
        )
        from tools.estimators.dnn.service import load_opcost
        from tools.profiling.profiler import hardware_descriptors

        shipped = load_opcost()
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
        console.print(
            f"timing up to {len(wanted) if limit is None else limit * len(threads)} zoo steps "
            f"on {here['cpu_model']} ({here['cpu_isa']}) into {folder / 'steps.jsonl'}",
            highlight=False,
        )
        from rightsize.progress import progress

        total = len(wanted) if limit is None else limit * len(threads)
        with progress("timing zoo steps", total=total, quiet=as_json) as bar:
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
        from tools.estimators.dnn.service import load_bundle, train_to

        if out is not None:
            bundle, folder = train_to(settings.home, out, dataset), out
        else:
            bundle, folder = load_bundle(settings.home, dataset)
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
