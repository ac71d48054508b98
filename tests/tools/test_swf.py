"""The SWF reader and writer on every shared trace, round trips, and bad input."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import pytest

from knowledge_base.errors import InvalidInputError
from knowledge_base.records import JobState
from tools.traces import (
    SkipReason,
    SWFHeader,
    SWFJob,
    SWFReader,
    parse_header,
    read_swf,
    write_swf,
)

# file -> (jobs, header MaxProcs), as data/README.md and the headers give them.
TRACES = {
    "SDSC-SP2-1998-4.2-cln.swf.gz": (59_715, 128),
    "CTC-SP2-1996-3.1-cln.swf.gz": (77_222, 338),
    "HPC2N-2002-2.2-cln.swf.gz": (202_871, 240),
    "KTH-SP2-1996-2.1-cln.swf.gz": (28_476, 100),
    "LANL-CM5-1994-4.1-cln.swf.gz": (122_060, 1024),
    "ALCF-Theta-2022.swf.gz": (23_911, 4360),
}

HEADER = """; Version: 2.2
; Computer: Test SP2
; UnixStartTime: 1000000000
; TimeZone: 3600
; MaxProcs: 64
; MaxQueues: 2
; Queue: 1 batch
; Queue: 2 debug
;
"""
GOOD_1 = "1 0 10 100 8 90.5 -1 8 600 -1 1 7 3 2 1 -1 -1 -1"
GOOD_2 = "2 60 5 3000 16 -1 -1 16 3600 -1 0 7 3 2 1 -1 -1 -1"
GOOD_3 = "3 120 0 50 4 -1 -1 4 300 -1 5 8 3 -1 2 -1 -1 -1"


def _write(tmp_path: Path, body: str, name: str = "t.swf") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + body, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", sorted(TRACES))
def test_reader_streams_every_shared_trace_without_skipping_a_line(
    shared_data: Path, name: str
) -> None:
    expected_jobs, max_procs = TRACES[name]
    count = 0
    last_submit = -1
    with SWFReader(shared_data / "traces" / name) as reader:
        assert reader.header.max_procs == max_procs
        for job in reader:
            count += 1
            # Cheap checks on every job: the archive's unknowns were read as None.
            assert job.submit_time_s >= 0
            assert job.run_s is None or job.run_s >= 0
            last_submit = max(last_submit, job.submit_time_s)
    assert count == expected_jobs
    assert reader.report.jobs == expected_jobs
    assert reader.report.skipped == 0
    assert reader.report.header_lines == len(reader.header.lines) > 0
    assert last_submit > 0


def test_unknown_fields_are_none_and_known_ones_keep_their_units(shared_data: Path) -> None:
    with SWFReader(shared_data / "traces" / "KTH-SP2-1996-2.1-cln.swf.gz") as reader:
        first = next(iter(reader))
    # "15 599850 192180 3477 4 -1 -1 4 53940 -1 1 12 12 -1 -1 -1 -1 -1"
    assert first.job_id == 15
    assert (first.submit_time_s, first.wait_s, first.run_s) == (599850, 192180, 3477)
    assert first.avg_cpu_time_s is None
    assert first.used_memory_kb_per_proc is None
    assert first.requested_time_s == 53940
    assert first.executable_id is None
    assert first.end_time_s == 599850 + 192180 + 3477
    assert first.state is JobState.COMPLETED


def test_header_keeps_typed_keys_queues_and_the_number_before_a_comment(
    shared_data: Path,
) -> None:
    with SWFReader(shared_data / "traces" / "CTC-SP2-1996-3.1-cln.swf.gz") as reader:
        header = reader.header
    assert header.max_nodes == 338  # "338 (batch partition; 512 total)"
    assert header.fields["MaxNodes"].startswith("338 (batch")
    assert header.unix_start_time_s == 835823160
    assert header.time_zone_s == -18000
    assert header.installation == "Cornell Theory Center (CTC)"
    assert header.queues[2] == "astro"
    assert header.max_queues == 4


@pytest.mark.parametrize("suffix", [".swf", ".swf.gz"])
def test_writing_then_reading_gives_back_the_same_jobs_and_header_lines(
    shared_data: Path, tmp_path: Path, suffix: str
) -> None:
    header, jobs, _ = read_swf(shared_data / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz")
    out = tmp_path / f"copy{suffix}"
    assert write_swf(out, header, jobs[:2000]) == 2000
    again_header, again_jobs, report = read_swf(out)
    assert again_jobs == jobs[:2000]
    assert again_header.lines == header.lines
    assert again_header == header
    assert report.skipped == 0


def test_header_without_raw_lines_is_written_from_its_fields(tmp_path: Path) -> None:
    header = SWFHeader(max_procs=64, unix_start_time_s=5, queues={1: "batch"})
    out = tmp_path / "built.swf"
    write_swf(out, header, [])
    written = parse_header(out.read_text().splitlines())
    assert (written.max_procs, written.unix_start_time_s, written.queues) == (64, 5, {1: "batch"})


def test_a_truncated_line_is_skipped_with_its_line_number_and_the_rest_is_read(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, f"{GOOD_1}\n2 60 5 3000 16\n{GOOD_3}\n")
    _, jobs, report = read_swf(path)
    assert [job.job_id for job in jobs] == [1, 3]
    assert report.by_reason == {SkipReason.WRONG_FIELD_COUNT: 1}
    (issue,) = report.issues
    assert issue.line_number == HEADER.count("\n") + 2
    assert "got 5" in issue.message


def test_a_non_numeric_field_is_reported_with_its_name(tmp_path: Path) -> None:
    corrupt = GOOD_2.replace("3600", "36x0")
    path = _write(tmp_path, f"{GOOD_1}\n{corrupt}\n{GOOD_3}\n")
    _, jobs, report = read_swf(path)
    assert [job.job_id for job in jobs] == [1, 3]
    (issue,) = report.issues
    assert issue.reason is SkipReason.NOT_A_NUMBER
    assert issue.field == "requested_time_s"
    assert "'36x0'" in issue.message


def test_a_negative_time_other_than_unknown_is_skipped(tmp_path: Path) -> None:
    negative = GOOD_2.replace(" 3000 ", " -30 ")
    path = _write(tmp_path, f"{GOOD_1}\n{negative}\n{GOOD_3}\n")
    _, jobs, report = read_swf(path)
    assert [job.job_id for job in jobs] == [1, 3]
    (issue,) = report.issues
    assert (issue.reason, issue.field) == (SkipReason.NEGATIVE_TIME, "run_s")


def test_a_job_with_more_processors_than_the_header_allows_is_skipped(tmp_path: Path) -> None:
    too_big = GOOD_2.replace(" 16 ", " 128 ")
    path = _write(tmp_path, f"{GOOD_1}\n{too_big}\n{GOOD_3}\n")
    _, jobs, report = read_swf(path)
    assert [job.job_id for job in jobs] == [1, 3]
    (issue,) = report.issues
    assert issue.reason is SkipReason.HEADER_DISAGREES
    assert "MaxProcs 64" in issue.message
    assert issue.line_number == HEADER.count("\n") + 2
    # A caller who knows the header is wrong can keep such jobs.
    _, kept, _ = read_swf(path, check_header=False)
    assert [job.job_id for job in kept] == [1, 2, 3]


def test_the_summary_counts_every_bad_line_by_reason(tmp_path: Path) -> None:
    bad = [
        "9 1 2",
        GOOD_2.replace("3600", "abc"),
        GOOD_2.replace(" 3000 ", " -5 "),
        GOOD_2.replace(" 16 ", " 999 "),
        "8 0 1 1 1 -1 -1 1 1 -1 1 1 1 1 1 -1 -1 -1 extra",
    ]
    path = _write(tmp_path, "\n".join([GOOD_1, *bad, GOOD_3]) + "\n")
    with SWFReader(path) as reader:
        jobs = list(reader)
    report = reader.report
    assert [job.job_id for job in jobs] == [1, 3]
    assert report.skipped == 5
    assert report.by_reason == {
        SkipReason.WRONG_FIELD_COUNT: 2,
        SkipReason.NOT_A_NUMBER: 1,
        SkipReason.NEGATIVE_TIME: 1,
        SkipReason.HEADER_DISAGREES: 1,
    }
    first_line = HEADER.count("\n") + 2
    assert [issue.line_number for issue in report.issues] == list(range(first_line, first_line + 5))


def test_integer_fields_written_as_floats_are_read_as_integers(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD_1.replace(" 600 ", " 600.0 ") + "\n")
    _, jobs, report = read_swf(path)
    assert jobs[0].requested_time_s == 600
    assert report.skipped == 0


def test_issue_list_is_capped_but_the_counts_stay_exact(tmp_path: Path) -> None:
    body = GOOD_1 + "\n" + "\n".join("1 2 3" for _ in range(1500)) + "\n"
    with SWFReader(_write(tmp_path, body)) as reader:
        list(reader)
    assert reader.report.skipped == 1500
    assert len(reader.report.issues) == reader.report.max_issues == 1000


def test_a_gzip_stream_cut_short_keeps_the_jobs_before_the_cut(tmp_path: Path) -> None:
    body = HEADER + "\n".join(GOOD_1.replace("1 0", f"{i} {i}", 1) for i in range(1, 3001))
    whole = gzip.compress(body.encode())
    path = tmp_path / "cut.swf.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    _, jobs, report = read_swf(path)
    assert 0 < len(jobs) < 3000
    assert report.by_reason == {SkipReason.TRUNCATED_FILE: 1}
    assert report.issues[0].line_number > len(jobs)


def test_a_missing_file_is_invalid_input_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="not found") as caught:
        read_swf(tmp_path / "nope.swf")
    assert caught.value.field == "path"


def test_a_file_that_is_not_swf_at_all_is_invalid_input(tmp_path: Path) -> None:
    path = tmp_path / "table.csv"
    path.write_text("job,submit,wait\n" + "\n".join(f"{i},{i},0" for i in range(200)))
    with pytest.raises(InvalidInputError, match="not an SWF trace"):
        read_swf(path)
    fake = tmp_path / "fake.swf.gz"
    fake.write_text(GOOD_1)
    with pytest.raises(InvalidInputError, match="not gzip"):
        read_swf(fake)


def test_to_job_record_places_times_by_the_header_and_converts_memory() -> None:
    header = parse_header(HEADER.splitlines())
    job = SWFJob(
        job_id=7,
        submit_time_s=100,
        wait_s=20,
        run_s=600,
        allocated_procs=8,
        avg_cpu_time_s=None,
        used_memory_kb_per_proc=2048,
        requested_procs=8,
        requested_time_s=3600,
        requested_memory_kb_per_proc=4096,
        status=0,
        user_id=12,
        group_id=3,
        executable_id=None,
        queue_id=1,
        partition_id=None,
        preceding_job_id=None,
        think_time_s=None,
    )
    record = job.to_job_record(header, source="swf:test")
    assert record.submit_time == datetime.fromtimestamp(1_000_000_100, UTC)
    assert record.end_time == datetime.fromtimestamp(1_000_000_720, UTC)
    assert (record.user, record.group, record.application) == ("12", "3", None)
    assert record.state is JobState.FAILED
    assert record.system == "Test SP2"
    assert (record.requested_cores, record.requested_walltime_s) == (8, 3600)
    assert (record.requested_memory_mb, record.used_memory_mb) == (32, 16)
