"""``rightsize catalog``: list, show, import and export the center catalog."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.table import Table

from knowledge_base.catalog import Catalog, ChargeBasis, Partition, System
from knowledge_base.errors import InvalidInputError, RightsizeError
from knowledge_base.importers._errors import load_json
from knowledge_base.importers.hardware import read_hardware
from knowledge_base.importers.merge import KNOWN_CENTERS, merge_partitions
from knowledge_base.importers.queue_limits import export_queue_limits, read_queue_limits
from knowledge_base.importers.tapis import export_tapis_system, read_tapis_system
from knowledge_base.seed import load_seed_catalog, system_from_hardware
from knowledge_base.store import KnowledgeBase
from rightsize.output import console, emit, fail
from rightsize.progress import progress
from rightsize.settings import Settings
from rightsize.wiring import knowledge_base
from tools.actuators.slurm_catalog import import_slurm_system
from tools.actuators.slurm_commands import SlurmCommands

app = typer.Typer(help="The center catalog: systems, partitions, node types, charges.")
import_app = typer.Typer(help="Import systems and queue limits into the catalog.")
app.add_typer(import_app, name="import")

T = TypeVar("T")
JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of tables.")


def _with_kb(action: Callable[[KnowledgeBase], Awaitable[T]], as_json: bool = False) -> T:
    async def run() -> T:
        async with knowledge_base(Settings()) as kb:
            return await action(kb)

    try:
        return asyncio.run(run())
    except RightsizeError as error:
        fail(error, as_json)


def _hours(minutes: int) -> str:
    return f"{minutes / 60:g} h"


def _charge_label(partition: Partition) -> str:
    charge = partition.charge
    if charge is None:
        return "unpublished"
    if charge.basis is ChargeBasis.NODE_HOUR:
        return f"{charge.rate:g} {charge.unit}/node-h"
    return "core-h + GPU-h" if charge.gpu_hour_rate else "core-h"


def _gpu_label(system: System, partition_name: str) -> str:
    partition = system.partition(partition_name)
    node_type = system.node_type_of(partition)
    if not partition.gpus_per_node:
        return "-"
    model = node_type.gpu.model if node_type is not None and node_type.gpu else "gpu"
    return f"{partition.gpus_per_node} x {model}"


@app.command("list")
def list_systems(as_json: bool = JSON_OPTION) -> None:
    """Every system with its partitions and limits."""
    catalog: Catalog = _with_kb(lambda kb: kb.get_catalog(), as_json)

    def render() -> None:
        table = Table(
            title=f"{len(catalog.systems)} systems, "
            f"{sum(len(s.partitions) for s in catalog.systems)} partitions"
        )
        for column in (
            "system",
            "center",
            "partitions",
            "node types",
            "GPU partitions",
            "longest walltime",
            "largest job (nodes)",
        ):
            table.add_column(column)
        for s in catalog.systems:
            table.add_row(
                s.name,
                s.center,
                str(len(s.partitions)),
                str(len(s.node_types)),
                str(sum(1 for p in s.partitions if p.gpus_per_node)),
                _hours(max((p.max_minutes for p in s.partitions), default=0)),
                str(max((p.max_nodes for p in s.partitions), default=0)),
            )
        console.print(table)

    emit(catalog, as_json, render)


@app.command("show")
def show_system(
    system: str = typer.Argument(..., help="System name, e.g. pitzer"),
    as_json: bool = JSON_OPTION,
) -> None:
    """One system: node types, partitions, limits and charges."""
    found: System = _with_kb(lambda kb: kb.get_system(system), as_json)

    def render() -> None:
        console.print(
            f"[bold]{found.name}[/] ({found.center}, {found.scheduler})"
            + (f" {found.host}" if found.host else "")
        )
        nodes = Table(title="node types")
        for column in ("name", "count", "cores", "memory", "GPUs", "GPU memory"):
            nodes.add_column(column)
        for n in found.node_types:
            nodes.add_row(
                n.name,
                "?" if n.count is None else str(n.count),
                "?" if n.cores is None else str(n.cores),
                "?" if n.memory_mb is None else f"{n.memory_mb / 1024:g} GB",
                "?" if n.gpus is None else str(n.gpus),
                f"{n.gpu.memory_mb / 1024:g} GB" if n.gpu and n.gpu.memory_mb else "-",
            )
        console.print(nodes)
        parts = Table(title="partitions")
        for column in (
            "name",
            "node type",
            "nodes",
            "cores/node",
            "memory/node",
            "walltime",
            "GPUs/node",
            "charge",
        ):
            parts.add_column(column)
        for p in found.partitions:
            charge = _charge_label(p)
            parts.add_row(
                p.name,
                p.node_type or "?",
                f"{p.min_nodes}-{p.max_nodes}",
                f"{p.min_cores_per_node}-{p.max_cores_per_node}",
                f"{p.max_memory_mb / 1024:.0f} GB",
                _hours(p.max_minutes),
                _gpu_label(found, p.name),
                charge,
            )
        console.print(parts)

    emit(found, as_json, render)


def _summary(before: Catalog, after: Catalog, source: str, as_json: bool) -> None:
    changed = [s for s in after.systems if s not in before.systems]
    body = {
        "source": source,
        "systems": [{"name": s.name, "partitions": len(s.partitions)} for s in changed],
        "total_systems": len(after.systems),
        "total_partitions": sum(len(s.partitions) for s in after.systems),
    }
    emit(
        body,
        as_json,
        lambda: console.print(
            f"imported {source}: "
            + (
                ", ".join(f"{s.name} ({len(s.partitions)} partitions)" for s in changed)
                or "no changes"
            )
            + f"; catalog now has {body['total_systems']} systems, "
            f"{body['total_partitions']} partitions"
        ),
    )


def _apply(build: Callable[[Catalog], Catalog], source: str, as_json: bool) -> None:
    """Build the whole new catalog first, then store it in one write."""

    async def action(kb: KnowledgeBase) -> tuple[Catalog, Catalog]:
        before = await kb.get_catalog()
        after = build(before)
        await kb.put_catalog(after)
        return before, after

    with progress("storing the catalog", quiet=as_json):
        before, after = _with_kb(action, as_json)
    _summary(before, after, source, as_json)


@import_app.command("tapis")
def import_tapis(
    files: list[Path] = typer.Argument(..., help="Tapis v3 system JSON files"),
    name: str | None = typer.Option(None, help="System name (default: id, else host)"),
    center: str | None = typer.Option(None, help="Center, when the system is not a known one"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Partitions from Tapis v3 system definitions (batchLogicalQueues)."""
    if name is not None and len(files) > 1:
        fail(InvalidInputError("--name applies to one file only", field="--name", value=name))
    try:
        with progress("reading Tapis systems", total=len(files), quiet=as_json) as steps:
            systems = []
            for f in files:
                systems.append(read_tapis_system(f, name=name, center=center))
                steps.advance()
    except RightsizeError as error:
        fail(error, as_json)
    seen: dict[str, Path] = {}
    for file, system in zip(files, systems, strict=True):
        if system.name in seen:
            fail(
                InvalidInputError(
                    f"duplicate system: also defined by {seen[system.name]}",
                    source=str(file),
                    field="id",
                    value=system.name,
                ),
                as_json,
            )
        seen[system.name] = file

    def build(catalog: Catalog) -> Catalog:
        imported = {s.name: s.partitions for s in systems}
        merged = merge_partitions(
            catalog, imported, source=", ".join(map(str, files)), center=center
        )
        for system in systems:
            current = merged.system(system.name)
            merged = merged.with_system(
                current.model_copy(
                    update={
                        "host": system.host or current.host,
                        "max_jobs": system.max_jobs or current.max_jobs,
                        "max_jobs_per_user": system.max_jobs_per_user or current.max_jobs_per_user,
                        "default_partition": system.default_partition or current.default_partition,
                    }
                )
            )
        return merged

    _apply(build, ", ".join(map(str, files)), as_json)


