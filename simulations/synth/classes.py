"""Job classes the generators condition on: a user's jobs of one size class.

A class is (user, size class) when that user submitted at least ``min_class_jobs`` jobs of
that size; the rest of each size class is pooled across its rarer users. Generators fit
one distribution per class (per-class copulas; the class as a conditioning input of the
TVAE), so that what users do differently (one runs 1-processor jobs for days, another
8-processor jobs for minutes) survives in the synthetic trace. Sampling draws a class
with its frequency in the training trace, then a user within it.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from knowledge_base.errors import InvalidInputError
from simulations.synth.columns import JobTable, size_edges

__all__ = ["ClassScheme", "JobClass", "fit_classes"]


class JobClass(BaseModel):
    """One class: its users (one, or the pooled rare users) with their job counts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size_class: int = Field(ge=0)
    users: list[int] = Field(min_length=1)
    user_jobs: list[int] = Field(min_length=1)
    jobs: int = Field(ge=1)
    pooled: bool

    @model_validator(mode="after")
    def _counts_match(self) -> JobClass:
        if len(self.users) != len(self.user_jobs) or sum(self.user_jobs) != self.jobs:
            raise ValueError("users, user_jobs and jobs disagree")
        return self


class ClassScheme(BaseModel):
    """How rows map to classes, and the classes' frequencies for sampling."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size_edges: list[int]
    min_class_jobs: int = Field(ge=1)
    classes: list[JobClass] = Field(min_length=1)

    def size_class(self, procs: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.digitize(procs, self.size_edges)
        return out

    def sample(self, n_jobs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Class and user of ``n_jobs`` rows, drawn with the training frequencies."""
        counts = np.array([c.jobs for c in self.classes], dtype=np.float64)
        labels = rng.choice(len(self.classes), size=n_jobs, p=counts / counts.sum())
        users = np.empty(n_jobs, dtype=np.int64)
        for index, job_class in enumerate(self.classes):
            rows = np.flatnonzero(labels == index)
            if rows.size == 0:
                continue
            if len(job_class.users) == 1:
                users[rows] = job_class.users[0]
            else:
                weights = np.array(job_class.user_jobs, dtype=np.float64)
                users[rows] = rng.choice(
                    np.array(job_class.users, dtype=np.int64),
                    size=rows.size,
                    p=weights / weights.sum(),
                )
        return labels.astype(np.int64), users


def fit_classes(
    table: JobTable, *, machine_procs: int, min_class_jobs: int
) -> tuple[ClassScheme, np.ndarray]:
    """The class scheme of a training table, and each row's class index."""
    if min_class_jobs < 1:
        raise InvalidInputError(
            "a class needs at least one job", field="min_class_jobs", value=min_class_jobs
        )
    if len(table) == 0:
        raise InvalidInputError("no job to fit classes on", field="jobs", value=0)
    edges = size_edges(machine_procs)
    size = np.digitize(table.procs, edges)
    user = table.user.astype(np.int64)
    keys = np.stack([user, size], axis=1)
    unique_keys, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    classes: list[JobClass] = []
    key_to_class = np.empty(len(unique_keys), dtype=np.int64)
    pooled: dict[int, list[int]] = {}
    for k, ((user_id, size_class), count) in enumerate(zip(unique_keys, counts, strict=True)):
        if count >= min_class_jobs:
            key_to_class[k] = len(classes)
            classes.append(
                JobClass(
                    size_class=int(size_class),
                    users=[int(user_id)],
                    user_jobs=[int(count)],
                    jobs=int(count),
                    pooled=False,
                )
            )
        else:
            pooled.setdefault(int(size_class), []).append(k)
    for size_class, members in sorted(pooled.items()):
        index = len(classes)
        key_to_class[members] = index
        classes.append(
            JobClass(
                size_class=size_class,
                users=[int(unique_keys[k][0]) for k in members],
                user_jobs=[int(counts[k]) for k in members],
                jobs=int(sum(counts[k] for k in members)),
                pooled=True,
            )
        )
    scheme = ClassScheme(size_edges=edges, min_class_jobs=min_class_jobs, classes=classes)
    return scheme, key_to_class[inverse]
