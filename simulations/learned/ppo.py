"""A PPO scheduler in RLScheduler's setting: pick the next job, EASY backfills around it.

After Zhang et al., "RLScheduler: An Automated HPC Batch Job Scheduler Using
Reinforcement Learning" (SC 2020). An episode is a sequence of ``sequence_jobs``
consecutive jobs of a trace (256 in training, 1,024 in evaluation, as there) replayed on
an empty machine. Whenever the queue holds jobs and the machine has changed, the policy
scores the first ``MAX_OBSERVED`` (256) queued jobs (in arrival order) with one small
network applied to each job (RLScheduler's kernel network: the same weights score every job,
so the policy does not depend on queue order or length) and draws one. That job starts
if it fits; otherwise it gets an EASY reservation (user estimates) and the other queued
jobs backfill in arrival order while it waits (RLScheduler's "backfil" mode). The
reward, at the end of the episode only, is the log of the ratio of a heuristic's mean
bounded slowdown (10 s floor) on the same sequence to the policy's (SJF by default),
so that hard and easy sequences weigh the same.

The heuristics compared run in the same simulator with the same backfilling, choosing
the lowest score over the whole queue: FCFS (submit time), SJF (request) and F1
(Carastan-Neto et al. 2019's ``log10(request) * procs + 870 * log10(submit)``, as
RLScheduler computes it, submit time counted from the sequence's start).

Training: each epoch replays ``trajectories`` random windows of the training jobs,
normalizes their rewards over the batch (that is every decision's advantage; no critic),
then runs ``updates`` PPO steps (clip 0.2, entropy bonus) over every decision of the
batch, the learning rate and the bonus falling linearly to 0. The greedy policy is
scored on fixed windows of the training source every few epochs and the best weights
are kept. Rollouts score jobs with numpy copies of the weights; torch runs on one
thread; the whole is sized for minutes on a shared 2-core machine.
"""

from __future__ import annotations

import copy
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
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

# RLScheduler observed 128 (its first versions 16-64). 64 cut SJF's own held-out bsld on
# HPC2N from 70.5 (whole queue) to 88.2, 128 to 80.4, 256 to 67.8 (CTC-SP2: 15.5, 14.4,
# 14.5 against 14.5): queues over 64 jobs are 4% of HPC2N's decisions, over 256 1%.
MAX_OBSERVED = 256
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


Residual = Literal["SJF", "FCFS"]
# The feature each heuristic ranks by, and the sign that makes its choice the highest
# logit: SJF the shortest request (feature 1, log request), FCFS the longest wait
# (feature 0, log wait; the earliest submitted job).
_PRIOR_FEATURE: dict[str, tuple[int, float]] = {"SJF": (1, -1.0), "FCFS": (0, 1.0)}


