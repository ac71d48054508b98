"""NeuSight's in-model node latencies as training rows for the per-operator shape model.

Each end-to-end run's ``e2e/GPU/MODEL-MODE-SEQ-BATCH.csv.gz`` is the torch.fx graph of one
layer (plus embeddings and head) with every node's own measured latency inside the run.
The same GEMM shape runs at a different efficiency there than in NeuSight's isolated
kernel files (P100 large GEMMs at a median 57% of FP32 peak in isolation, 75% inside the
models; V100 83% against 92%): warm caches and clocks, no launch gaps. These rows teach
the shape trees that in-model efficiency (``KernelRows.in_model``); the step model prices
every kernel as in-model.

A node becomes one kernel of a modelled class from its own input and output shapes:
``Linear``/``Conv1D`` modules and ``addmm`` a ``linear`` product, ``matmul``/``bmm`` of two
batched operands a ``bmm``, ``softmax`` and ``LayerNorm`` their classes, and the
element-wise functions and modules (add, mul, where, dropout, embedding gather, ...)
``elementwise`` over their largest tensor. Views and bookkeeping nodes (size, getitem,
view, permute) are not kernels and are skipped, and so is a node measured below half its
roofline (no kernel of that size ran: dropout in inference is an identity). Only the
forward latency is used: backward nodes fuse two or three kernels (a linear's input and
weight gradients) into one measured figure, and only V100 has training runs.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from tools.estimators.gpu.features import DIMS, OP_CLASSES, class_features
from tools.estimators.gpu.kernels import KernelRows, load_device_specs
from tools.estimators.gpu.neusight import load_e2e_runs

__all__ = ["load_in_model_rows", "merge_rows", "node_kernel"]

MIN_ROOFLINE_FRACTION = 0.5
_MODULE = re.compile(r"<class '([^']+)'>\)\]\)")
_FUNCTION = re.compile(r"(?:method|function) (\w+)")
_HEAVY = ("gelu", "tanh", "pow", "exp", "log", "sigmoid", "silu", "erf", "sqrt")
_ELEMENTWISE_FUNCTIONS = {
    "add",
    "sub",
    "mul",
    "truediv",
    "where",
    "max",
    "min",
    "pow",
    "tanh",
    "gelu",
    "relu",
    "neg",
    "exp",
    "rsqrt",
    "dropout",
    "embedding",
    "masked_fill",
    "masked_fill_",
    "contiguous",
    "to",
}
_ELEMENTWISE_MODULES = {"Dropout", "Embedding", "ReLU", "Tanh", "GELU", "NewGELUActivation"}


def _shapes(text: str) -> list[list[int]]:
    try:
        value = ast.literal_eval(text) if text.strip() else []
    except (ValueError, SyntaxError):
        return []
    return [v for v in value if isinstance(v, list)] if isinstance(value, list) else []


def _output(text: str) -> list[int] | None:
    try:
        value = ast.literal_eval(text) if text.strip() else None
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        return list(value)
    return None


def _name(row: dict[str, str]) -> tuple[str, str]:
    """('module', class name) or ('function', function or method name)."""
    if row["op"] == "call_module":
        found = _MODULE.findall(row["meta"])
        return "module", found[0].rsplit(".", 1)[-1] if found else ""
    if row["op"] in ("call_function", "call_method"):
        match = _FUNCTION.search(row["target"])
        return "function", match.group(1) if match else row["target"]
    return row["op"], ""


def node_kernel(row: dict[str, str]) -> tuple[str, dict[str, float]] | None:
    """The modelled kernel of one fx node row (class, shape dims), or None if none."""
    kind, name = _name(row)
    inputs = _shapes(row["input_shapes"])
    out = _output(row["output_shape"])
    if not inputs:
        return None
    if (kind == "module" and name in ("Linear", "Conv1D")) or (
        kind == "function" and name in ("matmul", "bmm") and len(inputs) >= 2
    ):
        x = inputs[0]
        if kind == "module":
            if out is None:
                return None
            n = out[-1]
        else:
            w = inputs[1]
            if len(w) >= 3 and len(x) >= 3:
                batch = math.prod(x[:-2])
                return "bmm", {"B": batch, "M": x[-2], "N": w[-1], "K": x[-1]}
            n = w[-1]
        return "linear", {"B": 1, "M": math.prod(x[:-1]), "N": n, "K": x[-1]}
    if kind == "function" and name == "addmm" and len(inputs) == 3:
        a, b = inputs[1], inputs[2]
        return "linear", {"B": 1, "M": a[0], "N": b[1], "K": a[1]}
    if (kind == "function" and name == "softmax") or (kind == "module" and name == "LayerNorm"):
        x = inputs[0]
        return "softmax" if name == "softmax" else "ln", {
            "B": math.prod(x[:-1]),
            "H": x[-1],
        }
    if (kind == "module" and name in _ELEMENTWISE_MODULES) or (
        kind == "function" and name in _ELEMENTWISE_FUNCTIONS
    ):
        sizes = [math.prod(x) for x in inputs] + ([math.prod(out)] if out else [])
        if max(sizes) <= 1:
            return None
        tensors = sum(1 for x in inputs if math.prod(x) > 1)
        heavy = any(h in name.lower() for h in _HEAVY)
        return "elementwise", {
            "N": max(sizes),
            "Inputs": float(min(max(tensors, 1), 2)),
            "Heavy": 1.0 if heavy else 0.0,
        }
    return None


_LAYER_ZERO = re.compile(r"\.(?:h|layer|layers)\.0'")


def _run_scale(rows: list[dict[str, str]], path: Path) -> float:
    """Measured forward time of the run over the sum of its nodes' forward latencies.

    The CSV lists the first layer only (its nodes carry ``.h.0``/``.layer.0``/
    ``.layers.0`` in their module stack): the run is the other nodes plus ``num_layer``
    times those. Timed one by one, nodes carry the timer's overhead, which the whole run
    does not (the node sum exceeds BERT-large's forward on A100 by up to x1.5), so each
    node's latency is scaled by this ratio.
    """
    meta = json.loads(path.with_name(path.name.removesuffix(".csv.gz") + ".json").read_text())
    layers = float(meta.get("num_layer", 1))
    total = 0.0
    for row in rows:
        value = float(row["fw_latency"] or 0.0)
        total += value * (layers if _LAYER_ZERO.search(row["meta"]) else 1.0)
    forward = float(meta.get("fw_latency") or meta["e2e_latency"])
    return forward / total if total > 0 else 1.0


def load_in_model_rows(root: Path, gpus: tuple[str, ...]) -> dict[str, KernelRows]:
    """Forward-latency rows of every modelled node of the single-GPU runs on ``gpus``.

    The same runs as ``load_e2e_runs`` (unfused, model config known, no mixture of
    experts); each row keeps its GPU, so a leave-one-GPU-out fold drops them with the
    GPU's isolated kernels.
    """
    specs = load_device_specs(root)
    columns: dict[str, dict[str, list[float]]] = {c: {d: [] for d in DIMS[c]} for c in OP_CLASSES}
    gpu_of: dict[str, list[str]] = {c: [] for c in OP_CLASSES}
    latency: dict[str, list[float]] = {c: [] for c in OP_CLASSES}
    for run in load_e2e_runs(root, gpus):
        mode = "train" if run.train else "inf"
        path = root / "e2e" / run.gpu / f"{run.model}-{mode}-{run.seq}-{run.batch}.csv.gz"
        if not path.exists():
            continue
        with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle))
        scale = _run_scale(rows, path)
        for row in rows:
            if True:
                measured = float(row["fw_latency"] or 0.0) * scale
                found = node_kernel(row) if measured > 0 else None
                if found is None:
                    continue
                op_class, dims = found
                for key in DIMS[op_class]:
                    value = float(dims[key])
                    columns[op_class][key].append(
                        value if key in ("Inputs", "Heavy") else max(value, 1.0)
                    )
                gpu_of[op_class].append(run.gpu)
                latency[op_class].append(measured)
    out = {}
    for op_class in OP_CLASSES:
        gpu = np.array(gpu_of[op_class], dtype=np.str_)
        spec: dict[str, Any] = {
            key: np.array([getattr(specs[g], key) for g in gpu_of[op_class]], dtype=np.float64)
            for key in ("sms", "fp32_gflops", "bandwidth_gbs", "l2_mb")
        }
        found_rows = KernelRows(
            op_class,
            {k: np.array(v, dtype=np.float64) for k, v in columns[op_class].items()},
            gpu,
            np.array(latency[op_class], dtype=np.float64),
            spec,
            np.ones(len(gpu), dtype=bool),
        )
        if len(found_rows):
            # A node timed below half its roofline launched no kernel of that size: an
            # identity (dropout in inference, contiguous() of a contiguous tensor).
            roofline_ms, _ = class_features(op_class, found_rows.dims, found_rows.spec)
            keep = found_rows.latency_ms >= MIN_ROOFLINE_FRACTION * roofline_ms
            found_rows = found_rows.subset(keep)
        out[op_class] = found_rows
    return out


def merge_rows(isolated: KernelRows, in_model: KernelRows) -> KernelRows:
    """Both sets of one class in one ``KernelRows`` (``in_model`` marks the second)."""
    if isolated.op_class != in_model.op_class:
        raise ValueError(f"cannot merge {isolated.op_class} with {in_model.op_class} rows")
    return KernelRows(
        isolated.op_class,
        {k: np.concatenate([v, in_model.dims[k]]) for k, v in isolated.dims.items()},
        np.concatenate([isolated.gpu, in_model.gpu]),
        np.concatenate([isolated.latency_ms, in_model.latency_ms]),
        {k: np.concatenate([v, in_model.spec[k]]) for k, v in isolated.spec.items()},
        np.concatenate([isolated.in_model_mask, in_model.in_model_mask]),
    )
