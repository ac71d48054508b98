"""Run one relay agent against a Kafka broker, as its own process.

    python -m agents.worker --bootstrap 127.0.0.1:9092 --kb /tmp/kb.db --agent relay \\
        --in rightsize.diagnostics.in --out rightsize.diagnostics.out

The relay answers every ``diagnostic.ping`` (or ``diagnostic.pong``) with a
``diagnostic.pong`` on ``--out``, or does nothing with it when ``--out`` is not given:
the smallest real agent, with every guarantee of ``AgentRunner``. The tests kill it
with SIGKILL to check that nothing is lost or done twice, and the benchmark chains two
of them. SIGTERM and SIGINT stop it gracefully; it logs its health on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from agents.bus.kafka import KafkaBus, KafkaSettings
from agents.events import Envelope, PingRequested, Ponged
from agents.runtime import Action, Agent, AgentRunner, Emit, Observation, RunnerSettings
from agents.topics import DEAD_LETTER, DIAGNOSTICS
from knowledge_base.sqlite import SQLiteKnowledgeBase

__all__ = ["RelayAgent", "main", "parse_args", "run_worker"]

log = logging.getLogger("agents.worker")


class RelayAgent(Agent[Observation]):
    """Answers each ping with a pong carrying its sequence number (and relays pongs too,
    so relays chain: ping -> A -> pong -> B -> pong)."""

    def __init__(
        self, name: str, topics: Sequence[str], out_topic: str | None, delay_s: float = 0.0
    ) -> None:
        self.name = name
        self.topics = tuple(topics)
        self.out_topic = out_topic
        self.delay_s = delay_s

    async def sense(self, event: Envelope) -> Observation | None:
        if not isinstance(event.payload, PingRequested | Ponged):
            return None
        if self.delay_s:  # stands in for real work (a KB read, a model call)
            await asyncio.sleep(self.delay_s)
        return Observation(event=event)

    def decide(self, observation: Observation) -> list[Action]:
        if self.out_topic is None:
            return []
        payload = observation.event.payload
        assert isinstance(payload, PingRequested | Ponged)  # sense let nothing else through
        return [
            Emit(
                payload=Ponged(seq=payload.seq, agent=self.name, note=payload.note),
                topic=self.out_topic,
            )
        ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m agents.worker", description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT")
    p.add_argument("--kb", required=True, help="SQLite knowledge base file")
    p.add_argument("--agent", required=True, help="Agent name (consumer group and dedupe scope)")
    p.add_argument(
        "--in", dest="topics", action="append", help=f"Input topic (default {DIAGNOSTICS})"
    )
    p.add_argument("--out", default=None, help="Topic for the pongs; none: a no-op agent")
    p.add_argument("--group", default=None, help="Consumer group (default: the agent name)")
    p.add_argument("--dead-letter", default=DEAD_LETTER, help="Dead-letter topic")
    p.add_argument("--partitions", type=int, default=4, help="Partitions of the topics it creates")
    p.add_argument("--delay-ms", type=float, default=0.0, help="Simulated work per event")
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    p.add_argument("--rebalance-timeout-ms", type=int, default=3000)
    p.add_argument("--start-timeout-s", type=float, default=120.0)
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


async def run_worker(args: argparse.Namespace) -> int:
    settings = KafkaSettings(
        bootstrap_servers=args.bootstrap,
        client_id=args.agent,
        linger_ms=args.linger_ms,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms,
        start_timeout_s=args.start_timeout_s,
    )
    agent = RelayAgent(args.agent, args.topics or [DIAGNOSTICS], args.out, args.delay_ms / 1000)
    runner_settings = RunnerSettings(
        group_id=args.group, batch_size=args.batch_size, dead_letter_topic=args.dead_letter
    )
    runner: AgentRunner | None = None
    connecting = asyncio.current_task()

    def on_signal() -> None:
        if runner is not None:
            runner.stop()  # finish the event in hand, commit, return
        elif connecting is not None:
            connecting.cancel()  # still waiting for the broker: nothing in hand

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        async with SQLiteKnowledgeBase(args.kb) as kb, KafkaBus(settings) as bus:
            # The topics must exist before subscribing: Tansu cannot add partitions
            # later, and a topic auto-created by a publish gets the broker's default.
            out = [args.out] if args.out else []
            await bus.create_topics(
                [*agent.topics, *out, args.dead_letter], partitions=args.partitions
            )
            runner = AgentRunner(agent, bus, kb, runner_settings)
            await runner.run()
    except asyncio.CancelledError:
        if runner is not None:
            raise
        log.info("stopped before the broker answered")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(run_worker(args))


if __name__ == "__main__":
    sys.exit(main())
