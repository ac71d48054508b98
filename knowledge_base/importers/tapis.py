"""Tapis v3 system definitions (``GET /v3/systems/{id}``) to catalog systems, and back.

A Tapis tenant describes an execution system with ``batchLogicalQueues``: each logical
queue maps to a scheduler queue (``hpcQueueName``) with node, core, memory and minute
limits. Field names outside the Tapis schema are rejected, so a typo such as
``batchLogicalQueue`` is an error rather than a silently empty system. Template files
(HARP's, iScheduler's) use placeholders like ``$system_id_hpc`` for the id; then the
system is named after its host (``pitzer.osc.edu`` -> ``pitzer``) unless a name is given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, ValidationError

from knowledge_base.catalog import Partition, System
from knowledge_base.errors import InvalidInputError
from knowledge_base.importers._errors import invalid, load_json
from knowledge_base.importers.merge import KNOWN_CENTERS

__all__ = ["TapisSystem", "export_tapis_system", "parse_tapis_system", "read_tapis_system"]


def _tapis_bool(value: object) -> object:
    # Tapis templates in the wild write booleans as the strings "True"/"False".
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise ValueError(f"expected true or false, got {value!r}")
    return value


TapisBool = Annotated[bool, BeforeValidator(_tapis_bool)]


class TapisLogicalQueue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    hpcQueueName: str = Field(min_length=1)
    maxJobs: StrictInt = -1
    maxJobsPerUser: StrictInt = -1
    minNodeCount: StrictInt = Field(default=1, ge=0)
    maxNodeCount: StrictInt = Field(ge=1)
    minCoresPerNode: StrictInt = Field(default=1, ge=0)
    maxCoresPerNode: StrictInt = Field(ge=1)
    minMemoryMB: StrictInt = Field(default=0, ge=0)
    maxMemoryMB: StrictInt = Field(ge=0)
    minMinutes: StrictInt = Field(default=0, ge=0)
    maxMinutes: StrictInt = Field(ge=1)


class TapisSystem(BaseModel):
    """The Tapis v3 system document; fields Rightsize does not use are accepted and ignored."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    description: str | None = None
    systemType: str = "LINUX"
    owner: str | None = None
    host: str | None = None
    enabled: TapisBool = True
    effectiveUserId: str | None = None
    defaultAuthnMethod: str | None = None
    authnCredential: Any = None
    bucketName: str | None = None
    rootDir: str | None = None
    port: StrictInt | None = None
    useProxy: TapisBool = False
    proxyHost: str | None = None
    proxyPort: StrictInt | None = None
    dtnSystemId: str | None = None
    dtnMountPoint: str | None = None
    dtnMountSourcePath: str | None = None
    isDtn: TapisBool = False
    canExec: TapisBool = False
    canRunBatch: TapisBool = False
    enableCmdPrefix: TapisBool = False
    mpiCmd: str | None = None
    jobRuntimes: list[dict[str, Any]] | None = None
    jobWorkingDir: str | None = None
    jobEnvVariables: list[dict[str, Any]] | None = None
    jobMaxJobs: StrictInt = -1
    jobMaxJobsPerUser: StrictInt = -1
    batchScheduler: str | None = None
    batchSchedulerProfile: str | None = None
    batchDefaultLogicalQueue: str | None = None
    batchLogicalQueues: list[TapisLogicalQueue] = Field(default_factory=list)
    jobCapabilities: list[dict[str, Any]] | None = None
    tags: list[str] | None = None
    notes: dict[str, Any] | None = None
    importRefId: str | None = None
    uuid: str | None = None
    allowChildren: TapisBool = False
    parentId: str | None = None
    deleted: TapisBool = False
    isPublic: TapisBool | None = None
    sharedWithUsers: list[str] | None = None
    tenant: str | None = None
    created: str | None = None
    updated: str | None = None


def _is_placeholder(value: str | None) -> bool:
    return value is None or value.startswith(("$", "<")) or not value.strip()


