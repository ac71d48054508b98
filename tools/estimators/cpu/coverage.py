"""What share of a traced step the per-operator CPU model priced, and how.

Every operator of an op graph gets a time from the operator booster, but not every
time rests on a measurement. Each operator falls in one of three classes:

- ``learned``: its ATen operator was timed (``tools.profiling.opsweep``) at sizes up to at
  least half of its FLOPs and bytes: the booster prices it from timings of its own kind;
- ``analytic``: its operator was timed, but only smaller (the booster's target is a time
  per unit of roofline work, ``opcost.work_s``: past the timings the time scales with the
  work at the largest timed operators' rate), or it was never timed but its category was
  (priced from its category's rate);
- ``none``: neither the operator nor its category was ever timed (category ``other``):
  the booster's answer for it is a guess from unrelated operators.

Shares are of the step's FLOPs and of its bytes read and written, the two measures of
work the op graph gives. ``timed_domain`` (stored in the model file as
``meta["timed_domain"]``) is what the timings covered; a model file without it has no
coverage report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge_base.errors import InvalidInputError
from tools.estimators.cpu.dataset import GraphData
from tools.profiling.opgraph import CATEGORIES

__all__ = ["CLASSES", "Coverage", "pricing_coverage", "require_priced", "timed_domain"]

CLASSES = ("learned", "analytic", "none")
_LOG_SCALE = 20.0  # dataset.graph_data's scaling of log1p FLOPs and bytes
_SLACK = math.log(2.0)  # up to twice the largest timed size still counts as timed
MOST = 0.5  # an answer that priced less than this share from timings says so


def timed_domain(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per timed ATen operator, the largest log1p FLOPs and log1p bytes (in + out) it was
    timed at; and the categories timed. From an ``opsweep`` file's zoo and probe items."""
    ops: dict[str, list[float]] = {}
    categories: set[str] = set()
    for item in items:
        if item.get("kind") not in {"zoo", "probe"}:
            continue
        for row in item["ops"]:
            name, category = str(row[0]), str(row[1])
            flops, moved = math.log1p(float(row[3])), math.log1p(float(row[4]) + float(row[5]))
            best = ops.setdefault(name, [0.0, 0.0])
            best[0], best[1] = max(best[0], flops), max(best[1], moved)
            categories.add(category)
    return {
        "ops": {k: [round(v[0], 4), round(v[1], 4)] for k, v in sorted(ops.items())},
        "categories": sorted(categories),
    }


@dataclass(frozen=True, slots=True)
class Coverage:
    """Shares of the step's FLOPs and bytes per pricing class; the operators outside."""

    flops: dict[str, float]
    bytes: dict[str, float]
    unpriced_ops: tuple[str, ...]  # operators of class "none", most work first
    extrapolated_ops: tuple[str, ...]  # timed operators past their timed sizes

    @property
    def learned_share(self) -> float:
        """The share priced from timings: of the FLOPs, or of the bytes where the step has
        no FLOPs the op graph can count."""
        return self.flops["learned"] if sum(self.flops.values()) > 0 else self.bytes["learned"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "flops": {k: round(v, 4) for k, v in self.flops.items()},
            "bytes": {k: round(v, 4) for k, v in self.bytes.items()},
            "unpriced_ops": list(self.unpriced_ops),
            "extrapolated_ops": list(self.extrapolated_ops),
        }

    def line(self) -> str:
        """One line: the shares, and a warning where timings priced less than most."""
        f, b = self.flops, self.bytes
        text = (
            f"priced from operator timings {f['learned']:.0%} of FLOPs / {b['learned']:.0%} "
            f"of bytes, analytically {f['analytic']:.0%} / {b['analytic']:.0%}, not at all "
            f"{f['none']:.0%} / {b['none']:.0%}"
        )
        if self.learned_share < MOST:
            beyond = ", ".join(self.extrapolated_ops[:3] or self.unpriced_ops[:3])
            text += (
                f"; WARNING: less than half of this step's work was priced from timings "
                f"(beyond them: {beyond or 'its operators'}); the time is extrapolated"
            )
        return text


def _shares(weights: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    total = float(weights.sum())
    if total <= 0:
        return dict.fromkeys(CLASSES, 0.0)
    # a part summed in another order can exceed the whole by a rounding: shares stay <= 1
    return {c: min(1.0, float(weights[classes == c].sum()) / total) for c in CLASSES}


def pricing_coverage(data: GraphData, domain: Mapping[str, Any] | None) -> Coverage | None:
    """How ``data``'s operators were priced against ``domain`` (``timed_domain``); None
    without a domain or without the graph's operator names."""
    names = data.ops
    if not domain or names is None or len(names) != data.x.shape[0]:
        return None
    offset = len(CATEGORIES)
    x = data.x.astype(np.float64)
    log_flops = x[:, offset + 1] * _LOG_SCALE
    flops = np.expm1(log_flops)
    moved = np.expm1(x[:, offset + 2] * _LOG_SCALE) + np.expm1(x[:, offset + 3] * _LOG_SCALE)
    log_moved = np.log1p(moved)
    category = [CATEGORIES[int(i)] for i in np.argmax(x[:, :offset], axis=1)]
    timed_ops: Mapping[str, Sequence[float]] = domain.get("ops", {})
    timed_categories = set(domain.get("categories", ())) - {"other"}
    classes = np.array(["none"] * len(names), dtype="<U8")
    for i, name in enumerate(names):
        bound = timed_ops.get(name)
        if bound is not None:
            within = log_flops[i] <= bound[0] + _SLACK and log_moved[i] <= bound[1] + _SLACK
            classes[i] = "learned" if within else "analytic"
        elif category[i] in timed_categories:
            classes[i] = "analytic"
        else:
            classes[i] = "none"

    def ranked(cls: str) -> tuple[str, ...]:
        work: dict[str, float] = {}
        for i, name in enumerate(names):
            if classes[i] == cls:
                work[name] = work.get(name, 0.0) + float(flops[i] / 1e10 + moved[i] / 1e10)
        return tuple(sorted(work, key=lambda k: -work[k]))

    extrapolated = tuple(n for n in ranked("analytic") if n in timed_ops) + tuple(
        n for n in ranked("analytic") if n not in timed_ops
    )
    return Coverage(
        flops=_shares(flops, classes),
        bytes=_shares(moved, classes),
        unpriced_ops=ranked("none"),
        extrapolated_ops=extrapolated,
    )


def require_priced(coverage: Coverage | None, *, most: float = MOST) -> None:
    """InvalidInputError naming the operator where operators nobody timed, nor their kind,
    carry ``most`` or more of the step's FLOPs or bytes (their time would be a guess)."""
    if coverage is None:
        return
    worst = max(coverage.flops["none"], coverage.bytes["none"])
    if worst >= most and coverage.unpriced_ops:
        raise InvalidInputError(
            f"no timing prices operator {coverage.unpriced_ops[0]!r} (nor any operator of "
            f"its kind), and such operators carry {worst:.0%} of the step's work",
            field="operator",
            value=coverage.unpriced_ops[0],
        )
