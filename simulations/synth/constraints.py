"""The rules every emitted synthetic trace obeys: enforced on emission, checked per rule.

Seed 003's published synthetic traces had non-integer node counts in 69-100% of rows and
negative values from the GAN; a trace a scheduler cannot replay is no use however good
its histograms. So :func:`enforce` runs on every table right before it is written, and
:func:`check_trace` re-reads what was written and counts, per rule, the rows that break
it (tests and ``rightsize synth evaluate`` use it; it runs just as well on real traces,
which do break some rules: SDSC-SP2 logs 4,134 jobs running past their request).

The rules (:data:`RULES`):

- ``valid_swf``: every line parses as 18 numbers, under a header giving MaxProcs.
- ``integer_procs_within_machine``: requested and allocated processors are whole
  numbers in 1..MaxProcs.
- ``completed_run_within_request``: a completed job (status 1) ran no longer than it
  asked for.
- ``killed_at_limit``: any other job stopped at its limit at the latest; a job killed
  for running out of time is logged at exactly its request.
- ``submit_increasing``: submit times and job ids strictly increase.
- ``no_negative_values``: submit, run, processors, request and status are known and not
  negative (user may be unknown, -1, as in traces without user ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from simulations.synth.columns import JobTable
from tools.traces.swf import SkipReason, SWFJob, SWFReader, SWFStatus

__all__ = [
    "MAX_SECONDS",
    "RULES",
    "ConstraintReport",
    "RuleResult",
    "check_jobs",
    "check_trace",
    "enforce",
]

RULES: dict[str, str] = {
    "valid_swf": "every line parses as 18 numbers, under a header giving MaxProcs",
    "integer_procs_within_machine": "requested and allocated processors are whole numbers "
    "in 1..MaxProcs",
    "completed_run_within_request": "a completed job (status 1) ran no longer than requested",
    "killed_at_limit": "a job that did not complete stopped at its limit at the latest "
    "(run <= request)",
    "submit_increasing": "submit times and job ids strictly increase",
    "no_negative_values": "submit, run, processors, request and status are known and non-negative",
}

MAX_SECONDS = 10**9
"""Cap on a generated gap, request or run (31 years): keeps sums inside int64."""

_EXAMPLES = 5


def enforce(table: JobTable, *, machine_procs: int, statuses: Sequence[int]) -> JobTable:
    """The table with every rule made true; idempotent.

    Non-finite values (a diverged model) become the smallest legal value. Gaps are whole
    seconds >= 1 so submit times strictly increase; processors are rounded into
    1..machine; a run longer than its request is cut to the request (the job is killed
    at its limit, which is what the scheduler would do); runs are >= 1 s so the
    simulator replays every job. Statuses outside ``statuses`` (those seen in training)
    become completed, or the first seen.
    """
    allowed = np.array(sorted(set(statuses)) or [SWFStatus.COMPLETED], dtype=np.int64)
    fallback = SWFStatus.COMPLETED if SWFStatus.COMPLETED in allowed.tolist() else int(allowed[0])

    def whole(values: np.ndarray, low: float, high: float) -> np.ndarray:
        x = np.asarray(values, dtype=np.float64)
        x = np.where(np.isfinite(x), x, low)
        out: np.ndarray = np.clip(np.rint(x), low, high).astype(np.int64)
        return out

    gaps = whole(table.interarrival_s, 1, MAX_SECONDS)
    procs = whole(table.procs, 1, machine_procs)
    request = whole(table.requested_time_s, 1, MAX_SECONDS)
    run = np.minimum(whole(table.run_s, 1, MAX_SECONDS), request)
    status = whole(table.status, float(allowed.min()), float(allowed.max()))
    status = np.where(np.isin(status, allowed), status, fallback).astype(np.int64)
    user = np.asarray(table.user)
    user = np.where(np.isfinite(user.astype(np.float64)), user, -1).astype(np.int64)
    user = np.maximum(user, -1)
    return JobTable(
        interarrival_s=gaps.astype(np.float64),
        procs=procs,
        requested_time_s=request,
        run_s=run,
        status=status,
        user=user,
    )


class RuleResult(BaseModel):
    """One rule over one trace: rows checked, rows breaking it, a few of them."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    description: str
    checked: int = Field(ge=0)
    violations: int = Field(ge=0)
    examples: list[str] = Field(default_factory=list)


class ConstraintReport(BaseModel):
    """Every rule over one trace; ``passed`` when no row breaks any rule."""

    model_config = ConfigDict(extra="forbid")

    source: str
    rows: int = Field(ge=0, description="Job lines read, parsed or not")
    rows_with_violations: int = Field(ge=0)
    machine_procs: int | None
    rules: list[RuleResult]
    passed: bool = Field(description="No row breaks any rule")
    share_of_rows_passing: float = Field(ge=0, le=1)

    def rule(self, name: str) -> RuleResult:
        return next(r for r in self.rules if r.rule == name)


def _column(jobs: Sequence[SWFJob], name: str) -> np.ndarray:
    """A field as float64, unknown (None) as NaN; floats kept so 2.5 processors show."""
    return np.array(
        [np.nan if (v := getattr(job, name)) is None else float(v) for job in jobs],
        dtype=np.float64,
    )