class _Network(nn.Module):
    """RLScheduler's kernel network: the same weights score every observed job.

    With ``residual`` the score is a linear skip over the features plus the network's,
    the skip starting as the heuristic's ranking (``prior_weight`` logits per e-fold of
    request or wait) and the network's last layer at zero: the untrained greedy policy is
    the heuristic exactly, and training learns a correction to it.
    """

    def __init__(
        self, hidden: int, residual: Residual | None = None, prior_weight: float = 4.0
    ) -> None:
        super().__init__()
        self.score = nn.Sequential(
            nn.Linear(_FEATURES, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )
        self.prior: nn.Linear | None = None
        if residual is not None:
            self.prior = nn.Linear(_FEATURES, 1, bias=False)
            feature, sign = _PRIOR_FEATURE[residual]
            with torch.no_grad():
                self.prior.weight.zero_()
                # features are log1p(.) / 12: 12 * prior_weight logits per unit
                self.prior.weight[0, feature] = sign * 12.0 * prior_weight
                last = self.score[-1]
                assert isinstance(last, nn.Linear)
                last.weight.zero_()
                last.bias.zero_()

    def logits(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.score(x).squeeze(-1)
        if self.prior is not None:
            out = out + self.prior(x).squeeze(-1)
        return out.masked_fill(~mask, -1e9)


class _Scorer:
    """The network's weights as numpy arrays: one job list scored in microseconds.

    A decision scores at most ``MAX_OBSERVED`` jobs, mostly a few; torch's per-call
    overhead (about 0.3 ms for the three layers, 0.1 ms more to sample) was three quarters
    of a training epoch.
    """

    def __init__(self, network: _Network) -> None:
        layers = [m for m in network.score if isinstance(m, nn.Linear)]
        self.weights = [
            (m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in layers
        ]
        self.prior = None
        if network.prior is not None:
            self.prior = network.prior.weight.detach().numpy()[0].copy()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = x
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(self.weights):
            h = h @ w + b
            if i < last:
                h = np.maximum(h, 0)
        out: np.ndarray = h[:, 0]
        if self.prior is not None:
            out = out + x @ self.prior
        return out


Baseline = Literal["SJF", "F1", "FCFS"]


class PPOSettings(BaseModel):
    """Training settings; the defaults are the random start's (docs/synthetic.md).

    ``rl_experiment`` starts as SJF exactly instead and validates apart (``residual="SJF"``,
    ``validation_share=0.2``, ``epochs=20``).
    """

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(default=40, ge=1)
    trajectories: int = Field(default=24, ge=2, description="Sequences replayed per epoch")
    sequence_jobs: int = Field(default=256, ge=16)
    updates: int = Field(default=4, ge=1, description="PPO steps over each epoch's batch")
    hidden: int = Field(default=32, ge=2)
    learning_rate: float = Field(default=1e-3, gt=0, description="First epoch's; linear to 0")
    clip: float = Field(default=0.2, gt=0)
    entropy: float = Field(default=0.01, ge=0, description="First epoch's bonus; linear to 0")
    baseline: Baseline | None = Field(
        default="SJF",
        description="Heuristic whose bsld on the same sequence the reward is relative to",
    )
    imitate: Baseline | None = Field(
        default=None,
        description="Heuristic the network first learns to copy (behaviour cloning on the "
        "training source), so that every seed starts from it; None: random weights",
    )
    imitation_steps: int = Field(default=200, ge=1)
    residual: Residual | None = Field(
        default=None,
        description="Heuristic the policy starts as exactly and learns a correction to (a "
        "linear skip with the heuristic's ranking plus the network, its last layer at zero); "
        "None: the network alone",
    )
    prior_weight: float = Field(
        default=4.0,
        gt=0,
        description="The residual start's logits per e-fold of request (SJF) or wait (FCFS)",
    )
    validation_windows: int = Field(
        default=4, ge=0, description="Training-source windows that pick the kept epoch (0: last)"
    )
    validation_jobs: int = Field(default=1024, ge=16, description="Jobs per validation window")
    validation_share: float = Field(
        default=0.0,
        ge=0,
        lt=0.5,
        description="Share of the source's last jobs kept out of training, where the "
        "validation windows are drawn (0: from the whole source, which training replays too)",
    )
    validate_every: int = Field(default=5, ge=1)
    seed: int = 0

    @model_validator(mode="after")
    def _one_start(self) -> PPOSettings:
        if self.imitate is not None and self.residual is not None:
            raise ValueError(
                f"imitate={self.imitate!r} and residual={self.residual!r}: choose one start"
            )
        return self


class PPOPolicy:
    """A trained scorer; ``choose`` picks the best-scored job (greedy, for evaluation)."""

    def __init__(self, network: _Network) -> None:
        self.network = network.eval()
        self._scorer = _Scorer(network)

    def choose(self, seq: Sequence, queue: list[int], t: int, free: int) -> int:
        return int(np.argmax(self._scorer(_features(seq, queue, t, free))))


def policy_bsld(seq: Sequence, policy: PPOPolicy) -> float:
    return _bsld(seq, _run(seq, policy.choose))


def sequence_reward(policy_bsld: float, baseline_bsld: float | None) -> float:
    """An episode's reward: ``log(baseline / policy)`` bsld on the same sequence.

    Positive when the policy beats the heuristic, 0 when it ties, and the same for
    halving a bsld of 400 as one of 4: sequences differ in difficulty by two orders of
    magnitude, and with the raw ``-bsld`` the batch's advantages mostly said which
    windows were hard, not which decisions were good. Without a baseline: ``-bsld``.
    """
    if policy_bsld < 1 or (baseline_bsld is not None and baseline_bsld < 1):
        raise InvalidInputError(
            "a bounded slowdown is at least 1",
            field="bsld",
            value=min(policy_bsld, baseline_bsld or 1.0),
        )
    if baseline_bsld is None:
        return -policy_bsld
    return math.log(baseline_bsld) - math.log(policy_bsld)


@dataclass
class TrainingLog:
    seconds: float
    history: list[float]  # mean training bsld per epoch
    validation: list[tuple[int, float]]  # (epoch, greedy mean bsld on the validation windows)
    kept_epoch: int  # the epoch whose weights the policy has


@dataclass
class _Episode:
    """What the sampling policy saw and did in one episode."""

    observations: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)

    def sampler(self, scorer: _Scorer, rng: np.random.Generator) -> Chooser:
        def sample(seq: Sequence, queue: list[int], t: int, free: int) -> int:
            x = _features(seq, queue, t, free)
            logits = scorer(x).astype(np.float64)
            logp = logits - logits.max()
            logp -= math.log(np.exp(logp).sum())
            cumulative = np.cumsum(np.exp(logp))
            drawn = np.searchsorted(cumulative, rng.random() * cumulative[-1], "right")
            a = min(int(drawn), int(x.shape[0]) - 1)
            self.observations.append(x)
            self.actions.append(a)
            self.logp.append(float(logp[a]))
            return a

        return sample


def _padded(observations: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(obs.shape[0] for obs in observations)  # the batch's longest, not the limit
    x = np.zeros((len(observations), width, _FEATURES), dtype=np.float32)
    mask = np.zeros((len(observations), width), dtype=bool)
    for i, obs in enumerate(observations):
        x[i, : obs.shape[0]] = obs
        mask[i, : obs.shape[0]] = True
    return torch.from_numpy(x), torch.from_numpy(mask)


def _imitate(network: _Network, jobs: Sequence, s: PPOSettings, rng: np.random.Generator) -> None:
    """Behaviour cloning: the network learns which observed job ``s.imitate`` would pick.

    The heuristic replays ``trajectories`` random windows choosing among the observed
    jobs only (what the network sees); cross-entropy on its choices, full batch, Adam.
    """
    if s.imitate is None:
        return
    score = HEURISTICS[s.imitate]
    observations: list[np.ndarray] = []
    labels: list[int] = []

    def choose(seq: Sequence, queue: list[int], t: int, free: int) -> int:
        observations.append(_features(seq, queue, t, free))
        labels.append(int(np.argmin(score(seq, np.asarray(queue[:MAX_OBSERVED])))))
        return labels[-1]

    n = jobs.submit_s.size
    for _ in range(s.trajectories):
        begin = int(rng.integers(0, n - s.sequence_jobs + 1))
        _run(jobs.window(begin, s.sequence_jobs), choose)
    x, mask = _padded(observations)
    target = torch.tensor(labels)
    optimizer = torch.optim.Adam(network.parameters(), lr=1e-2)
    for _ in range(s.imitation_steps):
        loss = nn.functional.cross_entropy(network.logits(x, mask), target)
        optimizer.zero_grad()
        torch.autograd.backward(loss)
        optimizer.step()


def _validation_windows(jobs: Sequence, s: PPOSettings) -> list[Sequence]:
    n = jobs.submit_s.size
    length = min(s.validation_jobs, n)
    rng = np.random.default_rng(7919)  # the same windows for every seed
    return [
        jobs.window(int(b), length) for b in rng.integers(0, n - length + 1, s.validation_windows)
    ]


def train_ppo(jobs: Sequence, settings: PPOSettings | None = None) -> tuple[PPOPolicy, TrainingLog]:
    """PPO over random ``sequence_jobs`` windows of ``jobs``.

    Each epoch replays ``trajectories`` random windows, sampling every decision from the
    policy; an episode's reward is :func:`sequence_reward` against ``baseline`` on the
    same window, normalized over the batch, and it is every decision's advantage. Then
    ``updates`` clipped PPO steps over the batch; the learning rate and entropy bonus
    fall linearly to 0 by the last epoch. Every ``validate_every`` epochs (and after the
    last) the greedy policy replays ``validation_windows`` fixed windows of
    ``validation_jobs`` jobs of the same source (with ``validation_share``, of its last
    jobs, which training never replays); the weights with the lowest mean bsld there are
    returned. Deterministic for a seed.
    """
    s = settings or PPOSettings()
    total = jobs.submit_s.size
    kept_out = int(total * s.validation_share)
    n = total - kept_out
    if n < s.sequence_jobs:
        raise InvalidInputError(
            f"the training trace has {n} jobs to train on, fewer than one sequence",
            field="sequence_jobs",
            value=s.sequence_jobs,
        )
    began = time.perf_counter()
    rng = np.random.default_rng(s.seed)
    if kept_out:
        if kept_out < 16:
            raise InvalidInputError(
                f"{kept_out} of {total} jobs kept out: too few to validate on",
                field="validation_share",
                value=s.validation_share,
            )
        validation = _validation_windows(jobs.window(n, kept_out), s)
        jobs = jobs.window(0, n)
    else:
        validation = _validation_windows(jobs, s)
    with torch.random.fork_rng(devices=[]), one_thread():
        torch.manual_seed(s.seed)
        network = _Network(s.hidden, s.residual, s.prior_weight)
        history: list[float] = []
        scores: list[tuple[int, float]] = []
        best: tuple[float, int, dict[str, torch.Tensor]] | None = None
        if s.imitate is not None or s.residual is not None:
            _imitate(network, jobs, s, rng)
            if validation:  # the start is a candidate: "epoch 0"
                score = float(np.mean([policy_bsld(w, PPOPolicy(network)) for w in validation]))
                network.train()
                scores.append((0, score))
                best = (score, 0, copy.deepcopy(network.state_dict()))
        optimizer = torch.optim.Adam(network.parameters(), lr=s.learning_rate)
        for epoch in range(s.epochs):
            left = 1 - epoch / s.epochs
            for group in optimizer.param_groups:
                group["lr"] = s.learning_rate * left
            scorer = _Scorer(network)
            observations: list[np.ndarray] = []
            actions: list[int] = []
            old_logp: list[float] = []
            episode: list[int] = []
            rewards: list[float] = []
            bslds: list[float] = []
            for k in range(s.trajectories):
                begin = int(rng.integers(0, n - s.sequence_jobs + 1))
                seq = jobs.window(begin, s.sequence_jobs)
                steps = _Episode()
                b = _bsld(seq, _run(seq, steps.sampler(scorer, rng)))
                observations += steps.observations
                actions += steps.actions
                old_logp += steps.logp
                episode += [k] * len(steps.actions)
                bslds.append(b)
                reference = heuristic_bsld(seq, s.baseline) if s.baseline else None
                rewards.append(sequence_reward(b, reference))
            history.append(float(np.mean(bslds)))
            r = np.array(rewards)
            normalized = (r - r.mean()) / (r.std() + 1e-8)
            x, mask = _padded(observations)
            action = torch.tensor(actions)
            before = torch.tensor(old_logp, dtype=torch.float32)
            advantage = torch.tensor(normalized[np.array(episode)], dtype=torch.float32)
            for _ in range(s.updates):
                logits = network.logits(x, mask)
                logp_all = torch.log_softmax(logits, 1)
                logp = logp_all.gather(1, action[:, None]).squeeze(1)
                ratio = torch.exp(logp - before)
                clipped = torch.clamp(ratio, 1 - s.clip, 1 + s.clip)
                policy_loss = -torch.min(ratio * advantage, clipped * advantage).mean()
                probs = logp_all.exp() * mask
                entropy = -(probs * logp_all.masked_fill(~mask, 0)).sum(1).mean()
                loss = policy_loss - s.entropy * left * entropy
                optimizer.zero_grad()
                torch.autograd.backward(loss)
                optimizer.step()
            done = epoch + 1
            if validation and (done % s.validate_every == 0 or done == s.epochs):
                greedy = PPOPolicy(network)
                score = float(np.mean([policy_bsld(w, greedy) for w in validation]))
                network.train()
                scores.append((done, score))
                if best is None or score < best[0]:
                    best = (score, done, copy.deepcopy(network.state_dict()))
        kept = s.epochs
        if best is not None:
            kept = best[1]
            network.load_state_dict(best[2])
    return PPOPolicy(network), TrainingLog(
        seconds=time.perf_counter() - began, history=history, validation=scores, kept_epoch=kept
    )
