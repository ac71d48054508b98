"""A PPO scheduler in RLScheduler's setting: pick the next job, EASY backfills around it.

After Zhang et al., "RLScheduler: An Automated HPC Batch Job Scheduler Using
Reinforcement Learning" (SC 2020). An episode is a sequence of ``sequence_jobs``
consecutive jobs of a trace (256 in training, 1,024 in evaluation, as there) replayed on
an empty machine. Whenever the queue holds jobs and the machine has changed, the policy
scores the first ``MAX_OBSERVED`` queued jobs (in arrival order) with one small network
applied to each job (RLScheduler's kernel network: the same weights score every job,
so the policy does not depend on queue order or length) and draws one. That job starts
if it fits; otherwise it gets an EASY reservation (user estimates) and the other queued
jobs backfill in arrival order while it waits (RLScheduler's "backfil" mode). The
reward, at the end of the episode only, is minus the episode's mean bounded slowdown
(10 s floor).

The heuristics compared run in the same simulator with the same backfilling, choosing
the lowest score over the whole queue: FCFS (submit time), SJF (request) and F1
(Carastan-Neto et al. 2019's ``log10(request) * procs + 870 * log10(submit)``, as
RLScheduler computes it, submit time counted from the sequence's start).

Training: each epoch replays ``trajectories`` random windows of the training jobs,
normalizes their rewards over the batch (advantage = normalized reward - the value
network's estimate from the mean of the observed jobs' features), then runs
``updates`` PPO steps (clip 0.2, entropy bonus) over every decision of the batch. Torch
runs on one thread; the whole is sized for minutes on a shared 2-core machine.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from knowledge_base.errors import InvalidInputError
from simulations.metrics import bounded_slowdown
from simulations.synth.tvae import one_thread

__all__ = [
    "HEURISTICS",
    "MAX_OBSERVED",
    "PPOPolicy",
    "PPOSettings",
    "Sequence",
    "heuristic_bsld",
    "policy_bsld",
    "train_ppo",
]

MAX_OBSERVED = 64
_FEATURES = 6


@dataclass
class Sequence:
    """Jobs in submit order; submit times from the sequence's first job."""

    submit_s: np.ndarray
    run_s: np.ndarray
    req_s: np.ndarray
    procs: np.ndarray
    machine_procs: int

    def __post_init__(self) -> None:
        n = self.submit_s.size
        for name in ("run_s", "req_s", "procs"):
            if getattr(self, name).size != n:
                raise InvalidInputError(f"{name} has a different length", field=name)
        if n == 0:
            raise InvalidInputError("a sequence needs jobs", field="jobs", value=0)
        if int(self.procs.max()) > self.machine_procs:
            raise InvalidInputError(
                "a job asks for more processors than the machine has",
                field="procs",
                value=int(self.procs.max()),
            )

    def window(self, begin: int, jobs: int) -> Sequence:
        end = begin + jobs
        return Sequence(
            submit_s=self.submit_s[begin:end] - self.submit_s[begin],
            run_s=self.run_s[begin:end],
            req_s=self.req_s[begin:end],
            procs=self.procs[begin:end],
            machine_procs=self.machine_procs,
        )


def _features(seq: Sequence, queue: list[int], t: int, free: int) -> np.ndarray:
    """What the policy sees of each observed job (RLScheduler's, plus the machine)."""
    jobs = np.asarray(queue[:MAX_OBSERVED], dtype=np.int64)
    out = np.empty((jobs.size, _FEATURES), dtype=np.float32)
    out[:, 0] = np.log1p(t - seq.submit_s[jobs]) / 12.0
    out[:, 1] = np.log1p(seq.req_s[jobs]) / 12.0
    out[:, 2] = np.log1p(seq.procs[jobs]) / math.log1p(seq.machine_procs)
    out[:, 3] = seq.procs[jobs] <= free
    out[:, 4] = free / seq.machine_procs
    out[:, 5] = min(len(queue), 256) / 256.0
    return out


Chooser = Callable[[Sequence, list[int], int, int], int]


