"""The sequence model's network: a shared trunk and one head per token (torch, for
training; numpy, for sampling), the draws and the loss (:mod:`simulations.synth.sequence`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from simulations.synth.sequence_history import (
    _Users,
)
from simulations.synth.sequence_tokens import (
    _COPIED,
    _HEADS,
    _SLOT_NUMERIC,
    _SLOTS,
    _widths,
)

_EMBED = 12
_WHEN = 24 + 7  # one-hot local hour and weekday


class _Network(nn.Module):
    """Shared trunk over the history; one head per token, each seeing the tokens before it."""

    def __init__(
        self,
        vocab: dict[str, int],
        hidden: int,
        head_hidden: int,
        *,
        job_when: bool = True,
        repeat: bool = True,
        runs: bool = True,
    ) -> None:
        super().__init__()
        # The job's own heads (processors, request, run fraction, status) see its local hour
        # and weekday; a file fitted before they did (no "job_when" option) has heads
        # without them.
        self.job_when = job_when
        # ``repeat``: the processors, request and run-fraction heads each have a copy gate,
        # a logit added to the class's previous token (a user resubmitting a job), and the
        # heads after them see whether each token drawn is that previous one. A file fitted
        # before (no "repeat" option) has neither.
        self.repeat = repeat
        # ``runs``: the trunk, the session head and the job heads see the runs of identical
        # jobs (the previous job's, each slot user's, the class's). A file fitted before
        # (no "runs" option) sees none.
        self.runs = runs
        flag = 1 if repeat else 0
        # +1: the "no previous job" token.
        self.embed = nn.ModuleDict({h: nn.Embedding(vocab[h] + 1, _EMBED) for h in _HEADS})
        numeric, slots, class_numeric = _widths(runs)
        context = numeric + 4 * _EMBED + _WHEN
        self.trunk = nn.Sequential(
            nn.Linear(context, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        inputs = {
            "gap": hidden,
            "session": hidden + _EMBED + slots + _WHEN,
            "class": hidden + _EMBED + _WHEN + 2 * _EMBED,
            "procs": hidden + 3 * _EMBED + class_numeric + 3 * _EMBED + (_WHEN if job_when else 0),
        }
        inputs["request"] = inputs["procs"] + _EMBED + flag
        inputs["fraction"] = inputs["request"] + _EMBED + flag
        inputs["status"] = inputs["fraction"] + _EMBED + flag
        self.heads = nn.ModuleDict(
            {
                h: nn.Sequential(
                    nn.Linear(inputs[h], head_hidden), nn.ReLU(), nn.Linear(head_hidden, vocab[h])
                )
                for h in _HEADS
            }
        )
        if repeat:
            self.copy = nn.ModuleDict({h: nn.Linear(inputs[h], 1) for h in _COPIED})
        if runs:
            # Whether a continued session's job repeats its user's last one (class,
            # processors, request), given the class head's inputs and the slot's numbers.
            self.again = nn.Sequential(
                nn.Linear(inputs["class"] + _SLOT_NUMERIC + 1, head_hidden),
                nn.ReLU(),
                nn.Linear(head_hidden, 1),
            )


def _one_hot(index: torch.Tensor, size: int) -> torch.Tensor:
    return functional.one_hot(index, size).float()


@dataclass
class _Batch:
    numbers: torch.Tensor  # (n, _NUMERIC), or _NUMERIC_BEFORE_RUNS: see _widths
    previous: torch.Tensor  # (n, 4) gap, class, procs, request tokens of the previous job
    when: torch.Tensor  # (n, 4) hour, weekday of the last submission; of this job
    slot_numbers: torch.Tensor  # (n, _SLOT_BLOCK or before runs) at this job's submission
    slot_users: torch.Tensor  # (n, _SLOTS) user indices (none: empty)
    slot_class: torch.Tensor  # (n,) last class of the continued session's user (or none)
    class_numbers: torch.Tensor  # (n, _CLASS_NUMERIC)
    class_previous: torch.Tensor  # (n, 3) procs, request, fraction of the class's last job
    tokens: torch.Tensor  # (n, 7) this job's tokens, in _HEADS order
    again: torch.Tensor  # (n,) True where a continued session's job repeats its user's last
    user_run: torch.Tensor  # (n,) the job's user's run of identical jobs before it (0: none)

    def rows(self, index: torch.Tensor | slice) -> _Batch:
        return _Batch(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


_MASKED = -1e9


def _logits(net: _Network, b: _Batch, users: _Users) -> dict[str, torch.Tensor]:
    e = net.embed
    context = torch.cat(
        [
            b.numbers,
            e["gap"](b.previous[:, 0]),
            e["class"](b.previous[:, 1]),
            e["procs"](b.previous[:, 2]),
            e["request"](b.previous[:, 3]),
            _one_hot(b.when[:, 0], 24),
            _one_hot(b.when[:, 1], 7),
        ],
        dim=1,
    )
    h = net.trunk(context)
    out = {"gap": net.heads["gap"](h)}
    gap = e["gap"](b.tokens[:, 0])
    new_when = torch.cat([_one_hot(b.when[:, 2], 24), _one_hot(b.when[:, 3], 7)], dim=1)
    # An empty slot cannot be continued.
    no_slot = b.slot_users == users.none
    empty = torch.cat([no_slot, torch.zeros_like(no_slot[:, :1])], dim=1)
    out["session"] = net.heads["session"](
        torch.cat([h, gap, b.slot_numbers, new_when], dim=1)
    ).masked_fill(empty, _MASKED)
    session = e["session"](b.tokens[:, 1])
    class_input = torch.cat([h, gap, new_when, session, e["class"](b.slot_class)], dim=1)
    out["class"] = net.heads["class"](class_input).masked_fill(
        ~users.allowed_t(b.tokens[:, 1], b.slot_users), _MASKED
    )
    if net.runs:
        slot = b.tokens[:, 1].clamp(max=_SLOTS - 1)
        numbers = b.slot_numbers[:, : _SLOTS * _SLOT_NUMERIC].reshape(-1, _SLOTS, _SLOT_NUMERIC)
        chosen = torch.cat(
            [
                numbers[torch.arange(slot.shape[0]), slot],
                b.slot_numbers[:, _SLOTS * _SLOT_NUMERIC :].gather(1, slot[:, None]),
            ],
            dim=1,
        )
        out["again"] = net.again(torch.cat([class_input, chosen], dim=1))[:, 0]
    job = torch.cat(
        [
            h,
            gap,
            session,
            e["class"](b.tokens[:, 2]),
            b.class_numbers,
            e["procs"](b.class_previous[:, 0]),
            e["request"](b.class_previous[:, 1]),
            e["fraction"](b.class_previous[:, 2]),
            *([new_when] if net.job_when else []),
        ],
        dim=1,
    )
    for k, head in enumerate(("procs", "request", "fraction", "status"), start=3):
        logits = net.heads[head](job)
        token = b.tokens[:, k]
        if net.repeat and head in _COPIED:
            last = b.class_previous[:, k - 3]
            # The class's previous token gets the copy gate's logit ("none": no token).
            copied = _one_hot(last, logits.shape[1] + 1)[:, :-1]
            logits = logits + copied * net.copy[head](job)
            job = torch.cat([job, e[head](token), (token == last).float()[:, None]], dim=1)
        else:
            job = torch.cat([job, e[head](token)], dim=1)
        out[head] = logits
    return out


class _NumpyNet:
    """The trained network's weights as numpy arrays, for one-job-at-a-time sampling."""

    def __init__(self, net: _Network) -> None:
        def layers(seq: Iterable[nn.Module]) -> list[tuple[np.ndarray, np.ndarray]]:
            return [
                (m.weight.detach().double().numpy().T.copy(), m.bias.detach().double().numpy())
                for m in seq
                if isinstance(m, nn.Linear)
            ]

        self.embed = {
            h: m.weight.detach().double().numpy()  # type: ignore[operator]
            for h, m in net.embed.items()
        }
        self.trunk = layers(net.trunk)
        self.heads = {h: layers(m) for h, m in net.heads.items()}  # type: ignore[arg-type]
        self.copy = {h: layers([m]) for h, m in net.copy.items()} if net.repeat else {}
        self.again = layers(net.again) if net.runs else None

    @staticmethod
    def mlp(
        layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray, *, last_relu: bool = False
    ) -> np.ndarray:
        for k, (w, b) in enumerate(layers):
            x = x @ w + b
            if last_relu or k < len(layers) - 1:
                x = np.maximum(x, 0.0)
        return x


