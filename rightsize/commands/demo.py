"""``rightsize demo cascade``: a training run too long for its partition, finished as a cascade.

    rightsize demo cascade [--json] [--epochs N] [--samples N] [--segment-overhead-s S]
                           [--timeout-s S]

On the local SLURM (``scripts/slurm/start.sh``: partition ``debug`` allows 1 minute), it
starts every agent embedded (in-process bus, a fresh SQLite knowledge base under
``$RIGHTSIZE_HOME/demo/``) and asks the Intelligence Plane, in words, for the seeded CNN
of ``examples/cascade/train.py`` (about four minutes of single-threaded work) "as soon as
possible in the debug queue". What follows is the agents' own doing: no estimator knows
the script, so Profiling runs it downsized through the Scheduler and stores the measured
profile; Resource Estimation answers from it; Optimization plans a cascade of one-minute
jobs; the Scheduler submits segment after segment, each training until its work budget
runs out, checkpointing every epoch and exiting, until the last progress line says every
epoch is done. Beside it (from the first segment on), the same script runs uninterrupted
as a plain subprocess, and the two final weight files are compared tensor by tensor.

``--json`` prints ``{"segments", "final_state", "slurm_job_ids", "jobcomp_log",
"weights_match_uninterrupted"}`` and, for the curious, the plan id, the profiling jobs,
every decision with its reason, and timings. Exit status 1 when the cascade did not
complete or the weights differ, 2 when no SLURM answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import typer
from pydantic import BaseModel, Field

from agents.events import PlanRequested, ScheduleDecision, decode_event
from agents.rescheduler import submitted
from agents.topics import JOBS, PLANS
from knowledge_base.errors import InvalidInputError, RightsizeError
from knowledge_base.records import PlanStatus
from knowledge_base.workload import DNNTraining, Goals, WorkloadSpec
from rightsize.commands.center import AGENT_NAMES, center_config, running_center
from rightsize.output import fail
from rightsize.settings import Settings
from tools.actuators.slurm_catalog import controller_answers, slurm_config

__all__ = ["CascadeDemoResult", "app", "cascade_command", "run_cascade_demo"]

app = typer.Typer(help="Demonstrations on the local cluster.", no_args_is_help=True)

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "cascade" / "train.py"
OVERHEAD_S = 20  # start-up and checkpoint slack per one-minute segment (the default)
_DONE = (PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED)


class CascadeDemoResult(BaseModel):
    segments: int = Field(description="Cascade segments the training ran in")
    final_state: str = Field(description="The plan's final status")
    slurm_job_ids: list[str] = Field(description="The training's SLURM jobs, in order")
    jobcomp_log: str | None = Field(description="SLURM's job completion log")
    weights_match_uninterrupted: bool
    plan_id: str
    reason: str
    profiling_job_ids: list[str]
    decisions: list[str]
    work_dir: str
    elapsed_s: float
    reference_s: float


def _jobcomp_log() -> str | None:
    try:
        config = slurm_config()
    except RightsizeError:
        return None
    found = re.search(r"^JobCompLoc\s*=\s*(\S+)", config, re.MULTILINE)
    return found.group(1) if found else None


def _same_weights(a: Path, b: Path) -> bool:
    import torch

    if not a.exists() or not b.exists():
        return False
    left, right = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


async def run_cascade_demo(
    settings: Settings,
    *,
    epochs: int = 40,
    samples: int = 8192,
    batch_size: int = 64,
    timeout_s: float = 1800,
    overhead_s: int = OVERHEAD_S,
    script: Path = SCRIPT,
    say: Callable[[str], None] = lambda line: None,
) -> CascadeDemoResult:
    """Run the demo; ``say`` gets a line per decision as it happens."""
    if not await asyncio.to_thread(controller_answers):
        raise InvalidInputError(
            "the cascade demo runs on a real SLURM and none answers (start one with "
            "scripts/slurm/start.sh and export the SLURM_CONF it prints)",
            field="executor",
            value=settings.executor,
        )
    if not await asyncio.to_thread(script.is_file):
        raise InvalidInputError(
            "the demo's training script is missing", field="--script", value=str(script)
        )
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    home = settings.home.expanduser().resolve() / "demo" / f"cascade-{stamp}"
    demo = settings.model_copy(
        update={
            "home": home,
            "kb_url": None,
            "mongo_url": None,
            "kafka_bootstrap": None,
            "executor": "slurm",
            "approval": "auto",
            "checkpoint_overhead_s": overhead_s,
            "poll_interval_s": 2.0,
        }
    )
    from agents.center import publish  # the agents load when the demo runs

    config = center_config(demo, AGENT_NAMES, embedded=True)
    plan_id = f"demo-cascade-{stamp}"
    command = f"{sys.executable} {script} --checkpoint-dir . --samples {samples}"
    spec = WorkloadSpec(
        name="cascade-cnn",
        user="demo",
        workload=DNNTraining(
            model=str(script.relative_to(script.parents[2])) if script == SCRIPT else str(script),
            dataset_samples=samples,
            input_shape=[3, 32, 32],
            epochs=epochs,
            batch_sizes=[batch_size],
            checkpointable=True,
            command=command,
        ),
        goals=Goals(systems=[demo.local_system]),
    )
    reference_dir = home / "reference"
    reference_dir.mkdir(parents=True, exist_ok=True)
    reference_log = (home / "reference.out").open("wb")
    reference: asyncio.subprocess.Process | None = None
    reference_took: list[float] = []

    async def run_reference() -> None:
        # Started with the cascade's first segment, not before: the profiling run then
        # measures the script without this one competing for the CPU.
        nonlocal reference
        began = time.monotonic()
        reference = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            "--checkpoint-dir",
            str(reference_dir),
            "--epochs",
            str(epochs),
            "--samples",
            str(samples),
            "--batch-size",
            str(batch_size),
            stdout=reference_log,
            stderr=asyncio.subprocess.STDOUT,
        )
        await reference.wait()
        reference_took.append(time.monotonic() - began)

    timing: asyncio.Task[None] | None = None
    decisions: list[str] = []
    profiling: list[str] = []
    try:
        async with running_center(demo, config.agents, config=config) as center:
            say(f"center: agents {', '.join(center.names)} on {', '.join(center.executors)}")
            watch = center.bus.consumer([JOBS, PLANS], group_id="demo-narrator")
            await watch.start()
            await publish(
                center.bus,
                PlanRequested(
                    plan_id=plan_id,
                    spec=spec,
                    text="as soon as possible, in the debug queue",
                ),
                correlation_id=plan_id,
                source="rightsize demo",
            )
            deadline = time.monotonic() + timeout_s
            while True:
                for record in await watch.poll(max_records=100, timeout_s=1.0):
                    event = decode_event(record.value)
                    if isinstance(event.payload, ScheduleDecision):
                        d = event.payload
                        line = (
                            f"{d.plan_id[:24]}: {d.action}"
                            + (f" -> job {d.new_job_id}" if d.new_job_id else "")
                            + f": {d.reason}"
                        )
                        decisions.append(line)
                        say(line)
                        if d.plan_id == plan_id and timing is None:
                            timing = asyncio.create_task(run_reference())
                        if d.new_job_id and d.plan_id != plan_id:
                            with contextlib.suppress(RightsizeError):
                                made = await center.kb.get_plan(d.plan_id)
                                if made.purpose == "profiling":  # as its maker said
                                    profiling.append(d.new_job_id)
                plan = None
                with contextlib.suppress(RightsizeError):
                    plan = await center.kb.get_plan(plan_id)
                if plan is not None and plan.status in _DONE:
                    break
                if time.monotonic() > deadline:
                    raise InvalidInputError(
                        f"the cascade did not finish in {timeout_s:.0f} s",
                        field="--timeout-s",
                        value=timeout_s,
                    )
            await watch.stop()
            plan = await center.kb.get_plan(plan_id)
    finally:
        if timing is not None:
            try:
                await asyncio.wait_for(asyncio.shield(timing), timeout=timeout_s)
            except TimeoutError:
                if reference is not None:
                    reference.kill()
                await timing
        reference_log.close()
    jobs = submitted(plan)
    work_dir = config.home / "jobs" / plan_id
    return CascadeDemoResult(
        segments=len({s.index for s in jobs}),
        final_state=plan.status.value,
        slurm_job_ids=[s.job_id for s in jobs if s.job_id],
        jobcomp_log=await asyncio.to_thread(_jobcomp_log),
        weights_match_uninterrupted=await asyncio.to_thread(
            _same_weights, work_dir / "final.pt", reference_dir / "final.pt"
        ),
        plan_id=plan_id,
        reason=plan.reason,
        profiling_job_ids=profiling,
        decisions=decisions,
        work_dir=str(work_dir),
        elapsed_s=round(time.monotonic() - started, 1),
        reference_s=round(reference_took[0], 1) if reference_took else -1.0,
    )


@app.command("cascade")
def cascade_command(
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    epochs: int = typer.Option(40, "--epochs", min=1, help="Training epochs (40: ~4 min of work)"),
    samples: int = typer.Option(8192, "--samples", min=64, help="Synthetic samples per epoch"),
    overhead_s: int = typer.Option(
        OVERHEAD_S,
        "--segment-overhead-s",
        min=5,
        max=55,
        help="Seconds of each one-minute job kept for start-up and checkpoint (more: shorter jobs)",
    ),
    timeout_s: float = typer.Option(1800, "--timeout-s", min=60, help="Give up after this long"),
) -> None:
    """Train a CNN through >= 3 one-minute SLURM jobs; check it matches an uninterrupted run."""
    settings = Settings()

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        result = asyncio.run(
            run_cascade_demo(
                settings,
                epochs=epochs,
                samples=samples,
                timeout_s=timeout_s,
                overhead_s=overhead_s,
                say=say,
            )
        )
    except RightsizeError as error:
        fail(error, as_json)
    if as_json:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    else:
        jobs = ", ".join(result.slurm_job_ids)
        same = "match" if result.weights_match_uninterrupted else "DIFFER from"
        print(
            f"{result.final_state}: {result.segments} segments, jobs {jobs}; final weights "
            f"{same} the uninterrupted run's ({result.elapsed_s:.0f} s; reference "
            f"{result.reference_s:.0f} s)"
        )
        print(f"work dir {result.work_dir}; jobcomp log {result.jobcomp_log}")
    ok = result.final_state == PlanStatus.COMPLETED.value and result.weights_match_uninterrupted
    if not ok:
        raise typer.Exit(code=1)