def _run(seq: Sequence, choose: Chooser) -> np.ndarray:
    """Start time per job; ``choose(seq, queue, t, free)`` returns a position in ``queue``."""
    n = seq.submit_s.size
    submit, run, req, procs = seq.submit_s, seq.run_s, seq.req_s, seq.procs
    start = np.full(n, -1, dtype=np.int64)
    free = seq.machine_procs
    running: list[tuple[int, int, int, int]] = []  # (end, job, procs, estimated end)
    queue: list[int] = []
    arrived = 0
    t = int(submit[0])

    def begin(j: int) -> None:
        nonlocal free
        start[j] = t
        free -= int(procs[j])
        heapq.heappush(running, (t + int(min(run[j], req[j])), j, int(procs[j]), t + int(req[j])))

    def advance() -> None:
        """To the next completion or arrival; free and admit what happens then."""
        nonlocal t, free, arrived
        next_end = running[0][0] if running else None
        next_arrival = int(submit[arrived]) if arrived < n else None
        options = [x for x in (next_end, next_arrival) if x is not None]
        t = max(t, min(options))
        while running and running[0][0] <= t:
            free += heapq.heappop(running)[2]
        while arrived < n and submit[arrived] <= t:
            queue.append(arrived)
            arrived += 1

    while arrived < n and submit[arrived] <= t:
        queue.append(arrived)
        arrived += 1
    scheduled = 0
    while scheduled < n:
        if not queue:
            advance()
            continue
        position = choose(seq, queue, t, free)
        j = queue.pop(position)
        while procs[j] > free:
            # EASY reservation for j from the running jobs' estimated ends, then backfill.
            ends = sorted((r[3], r[2]) for r in running)
            available, shadow = free, t
            for est_end, width in ends:
                available += width
                shadow = max(est_end, t)
                if available >= procs[j]:
                    break
            # Every job believed to end by the shadow time frees its processors then
            # (ties included), as in the compiled simulator's EASY.
            available = free + sum(width for est_end, width in ends if est_end <= shadow)
            extra = available - int(procs[j])
            k = 0
            while k < len(queue):
                c = queue[k]
                if procs[c] <= free and (t + req[c] <= shadow or procs[c] <= extra):
                    if t + req[c] > shadow:
                        extra -= int(procs[c])
                    queue.pop(k)
                    begin(c)
                    scheduled += 1
                    continue
                k += 1
            advance()
        begin(j)
        scheduled += 1
    return start


def _bsld(seq: Sequence, start: np.ndarray) -> float:
    wait = (start - seq.submit_s).astype(np.float64)
    ran = np.minimum(seq.run_s, seq.req_s).astype(np.float64)
    return float(bounded_slowdown(wait, ran).mean())


def _f1(seq: Sequence, jobs: np.ndarray) -> np.ndarray:
    request = np.maximum(seq.req_s[jobs].astype(np.float64), 0.1)
    submitted = np.maximum(seq.submit_s[jobs].astype(np.float64), 0.1)
    score: np.ndarray = np.log10(request) * seq.procs[jobs] + 870 * np.log10(submitted)
    return score


HEURISTICS = {
    "FCFS": lambda seq, jobs: seq.submit_s[jobs].astype(np.float64),
    "SJF": lambda seq, jobs: seq.req_s[jobs].astype(np.float64),
    "F1": _f1,
}


def heuristic_bsld(seq: Sequence, name: str) -> float:
    """Mean bsld of ``seq`` when the lowest ``name`` score goes next (EASY backfilling)."""
    if name not in HEURISTICS:
        raise InvalidInputError(f"unknown heuristic; use {sorted(HEURISTICS)}", field="policy")
    score = HEURISTICS[name]

    def choose(s: Sequence, queue: list[int], t: int, free: int) -> int:
        return int(np.argmin(score(s, np.asarray(queue, dtype=np.int64))))

    return _bsld(seq, _run(seq, choose))


