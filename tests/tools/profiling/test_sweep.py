"""Sweeps: deterministic plans, provenance on every row, resuming where they stopped."""

from __future__ import annotations

from pathlib import Path

from knowledge_base.records import ProfileStatus
from tools.profiling.profiler import ProfileConfig
from tools.profiling.sweep import load_rows, ok_records, plan_configs, run_sweep

TINY = [
    ProfileConfig(
        family="mlp",
        params={"depth": 2, "width": 32, "features": 16, "num_classes": 10},
        batch_size=batch,
        warmup=1,
        iterations=2,
    )
    for batch in (4, 8)
]


def test_a_plan_is_deterministic_covers_every_family_and_repeats_some() -> None:
    first, second = plan_configs(120, seed=3), plan_configs(120, seed=3)
    assert [c.config_id for c in first] == [c.config_id for c in second]
    assert len({c.config_id for c in first}) == 120
    assert len({c.family for c in first}) >= 9
    assert {c.threads for c in first} == {1, 2}
    assert any(c.repeat > 0 for c in first)


def test_rows_carry_provenance_and_a_second_run_resumes(tmp_path: Path) -> None:
    out = tmp_path / "sweep.jsonl"
    summary = run_sweep(out, TINY[:1], seed=7)
    assert summary.ok == 1
    rows = load_rows(out)
    assert rows[0].provenance.cpu_model and rows[0].provenance.commit
    assert rows[0].provenance.sweep_seed == 7
    again = run_sweep(out, TINY, seed=7)
    assert again.already_done == 1 and again.ok == 1
    assert len(load_rows(out)) == 2


def test_a_torn_last_line_is_ignored_and_failures_stay_out_of_training_data(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sweep.jsonl"
    bad = TINY[0].model_copy(update={"params": {"colour": 1}})
    run_sweep(out, [TINY[0], bad])
    with out.open("a") as handle:
        handle.write('{"record": {"id": "trunc')
    rows = load_rows(out)
    assert len(rows) == 2
    assert {r.record.status for r in rows} == {ProfileStatus.OK, ProfileStatus.CRASHED}
    assert [r.status for r in ok_records(rows)] == [ProfileStatus.OK]