def _hot(index: int, size: int) -> np.ndarray:
    out = np.zeros(size)
    out[index] = 1.0
    return out


def _draw(logits: np.ndarray, u: float, weights: np.ndarray | None = None) -> int:
    p = np.exp(logits - logits.max())
    if weights is not None:
        p = p * weights
    cumulative = np.cumsum(p)
    return int(min(np.searchsorted(cumulative, u * cumulative[-1], side="right"), p.size - 1))


# The heads a repeated job (``again``) takes from its user's last job instead of drawing.
_AGAIN_TAKES = ("class", "procs", "request")


def _loss(network: _Network, batch: _Batch, users: _Users) -> torch.Tensor:
    """Cross-entropy of every head, summed, each a mean over the rows. With the "again"
    head (``runs``), its own over the continued sessions' rows, and a repeated job's
    class, processors and request (taken, not drawn) count for nothing."""
    logits = _logits(network, batch, users)
    total = batch.tokens.new_zeros((), dtype=torch.float32)
    drawn = (~batch.again).float() if network.runs else None
    for k, head in enumerate(_HEADS):
        if drawn is not None and head in _AGAIN_TAKES:
            each = functional.cross_entropy(logits[head], batch.tokens[:, k], reduction="none")
            total = total + (each * drawn).mean()
        else:
            total = total + functional.cross_entropy(logits[head], batch.tokens[:, k])
    if network.runs:
        continued = batch.tokens[:, 1] < _SLOTS
        each = functional.binary_cross_entropy_with_logits(
            logits["again"], batch.again.float(), reduction="none"
        )
        total = total + (each * continued.float()).mean()
    return total
