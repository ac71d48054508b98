"""``rightsize center status``: the status page's picture in the terminal, or as JSON.

It asks the running center's status server (``--status-port``) first; when nothing
answers there it reads the knowledge base itself, which knows the plans, jobs and
estimators but not the agents' health or the recent events (``parts_up["center"]``
says which it was).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from pydantic import ValidationError
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from knowledge_base.errors import InvalidInputError, RightsizeError
from knowledge_base.store import KnowledgeBase
from rightsize.observability.status import StatusSnapshot, collect_status
from rightsize.settings import Settings
from rightsize.wiring import knowledge_base

__all__ = ["fetch_status", "load_status", "render_status", "status_from_kb"]

_STATE_STYLE = {
    "running": "green",
    "submitted": "green",
    "approved": "green",
    "completed": "blue",
    "failed": "red",
    "timeout": "red",
    "out_of_memory": "red",
    "awaiting_approval": "yellow",
    "pending": "yellow",
}


def fetch_status(url: str, token: str | None, timeout_s: float = 5.0) -> StatusSnapshot | None:
    """The picture from a status server; None when nothing answers at ``url``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    endpoint = url.rstrip("/") + "/api/status"
    try:
        response = httpx.get(endpoint, headers=headers, timeout=timeout_s)
    except httpx.HTTPError:
        return None
    if response.status_code == 401:
        raise InvalidInputError(
            "the status server wants a bearer token (from `rightsize mcp add-user NAME`)",
            field="--token",
            value="(none)" if not token else "(not accepted)",
        )
    if response.status_code != 200:
        raise RightsizeError(f"{endpoint} answered {response.status_code}")
    try:
        snapshot = StatusSnapshot.model_validate_json(response.content)
    except ValidationError as exc:
        raise RightsizeError(f"{endpoint} did not answer a status: {exc}") from exc
    snapshot.parts_up["center"] = True
    return snapshot


async def status_from_kb(kb: KnowledgeBase, simulations_dir: Path | None) -> StatusSnapshot:
    snapshot = await collect_status(kb, simulations_dir=simulations_dir)
    snapshot.parts_up["center"] = False
    return snapshot


def _state(state: str | None) -> Text:
    if state is None:
        return Text("not submitted", style="dim")
    return Text(state, style=_STATE_STYLE.get(state, ""))


def _minutes(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 60:.1f} min"


def render_status(snapshot: StatusSnapshot, console: Console) -> None:
    parts = "  ".join(
        f"[{'green' if up else 'bold red'}]{part.replace('_', ' ')} {'up' if up else 'DOWN'}[/]"
        for part, up in snapshot.parts_up.items()
    )
    scope = "all users" if snapshot.scope == "all" else f"{snapshot.user}'s plans"
    console.print(f"[bold]Rightsize center[/] at {snapshot.generated_at:%H:%M:%S} UTC ({scope})")
    console.print(parts)
    if not snapshot.parts_up.get("center", True):
        console.print("[dim]no status server answered: agents' health and recent events unknown[/]")

    agents = Table(title="Agents", title_justify="left")
    for column in ("agent", "state", "lag", "handled", "failed", "dead-lettered"):
        agents.add_column(column, justify="left" if column in ("agent", "state") else "right")
    for a in snapshot.agents:
        agents.add_row(
            a.agent,
            _state("running" if a.running else "stopped"),
            "–" if a.consumer_lag is None else str(a.consumer_lag),
            str(a.events_handled),
            str(a.events_failed),
            str(a.events_dead_lettered),
        )
    counts = ", ".join(f"{k} {n}" for k, n in snapshot.plans_by_state.items() if n) or "none"
    jobs = ", ".join(f"{k} {n}" for k, n in snapshot.jobs_by_state.items()) or "none"

    plans = Table(title="Plans in flight (and recently ended)", title_justify="left")
    for column in ("plan", "user", "state", "where", "segments", "reason"):
        plans.add_column(column, overflow="fold")
    for p in snapshot.plans:
        lines = []
        for s in p.segments:
            line = Text(f"#{s.index} ")
            line.append_text(_state(s.state))
            if s.job_id:
                line.append(f" job {s.job_id}")
            line.append(f" {_minutes(s.elapsed_s)} of {_minutes(s.walltime_s)}")
            if s.progress:
                line.append(f" · {s.progress}")
            if s.start is not None:
                line.append(f" · starts {s.start.describe(snapshot.generated_at)}")
            lines.append(line)
        where = f"{p.system}/{p.partition}" if p.system else "–"
        plans.add_row(p.id, p.user, _state(p.status), where, Group(*lines), p.reason)

    console.print(agents if snapshot.agents else "[dim]no agents reported[/]")
    console.print(f"Plans: {counts}.  Jobs: {jobs}.")
    hidden = ", ".join(f"{n} {k}" for k, n in snapshot.hidden.items() if n)
    if hidden:
        console.print(f"[dim]Other users' items not shown: {hidden}[/]")
    console.print(plans)

    if snapshot.failures:
        failures = Table(title="Recent failures", title_justify="left")
        for column in ("time", "state", "plan", "job", "reason"):
            failures.add_column(column, overflow="fold")
        for f in snapshot.failures[:15]:
            failures.add_row(
                f"{f.time:%H:%M:%S}", _state(f.state), f.plan_id or "", f.job_id or "", f.reason
            )
        console.print(failures)
    if snapshot.decisions:
        decisions = Table(title="What the Re-scheduler did", title_justify="left")
        for column in ("time", "action", "plan", "segment", "new job", "reason"):
            decisions.add_column(column, overflow="fold")
        for d in snapshot.decisions[:15]:
            decisions.add_row(
                f"{d.time:%H:%M:%S}",
                d.action,
                d.plan_id,
                str(d.segment_index),
                d.new_job_id or "",
                d.reason,
            )
        console.print(decisions)
    if snapshot.estimators:
        estimators = Table(title="Estimators: live vs validation error", title_justify="left")
        for column in ("target", "estimator", "status", "validation", "live", "last decision"):
            estimators.add_column(column, overflow="fold")
        for e in snapshot.estimators:
            estimators.add_row(
                e.target,
                f"{e.estimator_id} ({e.kind})",
                e.status,
                "–" if e.validation_error is None else f"{e.validation_error:.3f}",
                "–" if e.live_error is None else f"{e.live_error:.3f}",
                e.last_decision or "–",
            )
        console.print(estimators)
    for sim in snapshot.simulations:
        table = Table(title=f"Simulation {sim.name} ({sim.written_at:%Y-%m-%d %H:%M})")
        keys = list(dict.fromkeys(k for run in sim.runs for k in run))[:8]
        for key in keys:
            table.add_column(key)
        for run in sim.runs:
            table.add_row(
                *(f"{v:.3f}" if isinstance(v := run.get(k), float) else str(v or "") for k in keys)
            )
        console.print(table)


def load_status(settings: Settings, url: str, token: str | None) -> StatusSnapshot:
    """From the status server at ``url``, else from the knowledge base the settings name."""
    snapshot = fetch_status(url, token)
    if snapshot is not None:
        return snapshot

    async def from_kb() -> StatusSnapshot:
        async with knowledge_base(settings) as kb:
            return await status_from_kb(kb, settings.home.expanduser() / "simulations")

    return asyncio.run(from_kb())
