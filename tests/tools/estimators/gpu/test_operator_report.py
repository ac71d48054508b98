"""benchmarks/gpu_measured.py's per-operator check: CUDA's operator names meet the trace's."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.gpu_measured import operator_report
from tools.estimators.gpu.specs import datasheet_spec

KEY = "named:mlp[]:b256:sgd:fp32"
ROW = {
    "key": KEY,
    "source": "named",
    "name": "mlp",
    "class_name": "",
    "params": {},
    "batch_size": 256,
    "optimizer": "sgd",
    "precision": "fp32",
}


def test_profiled_operators_meet_their_traced_names(tmp_path: Path) -> None:
    ops = [
        ("aten::addmm", 2000.0),
        ("aten::clamp_min_", 400.0),  # what relu_ runs as on CUDA
        ("aten::_foreach_add_", 300.0),  # the optimizer's update
        ("aten::_foreach_mul_", 100.0),
        ("aten::copy_", 1000.0),  # nothing in the trace
        ("void some_kernel<float>(float*)", 5000.0),  # a kernel line, not an operator
    ]
    profile = {"key": KEY, "ops": [{"op": op, "count": 1, "self_device_us": us} for op, us in ops]}
    path = tmp_path / "x-kernels.jsonl"
    path.write_text(json.dumps(profile) + "\n", encoding="utf-8")
    report = operator_report(path, {KEY: ROW}, datasheet_spec("NVIDIA H100 80GB HBM3"))
    cells = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in report.splitlines()
        if line.startswith("| ")
    ]
    rows = {row[0]: row for row in cells}
    assert rows["addmm"][3] == "2.00"
    assert rows["relu_"][3] == "0.40"
    assert rows["optimizer update"][3] == "0.40"  # both _foreach_ calls
    assert rows["all of these"][3] == "2.80"
    assert "Profiled, not traced (ms): copy_ 1.00" in report
    assert "some_kernel" not in report
    # A configuration the steps file lacks is skipped; with none left, no table.
    assert operator_report(path, {}, datasheet_spec("NVIDIA H100 80GB HBM3")) == ""
