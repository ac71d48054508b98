"""Seed 003's question over several traces: one line per trace, and one plot.

Each trace's :class:`~simulations.learned.rl_experiment.Experiment` (PPO trained on the
real training part and on synthetic traces of the sequence model, seed by seed) comes
down to a :class:`TraceSchedulers`: the heuristics on the same held-out sequences, the
PPO held-out bsld per seed from each source, how many seeds kept their start (the
validation found no epoch better than the heuristic it started as), the gap between the
medians (issue #21's target: within 10%) and the paired gap (seed k of one source
against seed k of the other: same initial weights and window draws), with its 95%
interval.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from knowledge_base.errors import InvalidInputError
from simulations.learned.rl_experiment import Experiment

__all__ = ["TARGET", "TraceSchedulers", "plot", "summarize", "table_lines"]

TARGET = 0.10  # synthetic-trained median within 10% of the real-trained one
_HEURISTICS = ("FCFS", "SJF", "F1", "EASY++")
_REAL, _SYNTHETIC = "real", "synthetic sequence"


class TraceSchedulers(BaseModel):
    """One trace's line; the gaps are derived from the two sources' seeds, pair by pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: str
    heuristics: dict[str, float]  # held-out bsld of FCFS, SJF, F1, EASY++
    real: list[float] = Field(min_length=1)  # PPO trained on the real training part, by seed
    synthetic: list[float]  # PPO trained on the sequence model's traces, same seeds
    real_kept_start: int  # seeds whose kept epoch is 0 (the start)
    synthetic_kept_start: int

    @model_validator(mode="after")
    def _paired(self) -> TraceSchedulers:
        if len(self.synthetic) != len(self.real):
            raise ValueError(
                f"{len(self.synthetic)} synthetic-trained seeds against {len(self.real)} real"
            )
        return self

    @computed_field  # type: ignore[prop-decorator]
    @property
    def median_gap(self) -> float:
        """Median synthetic / median real - 1."""
        return statistics.median(self.synthetic) / statistics.median(self.real) - 1

    def _log_ratios(self) -> tuple[float, float]:
        """Mean of log(synthetic / real) over seeds, and its 95% half-width (normal)."""
        logs = np.log(np.array(self.synthetic) / np.array(self.real))
        if logs.size < 2:
            return float(logs.mean()), math.inf
        return float(logs.mean()), 1.96 * float(logs.std(ddof=1)) / math.sqrt(logs.size)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def paired_gap(self) -> float:
        """Geometric mean over seeds of synthetic / real - 1."""
        return math.exp(self._log_ratios()[0]) - 1

    @computed_field  # type: ignore[prop-decorator]
    @property
    def paired_low(self) -> float:
        centre, spread = self._log_ratios()
        return math.exp(centre - spread) - 1

    @computed_field  # type: ignore[prop-decorator]
    @property
    def paired_high(self) -> float:
        centre, spread = self._log_ratios()
        return math.exp(centre + spread) - 1

    @property
    def passed(self) -> bool:
        return abs(self.median_gap) <= TARGET


def summarize(experiment: Experiment) -> TraceSchedulers:
    """One trace's line; it needs PPO rows of both sources for the same seeds."""
    by_source: dict[str, dict[int, tuple[float, int | None]]] = {_REAL: {}, _SYNTHETIC: {}}
    for r in experiment.rows:
        if r.scheduler == "PPO" and r.trained_on in by_source:
            by_source[r.trained_on][r.seed] = (r.held_out_bsld, r.kept_epoch)
    seeds = sorted(set(by_source[_REAL]) & set(by_source[_SYNTHETIC]))
    if not seeds:
        raise InvalidInputError(
            "no seed has PPO trained on both the real and the synthetic trace",
            source=experiment.trace,
            field="seeds",
            value=sorted(set(by_source[_REAL]) | set(by_source[_SYNTHETIC])),
        )
    return TraceSchedulers(
        trace=experiment.trace,
        heuristics={h: v[0] for h in _HEURISTICS if (v := experiment.held_out(h))},
        real=[by_source[_REAL][k][0] for k in seeds],
        synthetic=[by_source[_SYNTHETIC][k][0] for k in seeds],
        real_kept_start=sum(by_source[_REAL][k][1] == 0 for k in seeds),
        synthetic_kept_start=sum(by_source[_SYNTHETIC][k][1] == 0 for k in seeds),
    )


def table_lines(rows: list[TraceSchedulers]) -> list[str]:
    """The cross-trace table: heuristics, PPO medians (ranges) per source, the gaps."""
    lines = [
        f"{'trace':<14} {'seeds':>5} {'FCFS':>7} {'SJF':>7} {'F1':>7} {'EASY++':>7} "
        f"{'PPO real, median (range)':>26} {'PPO synthetic':>22} {'start kept':>10} "
        f"{'median gap':>10} {'paired gap (95%)':>24}"
    ]
    for r in rows:
        h = [f"{r.heuristics[k]:>7.2f}" if k in r.heuristics else f"{'-':>7}" for k in _HEURISTICS]
        real = f"{statistics.median(r.real):.2f} ({min(r.real):.2f}-{max(r.real):.2f})"
        synthetic = (
            f"{statistics.median(r.synthetic):.2f} ({min(r.synthetic):.2f}-{max(r.synthetic):.2f})"
        )
        kept = f"{r.real_kept_start}/{r.synthetic_kept_start}"
        paired = f"{r.paired_gap:+.1%} ({r.paired_low:+.1%}..{r.paired_high:+.1%})"
        mark = "" if r.passed else " *"
        lines.append(
            f"{r.trace[:14]:<14} {len(r.real):>5} {' '.join(h)} {real:>26} {synthetic:>22} "
            f"{kept:>10} {r.median_gap:>+10.1%} {paired:>24}{mark}"
        )
    lines.append(
        f"# start kept: seeds (real/synthetic) whose validation kept the start; "
        f"*: median gap beyond {TARGET:.0%}"
    )
    return lines


def plot(rows: list[TraceSchedulers], path: Path) -> None:
    """Held-out bsld per seed, real- against synthetic-trained, one panel per trace,
    with the heuristics as lines."""
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(rows), figsize=(3.2 * len(rows), 3.6), squeeze=False)
    for ax, r in zip(axes[0], rows, strict=True):
        for x, values in enumerate((r.real, r.synthetic)):
            jitter = np.linspace(-0.12, 0.12, len(values))
            ax.scatter(x + jitter, values, s=14, alpha=0.8)
            ax.hlines(statistics.median(values), x - 0.25, x + 0.25, colors="black")
        for name, style in (("SJF", "--"), ("F1", ":"), ("EASY++", "-.")):
            if name in r.heuristics:
                ax.axhline(r.heuristics[name], linestyle=style, color="grey", label=name)
        ax.set_xticks([0, 1], ["trained on real", "on synthetic"])
        ax.set_title(f"{r.trace[:14]} ({r.median_gap:+.0%})", fontsize=9)
        ax.set_ylabel("held-out mean bsld")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
