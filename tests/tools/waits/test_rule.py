"""The planner's fixed rule, as ``tools.waits.rule`` scores it and as plans show it."""

from __future__ import annotations

from datetime import UTC, datetime

from knowledge_base.catalog import Catalog, NodeType, Partition, System
from knowledge_base.records import JobState
from tools.actuators.model import QueueEntry
from tools.planning.queue import PoolState, QueueModel, QueueSnapshot
from tools.waits.rule import rule_interval, rule_starts
from tools.waits.snapshot import WaitSnapshot

NOW = datetime(2024, 4, 16, 14, 0, tzinfo=UTC)
SYSTEM = System(
    name="lab",
    center="lab",
    node_types=[NodeType(name="n", cores=4, memory_mb=8000)],
    partitions=[
        Partition(name="long", node_type="n", max_nodes=4, max_cores_per_node=4,
                  max_memory_mb=8000, max_minutes=2880),
    ],
)  # fmt: skip


def test_rule_starts_match_the_planners_wait() -> None:
    # 4 nodes busy for a 10 h limit started 1 h ago: the rule expects max(0.4 x 10 - 1,
    # 0.5 x (10 - 1)) = 4.5 h more
    running = QueueEntry(
        job_id="1", state=JobState.RUNNING, partition="long", nodes=4,
        time_limit_s=36000, start_time=datetime(2024, 4, 16, 13, 0, tzinfo=UTC),
    )  # fmt: skip
    model = QueueModel(
        [
            QueueSnapshot(
                system="lab",
                taken_at=NOW,
                pools=[PoolState(name="all", node_type="n", total_nodes=4)],
                jobs=[running],
            )
        ],
        Catalog(systems=[SYSTEM]),
    )
    planned = model.wait(SYSTEM, SYSTEM.partition("long"), 2, 3600)
    t = NOW.timestamp()
    snapshot = WaitSnapshot.model_validate(
        {
            "taken_at": t,
            "total_procs": 4,
            "running": [{"job_id": "1", "procs": 4, "submit_s": t - 3600, "start_s": t - 3600,
                         "requested_s": 36000}],
            "pending": [{"job_id": "2", "procs": 2, "submit_s": t, "requested_s": 3600}],
        }
    )  # fmt: skip
    assert planned.wait_s == rule_starts(snapshot)[0] == 4.5 * 3600
    assert planned.p10_s is not None and planned.p90_s is not None
    assert planned.p10_s <= planned.wait_s <= planned.p90_s
    assert "p10-p90" in planned.basis


def test_the_interval_widens_with_the_wait() -> None:
    short_low, short_high = rule_interval(600)
    long_low, long_high = rule_interval(36000)
    assert 0 <= short_low <= 600 <= short_high
    assert long_low <= 36000 <= long_high
    assert long_high - long_low > short_high - short_low


def test_a_rule_saying_now_gets_a_band_above_zero() -> None:
    # measured: when the rule says "now", the real wait was rarely under half an hour
    low, high = rule_interval(0.0)
    assert 0.0 < low < high
    assert rule_interval(30.0)[0] > 0.0
