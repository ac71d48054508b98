"""Batch job traces: the Standard Workload Format (SWF) reader and writer."""

from tools.traces.swf import (
    FIELD_COUNT,
    ParseIssue,
    ParseReport,
    SkipReason,
    SWFHeader,
    SWFJob,
    SWFReader,
    SWFStatus,
    SWFWriter,
    parse_header,
    read_swf,
    write_swf,
)

__all__ = [
    "FIELD_COUNT",
    "ParseIssue",
    "ParseReport",
    "SWFHeader",
    "SWFJob",
    "SWFReader",
    "SWFStatus",
    "SWFWriter",
    "SkipReason",
    "parse_header",
    "read_swf",
    "write_swf",
]
