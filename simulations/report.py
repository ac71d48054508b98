"""A replay report: PNG plots per run and one HTML page comparing the runs; and any run's
schedule as CSV, one line per job, so anyone can re-check it."""

from __future__ import annotations

import csv
import html
import os
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display here or in CI
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simulations.metrics import bounded_slowdown
from simulations.replay import Schedule

__all__ = [
    "SCHEDULE_COLUMNS",
    "coincidence_note",
    "schedule_label",
    "write_report",
    "write_schedule_csv",
]

SCHEDULE_COLUMNS = (
    "job_id",
    "submit_s",
    "start_s",
    "end_s",
    "procs",
    "run_s",
    "requested_s",
    "killed",
)
"""The schedule file's header: the trace's job id and times (s, the trace's clock), the
processors, the run time the trace recorded, the request (the kill time), killed 0/1."""


def schedule_label(schedule: Schedule) -> str:
    """``policy-estimate``, with the backfill order when it is not queue order."""
    r = schedule.result
    label = f"{r.policy}-{r.estimate}"
    return label if r.order == "fcfs" else f"{label}-{r.order}"


_label = schedule_label

# One line style per estimate kind, one colour per policy (and backfill order): runs that
# share a policy differ by style, runs that share an estimate by colour.
_STYLES = {"user": "-", "last2": "--", "model": ":", "exact": "-."}
_EXTRA_STYLES = ((0, (5, 1, 1, 1)), (0, (1, 2)), (0, (8, 3)))


def _styles(schedules: list[Schedule]) -> list[dict[str, object]]:
    colours = plt.get_cmap("tab10")
    policies: dict[str, int] = {}
    extra: dict[str, int] = {}
    styles: list[dict[str, object]] = []
    for s in schedules:
        r = s.result
        policy = r.policy if r.order == "fcfs" else f"{r.policy}-{r.order}"
        colour = colours(policies.setdefault(policy, len(policies)) % 10)
        style: object = _STYLES.get(r.estimate)
        if style is None:
            index = extra.setdefault(r.estimate, len(extra))
            style = _EXTRA_STYLES[index % len(_EXTRA_STYLES)]
        styles.append({"color": colour, "linestyle": style, "label": _label(s)})
    return styles


def coincidence_note(schedules: list[Schedule]) -> str | None:
    """Why ``user`` and ``last2`` draw the same line, when they do: no user ids in the trace.

    EASY++'s last-2 averages a user's two previous run times; without user ids it has no
    history to average and falls back to the request, which is the ``user`` estimate.
    """
    estimates = {s.result.estimate for s in schedules}
    if not {"user", "last2"} <= estimates:
        return None
    if any(bool((s.workload.user >= 0).any()) for s in schedules):
        return None
    return (
        "user and last2 coincide: the trace has no user ids, so last2 (a user's last two "
        "run times) falls back to the request"
    )


def _finish(fig: Figure, ax: Axes, path: Path, note: str | None) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize="small")
    if note:
        fig.text(0.01, 0.01, note, fontsize="small", ha="left", va="bottom", wrap=True)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_schedule_csv(schedule: Schedule, path: str | Path) -> Path:
    """Write every job's line to ``path`` (whole or not at all: a temporary file beside
    it is renamed into place). Raises ``OSError`` when it cannot be written."""
    target = Path(path)
    w = schedule.workload
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(descriptor, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(SCHEDULE_COLUMNS)
            writer.writerows(
                zip(
                    w.job_ids.tolist(),
                    w.submit_s.tolist(),
                    schedule.start_s.tolist(),
                    schedule.end_s.tolist(),
                    w.procs.tolist(),
                    w.run_s.tolist(),
                    w.req_s.tolist(),
                    schedule.killed.astype(int).tolist(),
                    strict=True,
                )
            )
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would hide it from the re-checkers
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _utilization_series(schedule: Schedule, bins: int = 200) -> tuple[np.ndarray, np.ndarray]:
    start, end, procs = schedule.start_s, schedule.end_s, schedule.workload.procs
    t0, t1 = int(start.min()), int(end.max())
    edges = np.linspace(t0, t1, bins + 1)
    busy = np.zeros(bins)
    for k in range(bins):
        lo, hi = edges[k], edges[k + 1]
        overlap = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0, None)
        busy[k] = (overlap * procs).sum() / ((hi - lo) * schedule.workload.machine_procs)
    return (edges[:-1] - t0) / 86400.0, busy


def write_report(schedules: list[Schedule], directory: str | Path) -> Path:
    """Write wait/bsld distributions and utilization over time, and ``index.html``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    figures = {
        "wait.png": "Wait time distribution",
        "bsld.png": "Bounded slowdown distribution",
        "utilization.png": "Utilization over time",
    }
    styles = _styles(schedules)
    note = coincidence_note(schedules)
    fig, ax = plt.subplots(figsize=(9, 4))
    for s, style in zip(schedules, styles, strict=True):
        wait_h = np.sort(s.wait_s / 3600.0)
        ax.plot(wait_h, np.linspace(0, 1, wait_h.size), **style)  # type: ignore[arg-type]
    ax.set(
        xscale="symlog", xlabel="wait (hours)", ylabel="fraction of jobs", title=figures["wait.png"]
    )
    _finish(fig, ax, out / "wait.png", note)

    fig, ax = plt.subplots(figsize=(9, 4))
    for s, style in zip(schedules, styles, strict=True):
        bsld = np.sort(
            bounded_slowdown(s.wait_s.astype(float), (s.end_s - s.start_s).astype(float))
        )
        ax.plot(bsld, np.linspace(0, 1, bsld.size), **style)  # type: ignore[arg-type]
    ax.set(
        xscale="log",
        xlabel="bounded slowdown",
        ylabel="fraction of jobs",
        title=figures["bsld.png"],
    )
    _finish(fig, ax, out / "bsld.png", note)

    fig, ax = plt.subplots(figsize=(11, 4))
    for s, style in zip(schedules, styles, strict=True):
        days, busy = _utilization_series(s)
        ax.plot(days, busy, linewidth=0.8, **style)  # type: ignore[arg-type]
    ax.set(
        xlabel="days since the first job",
        ylabel="utilization",
        ylim=(0, 1.05),
        title=figures["utilization.png"],
    )
    _finish(fig, ax, out / "utilization.png", note)

    keys = [
        "jobs",
        "dropped",
        "mean_wait_s",
        "p50_wait_s",
        "p90_wait_s",
        "mean_bsld",
        "utilization",
        "killed",
        "makespan_s",
        "jobs_per_s",
    ]
    header = "".join(f"<th>{k}</th>" for k in ["run", *keys])
    rows = []
    for s in schedules:
        data = s.result.model_dump()
        cells = "".join(
            f"<td>{data[k]:,.3f}</td>" if isinstance(data[k], float) else f"<td>{data[k]:,}</td>"
            for k in keys
        )
        rows.append(f"<tr><td>{html.escape(_label(s))}</td>{cells}</tr>")
    trace = html.escape(schedules[0].result.trace) if schedules else ""
    images = "".join(
        f'<h2>{html.escape(title)}</h2><img src="{name}" alt="{html.escape(title)}">'
        for name, title in figures.items()
    )
    page = (
        "<!doctype html><meta charset='utf-8'><title>Rightsize replay</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:.3em .8em;"
        "text-align:right;border-bottom:1px solid #ddd}</style>"
        f"<h1>Replay of {trace}</h1>"
        + (f"<p><b>Note:</b> {html.escape(note)}</p>" if note else "")
        + f"<table><tr>{header}</tr>{''.join(rows)}</table>{images}"
    )
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"
