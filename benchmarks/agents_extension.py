"""Agents in the loop with and without extending a job's limit in place.

    .venv/bin/python benchmarks/agents_extension.py [TRACE.swf.gz] [--jobs 100] [--history 1500]

Replays the same window of a trace on the simulated cluster (EASY) with the users'
requests and with the agents, once with ``extend_in_place`` off and once on, and prints
mean wait, mean bsld, kills and resubmissions of each column.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from simulations.agents_loop import compare_with_agents
from simulations.workload import load_swf

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "data"
    / "traces"
    / "SDSC-SP2-1998-4.2-cln.swf.gz"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--history", type=int, default=1500)
    args = parser.parse_args()
    trace = load_swf(args.trace)
    print(f"{trace.name}: jobs {args.history + 1}-{args.history + args.jobs}, EASY")
    print(f"{'column':<28}{'wait s':>9}{'bsld':>7}{'killed':>8}{'resub':>7}")
    for extend in (False, True):
        with tempfile.TemporaryDirectory(prefix="rightsize-extension-") as home:
            began = time.perf_counter()
            c = asyncio.run(
                compare_with_agents(
                    trace,
                    policy="easy",
                    jobs=args.jobs,
                    history_jobs=args.history,
                    home=Path(home),
                    extend_in_place=extend,
                )
            )
        if not extend:
            p = c.plain
            print(
                f"{'users requests':<28}{p.mean_wait_s:>9.0f}{p.mean_bsld:>7.2f}{p.killed:>8}{0:>7}"
            )
        a = c.agents
        name = "agents, extension in place" if extend else "agents"
        print(
            f"{name:<28}{a.mean_wait_s:>9.0f}{a.mean_bsld:>7.2f}{a.killed:>8}"
            f"{a.resubmissions:>7}   ({time.perf_counter() - began:.0f} s)"
        )


if __name__ == "__main__":
    main()
