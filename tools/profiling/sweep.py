"""A resumable profiling sweep: many configurations, one JSONL dataset with provenance.

Each line of the output is a ``SweepRow``: the ``ProfileRecord``, where and when it was
measured (git commit, CPU model, cores, memory, torch version, time) and the raw
measurement (every timed step, the RSS figures). A sweep appends one line per finished
configuration and flushes it, so an interrupted sweep loses at most the configuration
in flight; running it again skips every id already in the file (and in the ``.skipped``
side file, which lists configurations over the compute budget).

The plan is deterministic for a seed: families round-robin, architecture and batch
drawn uniformly from each family's space, threads alternating 1/2, optimizer SGD or
Adam (2:1), and every ``repeat_every``-th slot a repeat of an earlier configuration,
which is what the measurement noise floor is computed from.

Run: ``python -m tools.profiling.sweep --out data/dnn_profiles/cpu_sweep.jsonl``
(or ``rightsize profile sweep``). The parent imports torch once and forks a child per
configuration (see ``tools.profiling.profiler``). Start it with
``OMP_WAIT_POLICY=PASSIVE`` in the environment (``rightsize profile sweep`` does; why:
``tools.profiling.profiler``); OpenMP reads it once, when torch loads.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import ProfileRecord, ProfileStatus, utc_now
from tools.profiling.profiler import ProfileConfig, hardware_descriptors, profile
from tools.profiling.zoo.registry import FAMILIES

__all__ = [
    "Provenance",
    "SweepRow",
    "SweepSummary",
    "load_rows",
    "main",
    "ok_records",
    "plan_configs",
    "provenance",
    "run_sweep",
]

log = logging.getLogger("rightsize.profiling.sweep")

DEFAULT_BUDGET_GFLOPS = 12.0  # ~0.1-0.5 s a step on one core of the development machine
DEFAULT_MAX_PARAMETERS = 16_000_000  # keeps optimizer steps and memory small


class Provenance(BaseModel):
    """Where and when a profile was measured."""

    model_config = ConfigDict(extra="forbid")

    commit: str
    cpu_model: str
    cpu_cores: int
    memory_gb: float
    platform: str
    python: str
    torch: str
    omp_wait_policy: str = ""
    sweep_seed: int | None = None
    started_at: datetime
    recorded_at: datetime = Field(default_factory=utc_now)


class SweepRow(BaseModel):
    """One line of a sweep's JSONL output."""

    model_config = ConfigDict(extra="forbid")

    record: ProfileRecord
    provenance: Provenance
    measurement: dict[str, float | list[float]] = Field(default_factory=dict)


class SweepSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    planned: int
    already_done: int
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    elapsed_s: float = 0.0
    stopped_early: bool = False


