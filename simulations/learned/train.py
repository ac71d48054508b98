"""Training a :class:`PriorityPolicy` on a trace by the cross-entropy method.

RLScheduler trains its scorer with PPO over many short job sequences. On two shared CPU
cores a derivative-free search is simpler and as direct: the objective is the very
figure we compare (mean bounded slowdown under the learned order with EASY
backfilling), the policy has a few dozen weights, and each candidate is scored by
replaying windows of the training trace in the compiled simulator. Each generation
draws ``population`` weight vectors around the current mean, replays the same
``windows`` random windows of ``window_jobs`` jobs with each (common random numbers, so
candidates are compared on equal work), and moves the mean and spread to the best
``elite``. The mean starts at zero, which is plain EASY.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.errors import InvalidInputError
from simulations.learned.priority import PriorityPolicy, simulate_priority
from simulations.metrics import bounded_slowdown
from simulations.workload import Workload

__all__ = ["JobArrays", "TrainingResult", "TrainingSettings", "train_policy"]

log = logging.getLogger(__name__)


class JobArrays(BaseModel):
    """Jobs in submit order, as the priority simulator takes them."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    submit_s: np.ndarray
    run_s: np.ndarray
    req_s: np.ndarray
    procs: np.ndarray
    machine_procs: int

    @classmethod
    def of(cls, workload: Workload) -> JobArrays:
        """The workload's columns (every field here is one of its, by the same name)."""
        return cls(**{name: getattr(workload, name) for name in cls.model_fields})

    def window(self, begin: int, jobs: int) -> JobArrays:
        end = begin + jobs
        return JobArrays(
            submit_s=self.submit_s[begin:end] - self.submit_s[begin],
            run_s=self.run_s[begin:end],
            req_s=self.req_s[begin:end],
            procs=self.procs[begin:end],
            machine_procs=self.machine_procs,
        )

    def schedule(self, policy: PriorityPolicy | None) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) per job under ``policy`` (None: plain EASY)."""
        return simulate_priority(
            submit_s=self.submit_s,
            run_s=self.run_s,
            req_s=self.req_s,
            procs=self.procs,
            machine_procs=self.machine_procs,
            policy=policy,
        )

    def mean_bsld(self, policy: PriorityPolicy | None) -> float:
        start, end = self.schedule(policy)
        wait, run = (start - self.submit_s).astype(float), (end - start).astype(float)
        return float(bounded_slowdown(wait, run).mean())


class TrainingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hidden: int = Field(default=8, ge=1)
    population: int = Field(default=24, ge=2)
    elite: int = Field(default=6, ge=1)
    generations: int = Field(default=20, ge=1)
    windows: int = Field(default=4, ge=1)
    window_jobs: int = Field(default=4000, ge=10)
    initial_std: float = Field(default=1.0, gt=0)
    min_std: float = Field(default=0.05, gt=0)
    seed: int = 0


class TrainingResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: PriorityPolicy
    settings: TrainingSettings
    history: list[float] = Field(description="Elite mean objective per generation")
    easy_objective: float = Field(description="EASY on the final generation's windows")
    policy_objective: float = Field(description="The returned policy on the same windows")
    seconds: float


def train_policy(jobs: JobArrays, settings: TrainingSettings | None = None) -> TrainingResult:
    """CEM over the policy's weights; returns the final mean as the policy."""
    s = settings or TrainingSettings()
    if s.elite > s.population:
        raise InvalidInputError("elite cannot exceed the population", field="elite", value=s.elite)
    n = jobs.submit_s.size
    window_jobs = min(s.window_jobs, n)
    began = time.perf_counter()
    rng = np.random.default_rng(s.seed)
    size = PriorityPolicy.size(s.hidden)
    mean = np.zeros(size)
    std = np.full(size, s.initial_std)
    history: list[float] = []
    windows: list[JobArrays] = []
    for generation in range(s.generations):
        starts = rng.integers(0, n - window_jobs + 1, size=s.windows)
        windows = [jobs.window(int(b), window_jobs) for b in starts]
        candidates = mean + std * rng.standard_normal((s.population, size))
        candidates[0] = mean  # keep the incumbent in the race
        scores = np.array(
            [
                np.mean([w.mean_bsld(PriorityPolicy.from_vector(c, s.hidden)) for w in windows])
                for c in candidates
            ]
        )
        best = candidates[np.argsort(scores)[: s.elite]]
        mean = best.mean(axis=0)
        std = np.maximum(best.std(axis=0), s.min_std)
        history.append(float(np.sort(scores)[: s.elite].mean()))
        log.debug("generation %d: elite mean bsld %.2f", generation + 1, history[-1])
    policy = PriorityPolicy.from_vector(mean, s.hidden)
    easy = float(np.mean([w.mean_bsld(None) for w in windows]))
    learned = float(np.mean([w.mean_bsld(policy) for w in windows]))
    return TrainingResult(
        policy=policy,
        settings=s,
        history=history,
        easy_objective=easy,
        policy_objective=learned,
        seconds=time.perf_counter() - began,
    )
