"""One configuration in a forked child: what it measures, and failures kept as records."""

from __future__ import annotations

from knowledge_base.records import ProfileStatus
from tools.profiling.profiler import ProfileConfig, profile, rss_mb

TINY = ProfileConfig(
    family="mlp",
    params={"depth": 2, "width": 64, "features": 32, "num_classes": 10},
    batch_size=8,
    warmup=1,
    iterations=3,
)


def test_a_tiny_configuration_measures_time_memory_and_flops() -> None:
    outcome = profile(TINY)
    record = outcome.record
    assert record is not None and record.status is ProfileStatus.OK, record
    assert record.iteration_s is not None and record.iteration_s > 0
    assert record.iteration_s_spread is not None and record.iteration_s_spread >= 0
    # A tiny MLP may add no pages above the post-import baseline: 0 is a valid reading.
    assert record.peak_memory_mb is not None and record.peak_memory_mb >= 0
    assert record.flops and record.parameters == 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert record.hardware["threads"] == 1 and record.hardware["cpu_model"]
    samples = outcome.measurement["iteration_samples_s"]
    assert isinstance(samples, list) and len(samples) == 3


def test_the_child_starts_from_the_parents_resident_set() -> None:
    outcome = profile(TINY)
    start, parent = outcome.measurement["rss_start_mb"], outcome.measurement["parent_rss_mb"]
    assert isinstance(start, float) and isinstance(parent, float)
    # The child maps the parent's resident file pages first: its baseline is the parent's.
    assert abs(start - parent) < 0.05 * parent + 8
    assert rss_mb() > 0


def test_an_allocation_past_the_memory_limit_is_recorded_as_out_of_memory() -> None:
    # 4096 x 4096 floats (64 MiB) a weight: past glibc's largest mmap threshold (32 MiB), so
    # each is a new mapping the cap refuses. 2048 x 2048 (16 MiB) could come from heap the
    # parent had freed but kept mapped, and once passed after other tests in the process.
    big = TINY.model_copy(update={"params": {"depth": 2, "width": 4096, "features": 4096}})
    record = profile(big, memory_limit_mb=1).record
    assert record is not None and record.status is ProfileStatus.OUT_OF_MEMORY


def test_a_configuration_that_raises_is_recorded_as_crashed_with_the_reason() -> None:
    bad = TINY.model_copy(update={"params": {"depth": 2, "colour": 1}})
    record = profile(bad).record
    assert record is not None and record.status is ProfileStatus.CRASHED
    assert "colour" in record.error


def test_a_child_past_its_time_limit_is_killed_and_recorded() -> None:
    record = profile(TINY, timeout_s=0.0).record
    assert record is not None and record.status is ProfileStatus.CRASHED
    assert "timed out" in record.error


def test_configurations_over_the_compute_budget_are_skipped_not_run() -> None:
    heavy = TINY.model_copy(update={"max_train_gflops": 1e-9})
    outcome = profile(heavy)
    assert outcome.record is None and "budget" in outcome.skipped


def test_the_config_id_is_stable_and_ignores_the_budget() -> None:
    assert TINY.config_id == TINY.model_copy(update={"max_train_gflops": 5.0}).config_id
    assert TINY.config_id != TINY.model_copy(update={"repeat": 1}).config_id