class _Network(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.score = nn.Sequential(
            nn.Linear(_FEATURES, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )
        self.value = nn.Sequential(nn.Linear(_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def logits(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.score(x).squeeze(-1).masked_fill(~mask, -1e9)
        return out

    def values(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        out: torch.Tensor = self.value(pooled).squeeze(-1)
        return out


class PPOSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(default=30, ge=1)
    trajectories: int = Field(default=12, ge=2)
    sequence_jobs: int = Field(default=256, ge=16)
    updates: int = Field(default=4, ge=1)
    hidden: int = Field(default=32, ge=2)
    learning_rate: float = Field(default=1e-3, gt=0)
    clip: float = Field(default=0.2, gt=0)
    entropy: float = Field(default=0.01, ge=0)
    seed: int = 0


class PPOPolicy:
    """A trained scorer; ``greedy`` picks the best-scored job (evaluation)."""

    def __init__(self, network: _Network) -> None:
        self.network = network.eval()

    @torch.no_grad()
    def choose(self, seq: Sequence, queue: list[int], t: int, free: int) -> int:
        x = torch.from_numpy(_features(seq, queue, t, free))
        return int(self.network.score(x).squeeze(-1).argmax())


def policy_bsld(seq: Sequence, policy: PPOPolicy) -> float:
    with one_thread():
        return _bsld(seq, _run(seq, policy.choose))


@dataclass
class TrainingLog:
    seconds: float
    history: list[float]  # mean training bsld per epoch


def train_ppo(jobs: Sequence, settings: PPOSettings | None = None) -> tuple[PPOPolicy, TrainingLog]:
    """PPO over random ``sequence_jobs`` windows of ``jobs``."""
    s = settings or PPOSettings()
    n = jobs.submit_s.size
    if n < s.sequence_jobs:
        raise InvalidInputError(
            f"the training trace has {n} jobs, fewer than one sequence",
            field="sequence_jobs",
            value=s.sequence_jobs,
        )
    began = time.perf_counter()
    rng = np.random.default_rng(s.seed)
    with torch.random.fork_rng(devices=[]), one_thread():
        torch.manual_seed(s.seed)
        network = _Network(s.hidden)
        generator = torch.Generator().manual_seed(s.seed)
        optimizer = torch.optim.Adam(network.parameters(), lr=s.learning_rate)
        history: list[float] = []
        for _epoch in range(s.epochs):
            observations: list[np.ndarray] = []
            actions: list[int] = []
            old_logp: list[float] = []
            episode: list[int] = []
            rewards: list[float] = []
            for k in range(s.trajectories):
                begin = int(rng.integers(0, n - s.sequence_jobs + 1))
                seq = jobs.window(begin, s.sequence_jobs)

                def sample(
                    q_seq: Sequence,
                    queue: list[int],
                    t: int,
                    free: int,
                    _k: int = k,
                    observations: list[np.ndarray] = observations,
                    actions: list[int] = actions,
                    old_logp: list[float] = old_logp,
                    episode: list[int] = episode,
                ) -> int:
                    x = _features(q_seq, queue, t, free)
                    with torch.no_grad():
                        logits = network.score(torch.from_numpy(x)).squeeze(-1)
                        logp = torch.log_softmax(logits, 0)
                        a = int(torch.multinomial(logp.exp(), 1, generator=generator))
                    observations.append(x)
                    actions.append(a)
                    old_logp.append(float(logp[a]))
                    episode.append(_k)
                    return a

                rewards.append(-_bsld(seq, _run(seq, sample)))
            history.append(-float(np.mean(rewards)))
            r = np.array(rewards)
            normalized = (r - r.mean()) / (r.std() + 1e-8)
            m = len(actions)
            x = torch.zeros((m, MAX_OBSERVED, _FEATURES))
            mask = torch.zeros((m, MAX_OBSERVED), dtype=torch.bool)
            for i, obs in enumerate(observations):
                x[i, : obs.shape[0]] = torch.from_numpy(obs)
                mask[i, : obs.shape[0]] = True
            action = torch.tensor(actions)
            before = torch.tensor(old_logp)
            target = torch.tensor(normalized[np.array(episode)], dtype=torch.float32)
            for _ in range(s.updates):
                logits = network.logits(x, mask)
                logp_all = torch.log_softmax(logits, 1)
                logp = logp_all.gather(1, action[:, None]).squeeze(1)
                value = network.values(x, mask)
                advantage = (target - value).detach()
                ratio = torch.exp(logp - before)
                clipped = torch.clamp(ratio, 1 - s.clip, 1 + s.clip)
                policy_loss = -torch.min(ratio * advantage, clipped * advantage).mean()
                probs = logp_all.exp() * mask
                entropy = -(probs * logp_all.masked_fill(~mask, 0)).sum(1).mean()
                loss = policy_loss + 0.5 * ((value - target) ** 2).mean() - s.entropy * entropy
                optimizer.zero_grad()
                torch.autograd.backward(loss)
                optimizer.step()
    return PPOPolicy(network), TrainingLog(seconds=time.perf_counter() - began, history=history)