def check_jobs(
    jobs: Sequence[SWFJob],
    *,
    machine_procs: int | None,
    source: str = "",
    skipped: Sequence[tuple[int, SkipReason, str | None, str]] = (),
    header_problem: str | None = None,
) -> ConstraintReport:
    """Count, per rule, the jobs breaking it.

    ``skipped`` are lines a reader could not parse (line number, reason, field,
    message): each breaks ``valid_swf``, ``integer_procs_within_machine`` (a processor
    field that is not a whole number) or ``no_negative_values``, by its reason.
    ``header_problem`` (e.g. no MaxProcs) breaks ``valid_swf`` once.
    """
    n = len(jobs)
    ids = np.array([job.job_id for job in jobs], dtype=np.float64)
    submit = _column(jobs, "submit_time_s")
    run = _column(jobs, "run_s")
    request = _column(jobs, "requested_time_s")
    status = _column(jobs, "status")
    requested_procs = _column(jobs, "requested_procs")
    allocated_procs = _column(jobs, "allocated_procs")
    with np.errstate(invalid="ignore"):
        bad: dict[str, np.ndarray] = {}
        upper = np.inf if machine_procs is None else float(machine_procs)

        def bad_procs(p: np.ndarray, required: bool) -> np.ndarray:
            known = ~np.isnan(p)
            wrong: np.ndarray = known & ((p % 1 != 0) | (p < 1) | (p > upper))
            out: np.ndarray = wrong | (~known if required else np.zeros(n, dtype=bool))
            return out

        bad["integer_procs_within_machine"] = bad_procs(requested_procs, True) | bad_procs(
            allocated_procs, False
        )
        over = ~np.isnan(run) & ~np.isnan(request) & (run > request)
        completed = status == SWFStatus.COMPLETED
        bad["completed_run_within_request"] = completed & over
        bad["killed_at_limit"] = ~completed & over
        increasing = np.ones(n, dtype=bool)
        if n > 1:
            increasing[1:] = (np.diff(submit) > 0) & (np.diff(ids) > 0)
        bad["submit_increasing"] = ~increasing
        generated = np.column_stack([submit, run, requested_procs, request, status])
        negative = np.isnan(generated).any(axis=1) | (np.nan_to_num(generated) < 0).any(axis=1)
        others = [
            _column(jobs, f)
            for f in ("wait_s", "avg_cpu_time_s", "used_memory_kb_per_proc", "user_id")
        ]
        below_unknown = np.column_stack(others) < -1 if others else np.zeros((n, 0), bool)
        bad["no_negative_values"] = negative | below_unknown.any(axis=1)
        bad["valid_swf"] = np.zeros(n, dtype=bool)

    skipped_by_rule: dict[str, list[str]] = {rule: [] for rule in RULES}
    for line_number, reason, field, message in skipped:
        if reason == SkipReason.NOT_A_NUMBER and field in ("requested_procs", "allocated_procs"):
            rule = "integer_procs_within_machine"
        elif reason in (SkipReason.NEGATIVE_TIME, SkipReason.NEGATIVE_VALUE):
            rule = "no_negative_values"
        else:
            rule = "valid_swf"
        skipped_by_rule[rule].append(f"line {line_number}: {message}")
    if header_problem is not None:
        skipped_by_rule["valid_swf"].append(f"header: {header_problem}")

    def describe(rule: str, i: int) -> str:
        label = f"job {int(ids[i])}"
        if rule == "integer_procs_within_machine":
            return (
                f"{label}: requested {requested_procs[i]:g}, allocated "
                f"{allocated_procs[i]:g} processors (machine {machine_procs})"
            )
        if rule in ("completed_run_within_request", "killed_at_limit"):
            return f"{label}: status {status[i]:g}, ran {run[i]:g} s > requested {request[i]:g} s"
        if rule == "submit_increasing":
            return f"{label}: submitted at {submit[i]:g} s"
        return (
            f"{label}: submit {submit[i]:g}, run {run[i]:g}, procs {requested_procs[i]:g}, "
            f"request {request[i]:g}, status {status[i]:g} (nan = unknown)"
        )

    rules = []
    for rule, description in RULES.items():
        extra = skipped_by_rule[rule]
        rules.append(
            RuleResult(
                rule=rule,
                description=description,
                checked=n + len(skipped) + (1 if rule == "valid_swf" else 0),
                violations=int(bad[rule].sum()) + len(extra),
                examples=(
                    extra + [describe(rule, int(i)) for i in np.flatnonzero(bad[rule])[:_EXAMPLES]]
                )[:_EXAMPLES],
            )
        )
    any_bad = np.zeros(n, dtype=bool)
    for mask in bad.values():
        any_bad |= mask
    rows = n + len(skipped)
    broken = int(any_bad.sum()) + len(skipped)
    return ConstraintReport(
        source=source,
        rows=rows,
        rows_with_violations=broken,
        machine_procs=machine_procs,
        rules=rules,
        passed=broken == 0 and all(r.violations == 0 for r in rules),
        share_of_rows_passing=1.0 if rows == 0 else 1.0 - broken / rows,
    )


def check_trace(path: str | Path, *, machine_procs: int | None = None) -> ConstraintReport:
    """Re-read a written trace and check every rule on every line.

    The reader runs with ``check_header=False`` so that a job larger than MaxProcs is
    counted as a violation here rather than silently skipped.
    """
    with SWFReader(path, check_header=False) as reader:
        jobs = list(reader)
        header = reader.header
        report = reader.report
    machine = machine_procs or header.max_procs
    header_problem = None if header.max_procs else "no MaxProcs line"
    skipped = [(i.line_number, i.reason, i.field, i.message) for i in report.issues]
    unlisted = report.skipped - len(skipped)
    if unlisted > 0:
        skipped += [(0, SkipReason.WRONG_FIELD_COUNT, None, "unlisted bad line")] * unlisted
    return check_jobs(
        jobs,
        machine_procs=machine,
        source=str(path),
        skipped=skipped,
        header_problem=header_problem,
    )