def _git_commit(repo: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _memory_gb() -> float:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def provenance(started_at: datetime, seed: int | None = None) -> Provenance:
    import torch

    hardware = hardware_descriptors(threads=1)
    return Provenance(
        commit=_git_commit(Path(__file__).resolve().parents[2]),
        cpu_model=str(hardware["cpu_model"]),
        cpu_cores=int(hardware["cpu_cores"]),
        memory_gb=_memory_gb(),
        platform=platform.platform(),
        python=platform.python_version(),
        torch=str(torch.__version__),
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", ""),
        sweep_seed=seed,
        started_at=started_at,
    )


def plan_configs(
    count: int,
    *,
    seed: int = 0,
    families: Sequence[str] | None = None,
    threads: Sequence[int] = (1, 2),
    repeat_every: int = 40,
    repeats: int = 2,
    max_train_gflops: float = DEFAULT_BUDGET_GFLOPS,
    max_parameters: int = DEFAULT_MAX_PARAMETERS,
) -> list[ProfileConfig]:
    """``count`` configurations, deterministic for ``seed`` (see the module docstring)."""
    rng = random.Random(seed)
    names = list(families or FAMILIES)
    seen: set[str] = set()
    planned: list[ProfileConfig] = []
    originals: list[ProfileConfig] = []
    repeat_queue: list[ProfileConfig] = []
    attempts = 0
    while len(planned) < count and attempts < count * 50:
        attempts += 1
        if repeat_every and len(planned) % repeat_every == repeat_every - 1 and originals:
            if not repeat_queue:
                base = originals[rng.randrange(len(originals))]
                repeat_queue = [
                    base.model_copy(update={"repeat": index}) for index in range(1, repeats + 1)
                ]
            candidate = repeat_queue.pop(0)
        else:
            fam = FAMILIES[names[len(planned) % len(names)]]
            params, batch = fam.sample(rng)
            candidate = ProfileConfig(
                family=fam.name,
                params=params,
                batch_size=batch,
                threads=threads[rng.randrange(len(threads))],
                optimizer="adam" if rng.random() < 1 / 3 else "sgd",
                max_train_gflops=max_train_gflops,
                max_parameters=max_parameters,
            )
        if candidate.config_id in seen:
            continue
        seen.add(candidate.config_id)
        planned.append(candidate)
        if candidate.repeat == 0:
            originals.append(candidate)
    return planned


def load_rows(path: Path) -> list[SweepRow]:
    """Every row of a sweep file; a torn last line (a killed sweep) is ignored."""
    rows: list[SweepRow] = []
    if not path.exists():
        return rows
    with path.open() as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(SweepRow.model_validate_json(line))
            except ValueError:
                log.warning("ignoring an unreadable line in %s", path)
    return rows


def ok_records(rows: Iterable[SweepRow]) -> list[ProfileRecord]:
    """The measurements training may use: status ok, crashes and OOMs left out."""
    return [row.record for row in rows if row.record.status is ProfileStatus.OK]


def _skipped_path(out: Path) -> Path:
    return out.with_name(out.name + ".skipped")


def run_sweep(
    out: Path,
    configs: Sequence[ProfileConfig],
    *,
    seed: int | None = None,
    time_limit_s: float | None = None,
    timeout_s: float = 120.0,
    memory_limit_mb: float = 8192.0,
) -> SweepSummary:
    """Profile every configuration of ``configs`` not yet in ``out``; append as it goes."""
    import torch  # noqa: F401  - imported once here; each child inherits it (fork)

    out.parent.mkdir(parents=True, exist_ok=True)
    done = {row.record.id for row in load_rows(out)}
    skipped_file = _skipped_path(out)
    if skipped_file.exists():
        done |= {line.split()[0] for line in skipped_file.read_text().splitlines() if line}
    todo = [config for config in configs if config.config_id not in done]
    summary = SweepSummary(planned=len(configs), already_done=len(configs) - len(todo))
    started = utc_now()
    began = time.monotonic()
    stop = False

    def _stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        base = provenance(started, seed)
        with out.open("a") as handle, skipped_file.open("a") as skipped:
            for index, config in enumerate(todo):
                if stop or (time_limit_s is not None and time.monotonic() - began > time_limit_s):
                    summary.stopped_early = True
                    break
                outcome = profile(config, timeout_s=timeout_s, memory_limit_mb=memory_limit_mb)
                if outcome.record is None:
                    skipped.write(f"{config.config_id} {outcome.skipped}\n")
                    skipped.flush()
                    summary.skipped += 1
                    continue
                row = SweepRow(
                    record=outcome.record,
                    provenance=base.model_copy(update={"recorded_at": utc_now()}),
                    measurement=outcome.measurement,
                )
                handle.write(row.model_dump_json() + "\n")
                handle.flush()
                os.fsync(handle.fileno())
                if outcome.record.status is ProfileStatus.OK:
                    summary.ok += 1
                else:
                    summary.failed += 1
                if index % 25 == 0:
                    log.info(
                        "%d/%d done (ok %d, failed %d, skipped %d) %.0f s",
                        index + 1,
                        len(todo),
                        summary.ok,
                        summary.failed,
                        summary.skipped,
                        time.monotonic() - began,
                    )
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary.elapsed_s = time.monotonic() - began
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to append to")
    parser.add_argument("--count", type=int, default=2600, help="configurations to plan")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--families", nargs="*", default=None)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--time-limit-s", type=float, default=None)
    parser.add_argument("--budget-gflops", type=float, default=DEFAULT_BUDGET_GFLOPS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        log.warning("OMP_WAIT_POLICY is not PASSIVE: 2-thread timings suffer on a busy machine")
    configs = plan_configs(
        args.count,
        seed=args.seed,
        families=args.families,
        threads=args.threads,
        max_train_gflops=args.budget_gflops,
    )
    summary = run_sweep(args.out, configs, seed=args.seed, time_limit_s=args.time_limit_s)
    print(json.dumps(summary.model_dump()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