def _system_name(doc: TapisSystem, source: str, name: str | None) -> str:
    if name:
        return name
    if not _is_placeholder(doc.id):
        return doc.id
    if doc.host:
        return doc.host.split(".")[0].lower()
    raise InvalidInputError(
        "system id is a template placeholder and there is no host to name it by (pass --name)",
        source=source,
        field="id",
        value=doc.id,
    )


def parse_tapis_system(
    document: Any, source: str, *, name: str | None = None, center: str | None = None
) -> System:
    """One Tapis system document as a catalog System (node types are not in Tapis)."""
    if not isinstance(document, dict):
        raise InvalidInputError(
            f"expected a JSON object (a Tapis system), got {type(document).__name__}",
            source=source,
        )
    try:
        doc = TapisSystem.model_validate(document)
    except ValidationError as exc:
        raise invalid(exc, source) from exc
    system_name = _system_name(doc, source, name)
    system_center = center or KNOWN_CENTERS.get(system_name)
    if system_center is None:
        raise InvalidInputError(
            "unknown system and no center given (pass --center)",
            source=source,
            field="id",
            value=system_name,
        )
    label = Path(source).name
    partitions = []
    for index, queue in enumerate(doc.batchLogicalQueues):
        try:
            partitions.append(
                Partition(
                    name=queue.name,
                    queue_name=queue.hpcQueueName if queue.hpcQueueName != queue.name else None,
                    min_nodes=queue.minNodeCount,
                    max_nodes=queue.maxNodeCount,
                    min_cores_per_node=queue.minCoresPerNode,
                    max_cores_per_node=queue.maxCoresPerNode,
                    min_memory_mb=queue.minMemoryMB,
                    max_memory_mb=queue.maxMemoryMB,
                    min_minutes=queue.minMinutes,
                    max_minutes=queue.maxMinutes,
                    max_jobs_per_user=queue.maxJobsPerUser if queue.maxJobsPerUser > 0 else None,
                    sources={"limits": label},
                )
            )
        except ValidationError as exc:
            raise invalid(
                exc, source, prefix=f"batchLogicalQueues[{index}] ({queue.name})"
            ) from exc
    default = doc.batchDefaultLogicalQueue
    try:
        return System(
            name=system_name,
            center=system_center,
            scheduler=(doc.batchScheduler or "slurm").lower(),
            host=doc.host,
            default_partition=None if _is_placeholder(default) else default,
            max_jobs=doc.jobMaxJobs if doc.jobMaxJobs > 0 else None,
            max_jobs_per_user=doc.jobMaxJobsPerUser if doc.jobMaxJobsPerUser > 0 else None,
            partitions=partitions,
            notes=doc.description or "",
            sources={"partitions": label},
        )
    except ValidationError as exc:
        raise invalid(exc, source) from exc


def read_tapis_system(
    path: Path | str, *, name: str | None = None, center: str | None = None
) -> System:
    return parse_tapis_system(load_json(path), str(path), name=name, center=center)


def export_tapis_system(system: System) -> dict[str, Any]:
    """The system as a Tapis v3 system document that ``parse_tapis_system`` reads back."""
    queues = [
        TapisLogicalQueue(
            name=p.name,
            hpcQueueName=p.queue_name or p.name,
            maxJobsPerUser=p.max_jobs_per_user or -1,
            minNodeCount=p.min_nodes,
            maxNodeCount=p.max_nodes,
            minCoresPerNode=p.min_cores_per_node,
            maxCoresPerNode=p.max_cores_per_node,
            minMemoryMB=p.min_memory_mb,
            maxMemoryMB=p.max_memory_mb,
            minMinutes=p.min_minutes,
            maxMinutes=p.max_minutes,
        )
        for p in system.partitions
    ]
    doc = TapisSystem(
        id=system.name,
        description=system.notes or None,
        host=system.host,
        canExec=True,
        canRunBatch=True,
        batchScheduler=system.scheduler.upper(),
        batchDefaultLogicalQueue=system.default_partition,
        jobMaxJobs=system.max_jobs or -1,
        jobMaxJobsPerUser=system.max_jobs_per_user or -1,
        batchLogicalQueues=queues,
    )
    return doc.model_dump(exclude_none=True)
