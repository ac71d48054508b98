"""Folding imported partitions into a catalog without losing what other sources added.

A queue-limit file knows limits, not hardware; the seeded catalog knows which node type
a partition runs on and what it charges. Importing limits over an existing partition
updates the fields the import set and keeps the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from knowledge_base.catalog import Catalog, Partition, System
from knowledge_base.errors import InvalidInputError

__all__ = ["KNOWN_CENTERS", "merge_partitions"]

# Systems whose center is known without being told (the seeded ones and their siblings).
KNOWN_CENTERS: Mapping[str, str] = {
    "pitzer": "OSC",
    "owens": "OSC",
    "ascend": "OSC",
    "cardinal": "OSC",
    "frontera": "TACC",
    "stampede2": "TACC",
    "stampede3": "TACC",
    "lonestar6": "TACC",
}


def merge_partitions(
    catalog: Catalog,
    imported: Mapping[str, Sequence[Partition]],
    *,
    source: str,
    center: str | None = None,
) -> Catalog:
    """A new catalog with ``imported`` (system -> partitions) folded in."""
    for system_name, partitions in imported.items():
        existing = next((s for s in catalog.systems if s.name == system_name), None)
        if existing is None:
            system_center = center or KNOWN_CENTERS.get(system_name)
            if system_center is None:
                raise InvalidInputError(
                    "unknown system and no center given (pass --center)",
                    source=source,
                    field="system",
                    value=system_name,
                )
            existing = System(name=system_name, center=system_center)
        by_name = {p.name: p for p in existing.partitions}
        for partition in partitions:
            old = by_name.get(partition.name)
            if old is None:
                by_name[partition.name] = partition
                continue
            update = partition.model_dump(exclude_unset=True)
            update["sources"] = {**old.sources, **partition.sources}
            try:
                by_name[partition.name] = Partition.model_validate({**old.model_dump(), **update})
            except ValidationError as exc:
                raise InvalidInputError(
                    str(exc.errors()[0]["msg"]),
                    source=source,
                    field=f"{system_name}/{partition.name}",
                ) from exc
        try:
            merged = existing.model_copy(update={"partitions": list(by_name.values())})
            catalog = catalog.with_system(System.model_validate(merged.model_dump()))
        except ValidationError as exc:
            raise InvalidInputError(
                str(exc.errors()[0]["msg"]), source=source, field=system_name
            ) from exc
    return catalog
