"""One status read against a knowledge base of many plans (a busy center's day or two).

    python benchmarks/status.py                 # 50,000 plans, median of 5 reads
    python benchmarks/status.py --plans 5000 --runs 9 --json

Fills a fresh SQLite knowledge base with ``--plans`` plans (every 50th in flight, the rest
ended; one to three segments each, spread over 40 partitions) through ``put_plan``, then
times, each the median of ``--runs``:

- ``list every plan``: ``kb.list_plans()``, what one status read and one metrics scrape
  cost while they loaded every plan to count them;
- ``status read``: ``collect_status(kb)``, what ``GET /api/status`` (shared by every page
  polling within a second) and ``rightsize center status`` read;
- ``metrics refresh``: ``CenterMetrics.refresh(kb)``, what a ``/metrics`` scrape reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.metrics import CenterMetrics  # noqa: E402
from knowledge_base.records import (  # noqa: E402
    CascadeSegment,
    Interval,
    Plan,
    PlanOption,
    PlanStatus,
    ResourceEstimate,
    SegmentState,
)
from knowledge_base.sqlite import SQLiteKnowledgeBase  # noqa: E402
from knowledge_base.workload import GenericJob, WorkloadSpec  # noqa: E402
from rightsize.observability.status import collect_status  # noqa: E402

_ENDED = (PlanStatus.COMPLETED, PlanStatus.COMPLETED, PlanStatus.FAILED, PlanStatus.CANCELLED)
_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _plan(i: int) -> Plan:
    user = f"user{i % 300}"
    spec = WorkloadSpec(
        name=f"job{i}", user=user, workload=GenericJob(application="lmp", nodes=1, cores=8)
    )
    option = PlanOption(
        system="cluster",
        partition=f"part{i % 40}",
        node_type="n",
        nodes=1,
        cores_per_node=8,
        memory_mb=4096,
        walltime_s=3600,
    )
    estimate = ResourceEstimate(
        option=option,
        runtime_s=Interval(point=1800, low=1500, high=2400),
        memory_mb=Interval(point=2000, low=1500, high=3000),
        estimator_id="history-runtime-1",
    )
    in_flight = i % 50 == 0
    count = 1 + i % 3
    segments = [
        CascadeSegment(
            index=k,
            walltime_s=3600,
            job_id=str(10 * i + k),
            state=SegmentState.RUNNING if in_flight and k == count - 1 else SegmentState.COMPLETED,
        )
        for k in range(count)
    ]
    return Plan(
        id=f"plan-{i:06d}",
        user=user,
        spec=spec,
        status=PlanStatus.RUNNING if in_flight else _ENDED[i % len(_ENDED)],
        option=option,
        estimate=estimate,
        segments=segments,
        reason=f"option 1 of 12, the cheapest within the deadline (job {i})",
        created_at=_T0 + timedelta(seconds=i),
    )


async def _median_s(read: Callable[[], Awaitable[object]], runs: int) -> float:
    await read()  # warm: the page cache, the first query plan
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        await read()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


async def run(plans: int, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        async with SQLiteKnowledgeBase(Path(tmp) / "kb.db") as kb:
            began = time.perf_counter()
            for i in range(plans):
                await kb.put_plan(_plan(i))
            filled_s = time.perf_counter() - began
            metrics = CenterMetrics(timeout_s=600)
            return {
                "plans": plans,
                "fill_s": filled_s,
                "list every plan": await _median_s(kb.list_plans, runs),
                "status read": await _median_s(lambda: collect_status(kb, timeout_s=600), runs),
                "metrics refresh": await _median_s(lambda: metrics.refresh(kb), runs),
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.plans, args.runs))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['plans']:,} plans stored in {result['fill_s']:.1f} s (put_plan, one by one)")
    for name in ("list every plan", "status read", "metrics refresh"):
        print(f"{name:<18} {1000 * result[name]:9.1f} ms  (median of {args.runs})")


if __name__ == "__main__":
    main()
