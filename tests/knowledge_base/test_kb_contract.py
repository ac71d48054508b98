"""The KnowledgeBase contract, run against every backend (see the ``kb`` fixture)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from knowledge_base.catalog import Catalog, Partition, System
from knowledge_base.errors import ConflictError, NotFoundError
from knowledge_base.records import (
    CascadeSegment,
    EstimatorRecord,
    EstimatorStatus,
    JobRecord,
    JobState,
    Plan,
    PlanOption,
    PlanStatus,
    ProfileRecord,
    ProfileStatus,
)
from knowledge_base.seed import load_seed_catalog
from knowledge_base.store import JobQuery, KnowledgeBase, OutboxMessage, PlanQuery
from knowledge_base.workload import GenericJob, WorkloadSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _job(job_id: str, user: str = "alice", minutes: int = 0, app: str = "lammps") -> JobRecord:
    return JobRecord(
        job_id=job_id,
        system="pitzer",
        user=user,
        application=app,
        state=JobState.COMPLETED,
        submit_time=T0 + timedelta(minutes=minutes),
        run_s=600,
        requested_walltime_s=3600,
    )


def _plan(plan_id: str, user: str = "alice") -> Plan:
    spec = WorkloadSpec(name="sim", user=user, workload=GenericJob(application="lammps"))
    return Plan(id=plan_id, user=user, spec=spec)


async def test_empty_knowledge_base_has_an_empty_catalog(kb: KnowledgeBase) -> None:
    assert (await kb.get_catalog()).systems == []


async def test_catalog_round_trips_whole(kb: KnowledgeBase) -> None:
    seed = load_seed_catalog()
    await kb.put_catalog(seed)
    assert await kb.get_catalog() == seed
    partition = await kb.get_partition("pitzer", "gpuserial-48core")
    assert partition.gpus_per_node == 2


async def test_put_system_adds_or_replaces_only_that_system(kb: KnowledgeBase) -> None:
    await kb.put_catalog(load_seed_catalog())
    local = System(
        name="local",
        center="lab",
        partitions=[
            Partition(
                name="debug", max_nodes=1, max_cores_per_node=2, max_memory_mb=4096, max_minutes=10
            )
        ],
    )
    await kb.put_system(local)
    await kb.put_system(local.model_copy(update={"center": "lab2"}))
    catalog = await kb.get_catalog()
    assert len(catalog.systems) == 7
    assert catalog.system("local").center == "lab2"
    assert len(catalog.system("pitzer").partitions) == 68


async def test_unknown_system_and_partition_raise_not_found_naming_them(kb: KnowledgeBase) -> None:
    await kb.put_catalog(load_seed_catalog())
    with pytest.raises(NotFoundError, match="'nosuch'"):
        await kb.get_system("nosuch")
    with pytest.raises(NotFoundError, match="'nopart'"):
        await kb.get_partition("pitzer", "nopart")


async def test_jobs_are_keyed_by_system_and_id_and_query_in_submit_order(
    kb: KnowledgeBase,
) -> None:
    await kb.add_jobs([_job("3", minutes=30), _job("1", minutes=10), _job("2", "bob", 20)])
    await kb.add_jobs([_job("1", minutes=10).model_copy(update={"run_s": 700})])  # replace
    everyone = await kb.query_jobs(JobQuery())
    assert [j.job_id for j in everyone] == ["1", "2", "3"]
    assert (await kb.get_job("pitzer", "1")).run_s == 700
    alice = await kb.query_jobs(JobQuery(user="alice"))
    assert [j.job_id for j in alice] == ["1", "3"]
    window = await kb.query_jobs(
        JobQuery(
            submitted_after=T0 + timedelta(minutes=15), submitted_before=T0 + timedelta(minutes=30)
        )
    )
    assert [j.job_id for j in window] == ["2"]
    assert len(await kb.query_jobs(JobQuery(limit=2))) == 2
    latest = await kb.query_jobs(JobQuery(newest_first=True, limit=2))
    assert [j.job_id for j in latest] == ["3", "2"]  # the latest two, newest first
    with pytest.raises(NotFoundError):
        await kb.get_job("pitzer", "99")


async def test_adding_only_new_jobs_keeps_known_ones_and_counts_what_it_added(
    kb: KnowledgeBase,
) -> None:
    await kb.add_jobs([_job("1", minutes=10)])
    added = await kb.add_new_jobs([_job("1").model_copy(update={"run_s": 1}), _job("2", "bob")])
    assert added == 1
    assert (await kb.get_job("pitzer", "1")).run_s == 600  # known: left as it was
    assert await kb.add_new_jobs([_job("1"), _job("2", "bob")]) == 0  # a second import
    assert await kb.count_jobs(JobQuery()) == 2
    assert await kb.count_jobs(JobQuery(user="bob", limit=1)) == 1
    assert await kb.count_jobs(JobQuery(system="nowhere")) == 0


async def test_replacing_a_job_is_compare_and_set_on_the_record_read(kb: KnowledgeBase) -> None:
    first = _job("1", minutes=10)
    assert await kb.replace_job(None, first)  # none stored: inserted
    assert not await kb.replace_job(None, first)  # one is stored now: refused
    ended = first.model_copy(update={"run_s": 900})
    assert await kb.replace_job(first, ended)
    stale = first.model_copy(update={"predicted_runtime_s": 800})
    assert not await kb.replace_job(first, stale)  # read before the end: refused
    assert (await kb.get_job("pitzer", "1")).run_s == 900


async def test_profiles_filter_by_family_and_status(kb: KnowledgeBase) -> None:
    await kb.add_profiles(
        [
            ProfileRecord(id="a", family="resnet", model="resnet18", iteration_s=0.1),
            ProfileRecord(
                id="b",
                family="resnet",
                model="resnet50",
                status=ProfileStatus.OUT_OF_MEMORY,
                error="OOM",
            ),
            ProfileRecord(id="c", family="vgg", model="vgg11", iteration_s=0.2),
        ]
    )
    assert [p.id for p in await kb.query_profiles(family="resnet")] == ["a", "b"]
    ok = await kb.query_profiles(status=ProfileStatus.OK)
    assert [p.id for p in ok] == ["a", "c"]


async def test_promoting_an_estimator_retires_the_previous_one(kb: KnowledgeBase) -> None:
    old = EstimatorRecord(
        id="xgb-1", kind="xgboost", target="runtime_s", created_at=T0, validation={"mape": 0.12}
    )
    new = EstimatorRecord(
        id="xgb-2",
        kind="xgboost",
        target="runtime_s",
        created_at=T0 + timedelta(days=1),
        validation={"mape": 0.08},
    )
    other = EstimatorRecord(id="mem-1", kind="xgboost", target="memory_mb", created_at=T0)
    for record in (old, new, other):
        await kb.put_estimator(record)
    await kb.promote_estimator("mem-1")
    await kb.promote_estimator("xgb-1")
    await kb.promote_estimator("xgb-2")
    assert (await kb.get_estimator("xgb-1")).status is EstimatorStatus.RETIRED
    assert (await kb.promoted_estimator("runtime_s")) == new.model_copy(
        update={"status": EstimatorStatus.PROMOTED}
    )
    assert (await kb.promoted_estimator("memory_mb")) is not None  # other target untouched
    assert [e.id for e in await kb.list_estimators(target="runtime_s")] == ["xgb-2", "xgb-1"]
    with pytest.raises(NotFoundError):
        await kb.promote_estimator("nosuch")


async def test_plan_updates_are_compare_and_set_on_version(kb: KnowledgeBase) -> None:
    stored = await kb.put_plan(_plan("p1"))
    assert stored.version == 1
    approved = await kb.put_plan(stored.model_copy(update={"status": PlanStatus.APPROVED}))
    assert approved.version == 2
    with pytest.raises(ConflictError, match="p1"):
        await kb.put_plan(stored.model_copy(update={"status": PlanStatus.CANCELLED}))
    with pytest.raises(ConflictError):
        await kb.put_plan(_plan("p1"))  # a second "new" plan with the same id
    assert (await kb.get_plan("p1")).status is PlanStatus.APPROVED


async def test_plans_list_by_user_and_status(kb: KnowledgeBase) -> None:
    await kb.put_plan(_plan("a1", "alice"))
    await kb.put_plan(_plan("b1", "bob"))
    assert [p.id for p in await kb.list_plans(user="alice")] == ["a1"]
    assert [p.id for p in await kb.list_plans(status=PlanStatus.DRAFT)] == ["a1", "b1"]
    with pytest.raises(NotFoundError):
        await kb.get_plan("zz")


def _ran(plan: Plan, status: PlanStatus, partition: str, *states: str | None) -> Plan:
    """``plan`` in ``status`` on ``partition``, one submitted segment per state given
    (None: submitted, no monitor report yet), and a planned one that never ran."""
    option = PlanOption(
        system="pitzer",
        partition=partition,
        node_type="n",
        nodes=1,
        cores_per_node=1,
        memory_mb=1024,
        walltime_s=60,
    )
    submitted = [
        CascadeSegment(index=i, walltime_s=60, job_id=f"{plan.id}-{i}", state=state)
        for i, state in enumerate(states)
    ]
    planned = CascadeSegment(index=len(states), walltime_s=60)
    return plan.model_copy(
        update={"status": status, "option": option, "segments": [*submitted, planned]}
    )


async def test_plans_are_counted_by_state_and_their_jobs_by_state_and_partition(
    kb: KnowledgeBase,
) -> None:
    assert await kb.count_plans() == {}
    assert await kb.count_plan_jobs() == {}
    await kb.put_plan(_ran(_plan("a"), PlanStatus.RUNNING, "batch", "completed", "running"))
    await kb.put_plan(_ran(_plan("b"), PlanStatus.FAILED, "debug", "out_of_memory"))
    await kb.put_plan(_plan("c"))  # a draft: no option, no job
    stored = await kb.put_plan(_ran(_plan("d"), PlanStatus.SUBMITTED, "batch", None))
    assert await kb.count_plans() == {
        PlanStatus.RUNNING: 1,
        PlanStatus.FAILED: 1,
        PlanStatus.DRAFT: 1,
        PlanStatus.SUBMITTED: 1,
    }
    assert await kb.count_plan_jobs() == {
        ("completed", "batch"): 1,
        ("running", "batch"): 1,
        ("out_of_memory", "debug"): 1,
        ("submitted", "batch"): 1,
    }
    # an update replaces the plan's jobs: none counted twice, none left behind
    done = _ran(stored, PlanStatus.COMPLETED, "debug", "completed")
    await kb.put_plan(done.model_copy(update={"version": stored.version}))
    assert (await kb.count_plans())[PlanStatus.COMPLETED] == 1
    assert PlanStatus.SUBMITTED not in await kb.count_plans()
    jobs = await kb.count_plan_jobs()
    assert ("submitted", "batch") not in jobs
    assert jobs[("completed", "debug")] == 1


async def test_plans_query_by_state_and_id_newest_first_up_to_a_limit(kb: KnowledgeBase) -> None:
    for plan_id, user in (("p1", "alice"), ("p2", "bob"), ("p3", "alice"), ("p4", "bob")):
        await kb.put_plan(_plan(plan_id, user))
    p1 = await kb.get_plan("p1")
    await kb.put_plan(p1.model_copy(update={"status": PlanStatus.COMPLETED}))  # updated last
    p2 = await kb.get_plan("p2")
    await kb.put_plan(p2.model_copy(update={"status": PlanStatus.FAILED}))  # updated last
    ended = frozenset({PlanStatus.COMPLETED, PlanStatus.FAILED})

    def ids(plans: list[Plan]) -> list[str]:
        return [p.id for p in plans]

    assert ids(await kb.query_plans(PlanQuery())) == ["p1", "p2", "p3", "p4"]  # by creation
    assert ids(await kb.query_plans(PlanQuery(statuses=ended, newest_first=True))) == ["p2", "p1"]
    newest = PlanQuery(statuses=ended, newest_first=True, limit=1)
    assert ids(await kb.query_plans(newest)) == ["p2"]
    assert ids(await kb.query_plans(PlanQuery(newest_first=True, limit=3))) == ["p2", "p1", "p4"]
    drafts = PlanQuery(statuses=frozenset({PlanStatus.DRAFT}), user="alice")
    assert ids(await kb.query_plans(drafts)) == ["p3"]
    assert ids(await kb.query_plans(PlanQuery(ids=frozenset({"p4", "p1", "zz"})))) == ["p1", "p4"]
    assert await kb.query_plans(PlanQuery(ids=frozenset())) == []
    assert await kb.query_plans(PlanQuery(statuses=frozenset())) == []


async def test_completing_an_event_twice_writes_nothing_the_second_time(
    kb: KnowledgeBase,
) -> None:
    out = [OutboxMessage(message_id=f"m{i}", topic="t", key="k", value="{}") for i in range(3)]
    assert not await kb.is_processed("agent", "e1")
    assert await kb.complete_event("agent", "e1", out)
    assert not await kb.complete_event("agent", "e1", out)
    assert await kb.is_processed("agent", "e1")
    assert not await kb.is_processed("other-agent", "e1")  # dedupe is per consumer
    assert [m.message_id for m in await kb.pending_outbox("agent")] == ["m0", "m1", "m2"]
    assert await kb.count_processed("agent") == 1


async def test_outbox_keeps_order_and_forgets_sent_messages(kb: KnowledgeBase) -> None:
    for i in range(5):
        message = OutboxMessage(message_id=f"m{i}", topic="t", key=str(i), value=str(i))
        await kb.complete_event("agent", f"e{i}", [message])
    await kb.complete_event("agent", "e-none")  # no outbox at all
    assert [m.message_id for m in await kb.pending_outbox("agent", limit=2)] == ["m0", "m1"]
    await kb.mark_outbox_sent("agent", ["m0", "m2"])
    assert [m.message_id for m in await kb.pending_outbox("agent")] == ["m1", "m3", "m4"]
    assert await kb.count_processed("agent") == 6


async def test_concurrent_completions_of_one_event_let_exactly_one_win(kb: KnowledgeBase) -> None:
    results = await asyncio.gather(*(kb.complete_event("agent", "same") for _ in range(20)))
    assert sum(results) == 1


async def test_catalog_replacement_is_all_or_nothing(kb: KnowledgeBase) -> None:
    seed = load_seed_catalog()
    await kb.put_catalog(seed)
    with pytest.raises(ValueError, match="duplicate system"):
        # The invalid catalog never reaches the store: models validate before writing.
        await kb.put_catalog(Catalog(systems=[*seed.systems, seed.systems[0]]))
    assert await kb.get_catalog() == seed


async def test_pruning_forgets_old_sent_events_but_keeps_unsent_outboxes(
    kb: KnowledgeBase,
) -> None:
    message = OutboxMessage(message_id="m-unsent", topic="t", key="k", value="{}")
    await kb.complete_event(
        "agent", "old-sent", [message.model_copy(update={"message_id": "m-sent"})]
    )
    await kb.mark_outbox_sent("agent", ["m-sent"])
    await kb.complete_event("agent", "old-unsent", [message])
    await kb.complete_event("agent", "old-no-outbox")
    pruned = await kb.prune_processed(datetime.now(UTC) + timedelta(seconds=1))
    assert pruned == 2
    assert not await kb.is_processed("agent", "old-sent")
    assert await kb.is_processed("agent", "old-unsent")  # its message is still owed
    assert [m.message_id for m in await kb.pending_outbox("agent")] == ["m-unsent"]
    assert await kb.prune_processed(T0) == 0  # nothing that old


async def test_batch_completion_matches_one_at_a_time_semantics(kb: KnowledgeBase) -> None:
    def out(i: int) -> list[OutboxMessage]:
        return [OutboxMessage(message_id=f"m{i}", topic="t", key="k", value=str(i))]

    await kb.complete_event("agent", "e1", out(1))
    results = await kb.complete_events(
        "agent", [("e1", out(1)), ("e2", out(2)), ("e2", out(9)), ("e3", [])]
    )
    assert results == [False, True, False, True]  # a repeat inside the batch is a repeat too
    assert await kb.processed_ids("agent", ["e1", "e2", "e3", "e4", "e1"]) == {"e1", "e2", "e3"}
    assert await kb.processed_ids("other", ["e1"]) == set()
    assert [m.value for m in await kb.pending_outbox("agent")] == ["1", "2"]
    many = [f"x{i}" for i in range(1200)]  # more ids than one SQL statement may carry
    await kb.complete_events("agent", [(e, []) for e in many])
    assert await kb.processed_ids("agent", many) == set(many)
