"""Issue #21's targets per trace in one table: the synthetic traces' fidelity beside the
scheduler trained on them.

A trace's fidelity rows (:class:`~simulations.synth.trace_table.TraceRow`, one per fit and
draw of the sequence model) and its scheduler line
(:class:`~simulations.learned.scheduler_table.TraceSchedulers`) come down to a
:class:`TraceTargets`: the EASY bsld of every draw against the real trace's (target:
within 20%), the largest hour-of-day TV (target: 0.05), and the gap between PPO trained on
synthetic and on real traces (target: the medians within 10%). ``benchmarks/synth.py
--schedulers --fidelity`` prints it.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, computed_field

from knowledge_base.errors import InvalidInputError
from simulations.learned.scheduler_table import TARGET, TraceSchedulers
from simulations.synth.trace_table import TraceRow

__all__ = ["BSLD_TARGET", "HOUR_TV_TARGET", "TraceTargets", "combine", "target_lines", "trace_key"]

BSLD_TARGET = 0.20  # every draw's EASY bsld within 20% of the real trace's
HOUR_TV_TARGET = 0.05  # hour-of-day arrival profile within this total-variation distance


def trace_key(name: str) -> str:
    """A trace's name without its extension and without the ``-firstN`` a cut adds, so
    that a fidelity row and a scheduler line of one trace meet."""
    stem = name.split(".swf")[0]
    return re.sub(r"-first\d+$", "", stem)


class TraceTargets(BaseModel):
    """One trace's line: what its synthetic traces keep and what a scheduler learns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str
    jobs: int  # the real jobs each draw was checked against
    bsld_relative: list[float] = Field(min_length=1)  # per fit and draw, in table order
    hour_tv: list[float] = Field(min_length=1)
    schedulers: TraceSchedulers

    @property
    def misses(self) -> list[str]:
        """The targets missed: ``bsld``, ``hour``, ``PPO``."""
        return [
            name
            for name, met in (
                ("bsld", max(abs(x) for x in self.bsld_relative) <= BSLD_TARGET),
                ("hour", max(self.hour_tv) <= HOUR_TV_TARGET),
                ("PPO", self.schedulers.passed),
            )
            if not met
        ]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fidelity_passed(self) -> bool:
        return not {"bsld", "hour"} & set(self.misses)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return not self.misses


def combine(
    fidelity: Sequence[TraceRow], schedulers: Sequence[TraceSchedulers]
) -> list[TraceTargets]:
    """One :class:`TraceTargets` per scheduler line, in its order, with the sequence
    model's fidelity rows of the same trace; a trace without both is named."""
    rows_of: dict[str, list[TraceRow]] = {}
    for row in fidelity:
        if row.model == "sequence":
            rows_of.setdefault(trace_key(row.trace), []).append(row)
    lines = {trace_key(s.trace) for s in schedulers}
    unmatched = sorted(set(rows_of) ^ lines)
    if unmatched:
        raise InvalidInputError(
            "each trace needs both its sequence model's fidelity rows and its scheduler "
            f"line; one of them is missing for {', '.join(unmatched)}",
            field="trace",
            value=unmatched,
        )
    out = []
    for line in schedulers:
        rows = rows_of[trace_key(line.trace)]
        out.append(
            TraceTargets(
                trace=trace_key(line.trace),
                jobs=rows[0].jobs,
                bsld_relative=[r.bsld_rel for r in rows],
                hour_tv=[r.hour_tv for r in rows],
                schedulers=line,
            )
        )
    return out


def target_lines(rows: Sequence[TraceTargets]) -> list[str]:
    """The table: per trace, the draws' EASY bsld against the real one, the largest hour
    TV, the PPO medians from each source and their gaps, and which targets hold."""
    lines = [
        f"{'trace':<22} {'jobs':>7} {'draws':>5} {'EASY bsld rel (range)':>22} "
        f"{'hour TV max':>11} {'seeds':>5} {'PPO real / synthetic':>21} {'median gap':>10} "
        f"{'paired gap (95%)':>24} {'targets':>7}"
    ]
    for r in rows:
        s = r.schedulers
        bsld = f"{min(r.bsld_relative):+.0%}..{max(r.bsld_relative):+.0%}"
        ppo = f"{statistics.median(s.real):.2f} / {statistics.median(s.synthetic):.2f}"
        paired = f"{s.paired_gap:+.1%} ({s.paired_low:+.1%}..{s.paired_high:+.1%})"
        verdict = "met" if r.passed else "miss " + ",".join(r.misses)
        lines.append(
            f"{r.trace[:22]:<22} {r.jobs:>7} {len(r.bsld_relative):>5} {bsld:>22} "
            f"{max(r.hour_tv):>11.3f} {len(s.real):>5} {ppo:>21} {s.median_gap:>+10.1%} "
            f"{paired:>24} {verdict:>7}"
        )
    lines.append(
        f"# targets: every draw's EASY bsld within {BSLD_TARGET:.0%} of the real trace's, "
        f"hour-of-day TV <= {HOUR_TV_TARGET}, PPO's synthetic-trained median within "
        f"{TARGET:.0%} of the real-trained one"
    )
    return lines