@import_app.command("queues")
def import_queues(
    file: Path = typer.Argument(..., help="queue_limits.json-style list of queue documents"),
    center: str | None = typer.Option(None, help="Center of systems not already known"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Queue limits (iScheduler format) over the catalog's partitions."""
    try:
        with progress(f"reading {file}", quiet=as_json):
            imported = read_queue_limits(file)
    except RightsizeError as error:
        fail(error, as_json)
    _apply(
        lambda c: merge_partitions(c, imported, source=str(file), center=center), str(file), as_json
    )


@import_app.command("slurm")
def import_slurm(
    name: str | None = typer.Option(
        None,
        help="Name for the cluster in the catalog (default: RIGHTSIZE_LOCAL_SYSTEM, 'local': "
        "the name `rightsize submit` and `center run` run its jobs under)",
    ),
    center: str = typer.Option("local", help="Center the cluster belongs to"),
    timeout_s: float = typer.Option(30.0, help="Timeout per SLURM command"),
    as_json: bool = JSON_OPTION,
) -> None:
    """The partitions and nodes of the SLURM cluster this machine's clients talk to."""
    local = Settings().local_system
    name = name or local
    if name != local and not as_json:
        # A plan for this name has no executor in the embedded center: say it now, not
        # when the Scheduler fails the plan ("no executor for system ...").
        console.print(
            f"note: the embedded center runs the local SLURM's jobs as {local!r} "
            f"(RIGHTSIZE_LOCAL_SYSTEM); plans for {name!r} run where a center has an "
            f"executor for it, or set RIGHTSIZE_LOCAL_SYSTEM={name}",
            highlight=False,
        )
    try:
        with progress("asking SLURM for its partitions and nodes", quiet=as_json):
            system = import_slurm_system(
                name, KNOWN_CENTERS.get(name, center), SlurmCommands(timeout_s=timeout_s)
            )
    except RightsizeError as error:
        fail(error, as_json)
    _apply(lambda c: c.with_system(system), f"slurm ({name})", as_json)


@import_app.command("hardware")
def import_hardware(
    file: Path = typer.Argument(..., help="hardware.json"),
    system: list[str] = typer.Option(..., "--system", help="System(s) to add, e.g. stampede3"),
    as_json: bool = JSON_OPTION,
) -> None:
    """A system from a hardware file alone (node types and its published queue table)."""
    try:
        with progress(f"reading {file}", quiet=as_json):
            hardware = read_hardware(file)
            systems = [system_from_hardware(hardware, name, str(file)) for name in system]
    except RightsizeError as error:
        fail(error, as_json)

    def build(catalog: Catalog) -> Catalog:
        for s in systems:
            catalog = catalog.with_system(s)
        return catalog

    _apply(build, str(file), as_json)


@import_app.command("catalog")
def import_catalog(
    file: Path = typer.Argument(..., help="A catalog JSON file from `catalog export`"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Replace the whole catalog with a native catalog file."""
    try:
        with progress(f"reading {file}", quiet=as_json):
            data: Any = load_json(file)
            catalog = _validate_catalog(data, str(file))
    except RightsizeError as error:
        fail(error, as_json)
    _apply(lambda _: catalog, str(file), as_json)


def _validate_catalog(data: Any, source: str) -> Catalog:
    from pydantic import ValidationError

    from knowledge_base.importers._errors import invalid

    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        raise invalid(exc, source) from exc


class ExportFormat(StrEnum):
    CATALOG = "catalog"
    QUEUES = "queues"
    TAPIS = "tapis"


@app.command("export")
def export(
    file: Path = typer.Argument(..., help="Where to write (a directory for --format tapis)"),
    fmt: ExportFormat = typer.Option(ExportFormat.CATALOG, "--format"),
    system: list[str] | None = typer.Option(None, "--system", help="Only these systems"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Write the catalog: native JSON, queue-limit documents, or Tapis system files."""
    catalog: Catalog = _with_kb(lambda kb: kb.get_catalog(), as_json)
    try:
        if system:
            catalog = Catalog(systems=[catalog.system(name) for name in system])
    except RightsizeError as error:
        fail(error, as_json)
    if fmt is ExportFormat.TAPIS:
        file.mkdir(parents=True, exist_ok=True)
        written = [file / f"{s.name}.json" for s in catalog.systems]
        for path, s in zip(written, catalog.systems, strict=True):
            _write(path, export_tapis_system(s))
    else:
        data: Any = (
            catalog.model_dump(mode="json")
            if fmt is ExportFormat.CATALOG
            else export_queue_limits(catalog)
        )
        written = [file]
        _write(file, data)
    files = [str(p) for p in written]
    partitions = sum(len(s.partitions) for s in catalog.systems)
    body = {
        "format": fmt.value,
        "files": files,
        "systems": len(catalog.systems),
        "partitions": partitions,
    }
    emit(
        body,
        as_json,
        lambda: console.print(
            f"wrote {fmt.value} ({len(catalog.systems)} systems, {partitions} partitions) "
            f"to {', '.join(files)}"
        ),
    )


def _write(path: Path, data: Any) -> None:
    # Write beside and rename, so a failed export never leaves half a file behind.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    partial.replace(path)


@app.command("seed")
def seed(as_json: bool = JSON_OPTION) -> None:
    """Reset the catalog to the one shipped with Rightsize (6 systems, 119 partitions)."""
    _apply(lambda _: load_seed_catalog(), "seeded catalog", as_json)
