"""In-model node rows: fx node -> kernel mapping, per-run scale, the in-model flag in the
shape trees, and leave-one-GPU-out folds that drop the left-out GPU's node rows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tools.estimators.gpu import train
from tools.estimators.gpu.features import class_features
from tools.estimators.gpu.inmodel import load_in_model_rows, merge_rows, node_kernel
from tools.estimators.gpu.kernels import KernelRows
from tools.estimators.gpu.opcost import ClassModel, fit_class, spec_columns
from tools.estimators.gpu.specs import GpuSpec


def _row(
    op: str, target: str, shapes: str, out: str, meta: str = "{}", ms: float = 1.0
) -> dict[str, str]:
    return {
        "op": op,
        "target": target,
        "meta": meta,
        "input_shapes": shapes,
        "output_shape": out,
        "fw_latency": str(ms),
    }


def test_nodes_map_to_the_kernel_their_shapes_describe() -> None:
    linear_meta = (
        "{'nn_module_stack': OrderedDict([('q', <class 'torch.nn.modules.linear.Linear'>)])}"
    )
    assert node_kernel(_row("call_module", "q", "[[8, 512, 1024]]", "(8, 512, 4096)", linear_meta))
    assert node_kernel(
        _row("call_module", "q", "[[8, 512, 1024]]", "(8, 512, 4096)", linear_meta)
    ) == ("linear", {"B": 1, "M": 4096, "N": 4096, "K": 1024})
    addmm = "<built-in method addmm of type object at 0x1>"
    assert node_kernel(
        _row("call_function", addmm, "[[3840], [4096, 1280], [1280, 3840]]", "(4096, 3840)")
    ) == ("linear", {"B": 1, "M": 4096, "N": 3840, "K": 1280})
    matmul = "<built-in method matmul of type object at 0x1>"
    assert node_kernel(
        _row("call_function", matmul, "[[4, 20, 1024, 64], [4, 20, 64, 1024]]", "(4,)")
    ) == ("bmm", {"B": 80, "M": 1024, "N": 1024, "K": 64})
    softmax = "<function softmax at 0x1>"
    assert node_kernel(_row("call_function", softmax, "[[4, 20, 1024, 1024]]", "(1,)")) == (
        "softmax",
        {"B": 4 * 20 * 1024, "H": 1024},
    )
    add = "<built-in function add>"
    kind, dims = node_kernel(
        _row("call_function", add, "[[8, 512, 1024], [1, 512, 1024]]", "(8, 512, 1024)")
    ) or ("", {})
    assert kind == "elementwise" and dims == {"N": 8 * 512 * 1024, "Inputs": 2.0, "Heavy": 0.0}
    # Views and scalar bookkeeping launch nothing.
    assert node_kernel(_row("call_method", "view", "[[8, 512, 1024], [1]]", "(8, 512)")) is None
    assert node_kernel(_row("call_function", add, "[[1]]", "(1,)")) is None


def _write_run(root: Path, gpu: str, scale_to_ms: float) -> None:
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "models" / "bert_large.json").write_text("{}")
    (root / "device_configs").mkdir(exist_ok=True)
    (root / "device_configs" / f"{gpu}.json").write_text(
        json.dumps(
            {"Device": gpu, "Num_Sm": 40, "Core_Per_SM": 64, "Freq": 1500,
             "SingleFLOPs": 8000, "Mem_Bw": 300, "L2Cache": 4, "Dev_Mem": 16}
        )
    )  # fmt: skip
    folder = root / "e2e" / gpu
    folder.mkdir(parents=True)
    (folder / "bert_large-inf-512-8.json").write_text(
        json.dumps({"num_layer": 4, "e2e_latency": scale_to_ms, "fw_latency": scale_to_ms})
    )
    linear = (
        "{'nn_module_stack': OrderedDict([('bert.encoder.layer.0', <class 'a.BertLayer'>), "
        "('bert.encoder.layer.0.q', <class 'a.Linear'>)])}"
    )
    dropout = "{'nn_module_stack': OrderedDict([('d', <class 'torch.nn.Dropout'>)])}"
    header = "op,target,meta,input_shapes,output_shape,fw_latency\n"
    lines = [
        # A layer node (counted 4 times in the run) and a head node (once): 4 x 2 + 2 = 10.
        f'call_module,q,"{linear}","[[8, 512, 1024]]","(8, 512, 1024)",2.0',
        'call_function,<built-in function add>,{},"[[8, 512, 1024], [8, 512, 1024]]",'
        '"(8, 512, 1024)",2.0',
        # An identity dropout (inference): far below its roofline, no kernel ran.
        f'call_module,d,"{dropout}","[[8, 512, 1024]]","(8, 512, 1024)",0.001',
    ]
    with gzip.open(folder / "bert_large-inf-512-8.csv.gz", "wt", encoding="utf-8") as handle:
        handle.write(header + "\n".join(lines) + "\n")


def test_node_latencies_are_scaled_to_the_whole_run(tmp_path: Path) -> None:
    _write_run(tmp_path, "gpu_a", scale_to_ms=5.0)  # the nodes sum to 10 ms: x0.5
    rows = load_in_model_rows(tmp_path, ("gpu_a",))
    assert rows["linear"].latency_ms.tolist() == pytest.approx([1.0], rel=1e-3)
    assert rows["elementwise"].latency_ms.tolist() == pytest.approx([1.0], rel=1e-3)
    assert rows["linear"].in_model_mask.all() and len(rows["conv"]) == 0
    assert rows["linear"].dims["M"].tolist() == [4096.0]


SPECS = {
    "slow": GpuSpec.of(Num_Sm=40, Core_Per_SM=64, Freq=1100, SingleFLOPs=5000, Mem_Bw=200,
                       L2Cache=2, Dev_Mem=8),
    "fast": GpuSpec.of(Num_Sm=108, Core_Per_SM=64, Freq=1400, SingleFLOPs=19000, Mem_Bw=1500,
                       L2Cache=40, Dev_Mem=40),
}  # fmt: skip


def _linear_rows(gpu: str, count: int, factor: float, in_model: bool, seed: int) -> KernelRows:
    rng = np.random.default_rng(seed)
    dims = {k: 2.0 ** rng.integers(8, 13, count).astype(float) for k in ("M", "N", "K")}
    dims["B"] = np.ones(count)
    spec = spec_columns(SPECS[gpu], count)
    roofline, _ = class_features("linear", dims, spec)
    # Inside a model, shallow products (K <= 512) run x1.5 slower than deep ones.
    shape = np.where(dims["K"] <= 512, 1.5, 1.0) if in_model else np.ones(count)
    return KernelRows(
        "linear",
        dims,
        np.full(count, gpu),
        roofline * factor * shape,
        spec,
        np.full(count, in_model),
    )


def test_trees_learn_the_in_model_shape_effect_and_levels_stay_isolated() -> None:
    isolated = [_linear_rows("slow", 400, 2.0, False, 0), _linear_rows("fast", 400, 1.2, False, 1)]
    nodes = [_linear_rows("slow", 200, 1.4, True, 2), _linear_rows("fast", 200, 0.84, True, 3)]
    merged = merge_rows(merge_rows(isolated[0], nodes[0]), merge_rows(isolated[1], nodes[1]))
    model = fit_class(merged)
    plain = fit_class(merge_rows(isolated[0], isolated[1]))
    assert model.in_model_feature and not plain.in_model_feature
    # The GPU levels come from the isolated kernels alone.
    assert model.levels == pytest.approx(plain.levels, abs=1e-9)
    probe = _linear_rows("fast", 200, 1.0, True, 4)
    inside = model.shape_ms(probe.dims, probe.spec, in_model=True)
    alone = model.shape_ms(probe.dims, probe.spec, in_model=False)
    ratio = inside / alone
    shallow = probe.dims["K"] <= 512
    # Isolated kernels show no K effect; in-model ones do, and only the flag shows it.
    assert np.median(ratio[shallow]) / np.median(ratio[~shallow]) == pytest.approx(1.5, rel=0.15)
    assert np.median(alone[shallow] / (probe.latency_ms[shallow] / 1.5)) == pytest.approx(
        np.median(alone[~shallow] / probe.latency_ms[~shallow]), rel=0.1
    )
    # Saved and loaded, the flag still reaches the trees.
    again = ClassModel.from_json(model.to_json())
    np.testing.assert_allclose(again.shape_ms(probe.dims, probe.spec), inside, rtol=1e-6)


def test_leave_one_gpu_out_fold_drops_that_gpus_node_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = merge_rows(
        _linear_rows("slow", 30, 2.0, False, 0), _linear_rows("slow", 5, 1.4, True, 1)
    )
    fast = merge_rows(
        _linear_rows("fast", 30, 1.2, False, 2), _linear_rows("fast", 5, 0.8, True, 3)
    )
    data = {"linear": merge_rows(slow, fast)}
    seen: list[KernelRows] = []
    monkeypatch.setattr(train, "OP_CLASSES", ("linear",))

    def fake_fit(rows: KernelRows) -> KernelRows:
        seen.append(rows)
        return rows

    monkeypatch.setattr(train, "fit_class", fake_fit)
    train.fit_all(data, exclude="fast")
    (rows,) = seen
    assert set(rows.gpu.tolist()) == {"slow"}
    assert int(rows.in_model_mask.sum()) == 5  # the other GPU's node rows stay
