"""The GPU estimators against training steps measured on a real GPU (an H100, never trained on).

    python benchmarks/gpu_measured.py                      # tables
    python benchmarks/gpu_measured.py --rows out.jsonl     # and every row's numbers
    python benchmarks/gpu_measured.py --only named,file    # sources to check
    python benchmarks/gpu_measured.py --model FILE.json    # another time model file

Reads ``data/gpu_measurements/*-steps.jsonl`` (written by
``python -m tools.profiling.gpu_measure`` on a GPU machine; provenance beside each file)
and, for every configuration measured there, asks this project's estimators what they
predict for that GPU, from its datasheet spec alone (the measured GPU's name picks the
row of ``tools/estimators/gpu/specs.py``'s datasheets):

- **time** (FP32 rows; the per-operator model does not price mixed precision): the
  shipped ``gpu-opcost`` model's step (forward, backward and the optimizer) and its
  forward+backward alone against the medians of the measured steps, APE and whether the
  p10-p90 interval holds the measurement;
- **memory** (every row): the white-box peak (``estimate_gpu_memory``: the step traced
  on fake tensors, the caching allocator replayed) against ``max_memory_allocated`` and
  ``max_memory_reserved`` after two steps, and the CUDA context the estimate assumes for
  the GPU's generation against the device memory the process held outside the allocator.

- **per operator**, where a ``*-kernels.jsonl`` (the PyTorch profiler's self device time
  of one step, per operator) lies beside the steps: each ATen operator's priced time
  beside its measured one, summed over the profiled configurations (the optimizer's
  ``_foreach_*`` calls beside the priced update).

The H100 is none of the GPUs the time model was fitted on (P4, P100, T4, V100, A100), so
these are held-out figures; nothing here is fitted.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from tools.estimators.gpu.baselines import analytic_s, roofline_s
from tools.estimators.gpu.correction import (
    HOST_MIN_ROWS,
    GpuStepCorrection,
    GpuStepRow,
    fit_correction,
)
from tools.estimators.gpu.estimator import load_step_model
from tools.estimators.gpu.memory.context import gpu_generation
from tools.estimators.gpu.memory.estimate import context_mb, estimate_gpu_memory
from tools.estimators.gpu.ops import GpuKernels, kernels_by_operator, kernels_of
from tools.estimators.gpu.specs import GpuSpec, datasheet_spec
from tools.estimators.gpu.trace import trace_training_step
from tools.estimators.model_file import load_user_model
from tools.profiling.zoo.registry import FAMILIES, TrainingTask, named_model

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "data/gpu_measurements"


def task_factory(row: dict[str, Any]) -> Callable[[int], TrainingTask]:
    """The training task a measured row ran, as a function of the batch size (meta device)."""
    if row["source"] == "file":
        user = load_user_model(ROOT / row["name"], row["class_name"])
        return lambda batch: user.task(batch, meta=True)
    if row["source"] == "named":
        found = named_model(row["name"])
        if found is None:
            raise KeyError(row["name"])
        fam, params = found
    else:
        fam, params = FAMILIES[row["name"]], dict(row["params"])

    def build(batch: int) -> TrainingTask:
        with torch.device("meta"):
            return fam.task(params, batch)

    return build


def check_row(
    row: dict[str, Any], spec: GpuSpec, generation: str, model_path: Path | None = None
) -> dict[str, Any]:
    """One measured row against the estimators' answers for ``spec`` (the time model at
    ``model_path``, default the shipped one)."""
    build = task_factory(row)
    batch = row["batch_size"]
    out: dict[str, Any] = {"key": row["key"], "source": row["source"]}
    t0 = time.perf_counter()
    memory = estimate_gpu_memory(
        build,
        batch,
        optimizer=row["optimizer"],
        precision=row["precision"],
        generation=generation,
    )
    out["memory_s"] = time.perf_counter() - t0
    out["allocated_mib"] = (memory.peak_allocated_mb, row["max_memory_allocated_mib"])
    out["reserved_mib"] = (memory.peak_reserved_mb, row["max_memory_reserved_mib"])
    out["context_mib"] = (memory.context_mb, row["outside_allocator_mib"])
    if row["precision"] == "fp32":
        t0 = time.perf_counter()
        task = build(batch)
        kernels = kernels_of(trace_training_step(task))
        parameters = sum(p.numel() for p in task.model.parameters() if p.requires_grad)
        step = load_step_model(model_path).estimate(
            kernels, spec, parameters=parameters, optimizer=row["optimizer"]
        )
        out["time_s"] = time.perf_counter() - t0
        out["operators"] = kernels.host_operators
        out["baselines_fb_s"] = {
            "roofline": roofline_s(kernels, spec),
            "analytic": analytic_s(kernels, spec),
        }
        out["step_ms"] = (step.step_s.model_dump(), row["step_ms"])
        out["forward_backward_ms"] = (
            step.forward_backward_s.model_dump(),
            row["forward_backward_ms"],
        )
    return out


def _ape(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured * 100.0


def _time_summary(rows: list[dict[str, Any]], field: str) -> str:
    apes, under, inside = [], 0, 0
    for r in rows:
        pred, meas = r[field]
        y = meas["p50"] / 1e3
        apes.append(_ape(pred["p50"], y))
        under += pred["p50"] < y
        inside += pred["p10"] <= y <= pred["p90"]
    n = len(apes)
    return (
        f"{n} | {statistics.mean(apes):.1f}% | {statistics.median(apes):.1f}% | "
        f"{max(apes):.1f}% | {under / n:.2f} | {inside / n:.2f}"
    )


def _baselines(rows: list[dict[str, Any]]) -> str:
    cells = []
    for name in ("gpu-opcost", "roofline", "analytic"):
        apes, under = [], 0
        for r in rows:
            y = r["forward_backward_ms"][1]["p50"] / 1e3
            p = (
                r["forward_backward_ms"][0]["p50"]
                if name == "gpu-opcost"
                else r["baselines_fb_s"][name]
            )
            apes.append(_ape(p, y))
            under += p < y
        cells.append(
            f"{statistics.mean(apes):.1f}% / {statistics.median(apes):.1f}% / "
            f"{under / len(rows):.2f}"
        )
    return " | ".join(cells)


# The kind of network a row is, by its zoo family or model file: where the trace's
# kernels come from (recurrent layers, attention, convolutions) matters to the time model.
_KINDS = ("recurrent", "attention", "convolutional", "dense and tabular", "other")
_KIND_OF = {
    "lstm": "recurrent",
    "gru_tagger": "recurrent",
    "transformer": "attention",
    "bert_base": "attention",
    "vit_small": "attention",
    "vit": "attention",
    "hf_gpt2": "attention",
    "resnet": "convolutional",
    "resnet18": "convolutional",
    "resnet34": "convolutional",
    "resnet50": "convolutional",
    "resnet101": "convolutional",
    "resnet_bottleneck": "convolutional",
    "vgg": "convolutional",
    "vgg11": "convolutional",
    "vgg16": "convolutional",
    "mobilenet_v2": "convolutional",
    "small_cnn": "convolutional",
    "audio_conv1d": "convolutional",
    "mlp": "dense and tabular",
    "dlrm": "dense and tabular",
    "mlp_mixer": "dense and tabular",
}


def _kind(key: str) -> str:
    """``_KINDS`` entry of a measured row's key (``named:NAME[]...``, ``sweep:FAMILY[...]``,
    ``file:PATH[...]``)."""
    name = key.split(":", 1)[1].split("[", 1)[0]
    return _KIND_OF.get(Path(name).stem, "other")


def _errors_ms(rows: list[dict[str, Any]]) -> str:
    apes = [_ape(r["step_ms"][0]["p50"] * 1e3, r["step_ms"][1]["p50"]) for r in rows]
    under = sum(r["step_ms"][0]["p50"] * 1e3 < r["step_ms"][1]["p50"] for r in rows)
    return (
        f"{statistics.mean(apes):.1f}% / {statistics.median(apes):.1f}% / {under / len(rows):.2f}"
    )


def _memory_summary(rows: list[dict[str, Any]], field: str) -> str:
    apes = [_ape(*r[field]) for r in rows]
    within = sum(a <= 3.0 for a in apes)
    ratios = [r[field][0] / r[field][1] for r in rows]
    return (
        f"{len(apes)} | {statistics.mean(apes):.1f}% | {statistics.median(apes):.1f}% | "
        f"{max(apes):.1f}% | {within}/{len(apes)} | {min(ratios):.3f}-{max(ratios):.3f}"
    )


def report(checked: list[dict[str, Any]], provenance: dict[str, Any]) -> str:
    lines = [
        f"# {provenance.get('gpu')} ({provenance.get('nvidia_smi')}), torch "
        f"{provenance.get('torch')}, CUDA {provenance.get('cuda')}, cuDNN "
        f"{provenance.get('cudnn')}, measured {provenance.get('measured_at')}, "
        f"TF32 matmul {provenance.get('matmul_allow_tf32')} / cuDNN "
        f"{provenance.get('cudnn_allow_tf32')}",
        "",
        "## Time (FP32): gpu-opcost from the datasheet spec against the measured median",
        "| rows | what | n | MAPE | median APE | max APE | under-predicted | p10-p90 holds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    groups = {
        "README example and model files": ("named:resnet50[", "file:"),
        "named zoo models": ("named:",),
        "zoo space sample": ("sweep:",),
    }
    timed = [r for r in checked if "step_ms" in r]
    for label, prefixes in groups.items():
        picked = [r for r in timed if r["key"].startswith(prefixes)]
        if label == "named zoo models":
            picked = [r for r in picked if not r["key"].startswith("named:resnet50[")]
        if not picked:
            continue
        for field in ("step_ms", "forward_backward_ms"):
            lines.append(f"| {label} | {field} | {_time_summary(picked, field)} |")
    if timed:
        for field in ("step_ms", "forward_backward_ms"):
            lines.append(f"| all | {field} | {_time_summary(timed, field)} |")
        lines += [
            "",
            "Forward+backward against the simple alternatives (MAPE / median APE / "
            "under-predicted; the roofline: every kernel at its FP32 roofline; the analytic "
            "fallback: matrix FLOPs over peak x one Gavel-fitted efficiency + a per-step "
            "overhead):",
            "| rows | n | gpu-opcost | roofline | analytic fallback |",
            "|---|---|---|---|---|",
        ]
        for label, prefixes in groups.items():
            picked = [r for r in timed if r["key"].startswith(prefixes)]
            if label == "named zoo models":
                picked = [r for r in picked if not r["key"].startswith("named:resnet50[")]
            if picked:
                lines.append(f"| {label} | {len(picked)} | {_baselines(picked)} |")
        lines.append(f"| all | {len(timed)} | {_baselines(timed)} |")
        lines += [
            "",
            "By kind of network (every FP32 row; the step's MAPE / median APE / "
            "under-predicted, and the median of predicted / measured):",
            "| kind | n | step | median predicted/measured |",
            "|---|---|---|---|",
        ]
        for kind in _KINDS:
            picked = [r for r in timed if _kind(r["key"]) == kind]
            if picked:
                ratios = [r["step_ms"][0]["p50"] * 1e3 / r["step_ms"][1]["p50"] for r in picked]
                lines.append(
                    f"| {kind} | {len(picked)} | {_errors_ms(picked)} | "
                    f"x{statistics.median(ratios):.2f} |"
                )
    lines += [
        "",
        "## Memory (every row): white-box peak against the measured one",
        "| rows | what | n | MAPE | median APE | max APE | within 3% | predicted/measured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for precision in ("fp32", "amp_fp16", "amp_bf16"):
        picked = [r for r in checked if r["key"].endswith(":" + precision)]
        for field in ("allocated_mib", "reserved_mib"):
            if picked:
                lines.append(f"| {precision} | {field} | {_memory_summary(picked, field)} |")
    for field in ("allocated_mib", "reserved_mib"):
        lines.append(f"| all | {field} | {_memory_summary(checked, field)} |")
    contexts = [r["context_mib"][1] for r in checked]
    lines += [
        "",
        f"CUDA context: assumed {checked[0]['context_mib'][0]:.0f} MiB; measured outside the "
        f"allocator {min(contexts):.0f}-{max(contexts):.0f} MiB (median "
        f"{statistics.median(contexts):.0f}; {provenance.get('context_after_init_mib', 0):.0f}"
        " right after CUDA's start)",
        "",
        "## Per row (FP32 SGD named models and files): step ms predicted p50 (p10-p90) / "
        "measured; allocated MiB predicted / measured",
        "| configuration | step predicted | measured | APE | allocated predicted | measured "
        "| APE |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in checked:
        if r["source"] == "sweep" or not r["key"].endswith(":sgd:fp32"):
            continue
        pred, meas = r["step_ms"]
        alloc_pred, alloc_meas = r["allocated_mib"]
        y = meas["p50"]
        lines.append(
            f"| {r['key'].removesuffix(':sgd:fp32')} | {pred['p50'] * 1e3:.2f} "
            f"({pred['p10'] * 1e3:.2f}-{pred['p90'] * 1e3:.2f}) | {y:.2f} | "
            f"{_ape(pred['p50'] * 1e3, y):.0f}% | {alloc_pred:.1f} | {alloc_meas:.1f} | "
            f"{_ape(alloc_pred, alloc_meas):.1f}% |"
        )
    return "\n".join(lines)


def _rows(checked: list[dict[str, Any]], gpu: str, when: datetime) -> list[GpuStepRow]:
    return [
        GpuStepRow(
            id=r["key"],
            gpu_model=gpu,
            measured_step_s=r["step_ms"][1]["p50"] / 1e3,
            predicted_step_s=r["step_ms"][0]["p50"],
            measured_at=when,
            operators=r["operators"],
        )
        for r in checked
        if "step_ms" in r
    ]


def _errors(rows: list[GpuStepRow], correction: GpuStepCorrection | None) -> str:
    apes, under = [], 0
    for row in rows:
        y = row.measured_step_s
        p = (
            correction.step_s(row.gpu_model, row.predicted_step_s, row.operators)
            if correction
            else row.predicted_step_s
        )
        apes.append(_ape(p, y))
        under += p < y
    return (
        f"{statistics.mean(apes):.1f}% | {statistics.median(apes):.1f}% | {max(apes):.1f}% | "
        f"{under / len(rows):.2f}"
    )


def correction_report(fit_on: list[GpuStepRow], heldout: dict[str, list[GpuStepRow]]) -> str:
    """A center's correction fitted on ``fit_on`` (its profiling runs), scored on rows it
    never saw: shipped model, factor alone, factor and host floor."""
    factor_only = fit_correction([r.model_copy(update={"operators": 0}) for r in fit_on], "x")
    with_host = fit_correction(fit_on, "x")
    gpu = fit_on[0].gpu_model
    host = with_host.host_s_per_operator.get(gpu, 0.0)
    lines = [
        f"## A center's correction (online learning), fitted on {len(fit_on)} FP32 zoo-space "
        "runs of the first machine",
        f"factor alone x{factor_only.factor(gpu):.2f}; with the host floor "
        f"x{with_host.factor(gpu):.2f} and {host * 1e6:.1f} us a dispatched operator",
        "| held-out rows | n | correction | MAPE | median APE | max APE | under-predicted |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, rows in heldout.items():
        if not rows:
            continue
        for name, correction in (
            ("none (shipped)", None),
            ("factor", factor_only),
            ("factor + host floor", with_host),
        ):
            lines.append(f"| {label} | {len(rows)} | {name} | {_errors(rows, correction)} |")
    return "\n".join(lines)


# What a CUDA profile calls an operator the trace (on the CPU's dispatch) names otherwise.
_TRACED_AS = {
    "cudnn_batch_norm": "native_batch_norm",
    "cudnn_batch_norm_backward": "native_batch_norm_backward",
    "cudnn_convolution": "convolution",
    "_conv_depthwise2d": "convolution",
    "clamp_min_": "relu_",
    "clamp_min": "relu",
    "clamp": "hardtanh_",
    "_efficient_attention_forward": "_scaled_dot_product_flash_attention_for_cpu",
    "_efficient_attention_backward": "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_foreach_add_": "optimizer update",
    "_foreach_mul_": "optimizer update",
}


def operator_report(
    profiles: Path,
    steps: dict[str, dict[str, Any]],
    spec: GpuSpec,
    model_path: Path | None = None,
) -> str:
    """Each traced operator's priced time (the model at ``model_path``, default the shipped
    one; ``spec``) beside the profiler's self device time of the same operator in one
    measured step, summed over the profiled configurations; the operators only one side
    has, apart."""
    model = load_step_model(model_path)
    both: dict[str, list[float]] = {}  # operator -> [configurations, measured ms, priced ms]
    classes: dict[str, str] = {}
    profile_only: dict[str, float] = {}
    traced_only: dict[str, float] = {}
    for line in profiles.read_text().splitlines():
        profile = json.loads(line)
        row = steps.get(profile["key"])
        if row is None or row["precision"] != "fp32":
            continue
        task = task_factory(row)(row["batch_size"])
        priced: dict[str, float] = {}
        for name, kernels in kernels_by_operator(trace_training_step(task)).items():
            seconds, by_class = model.forward_backward_s(kernels, spec)
            priced[name] = seconds * 1e3
            classes.setdefault(name, max(by_class, key=lambda c: by_class[c]))
        parameters = sum(p.numel() for p in task.model.parameters() if p.requires_grad)
        update = model.estimate(
            GpuKernels(), spec, parameters=parameters, optimizer=row["optimizer"]
        ).optimizer_s
        priced["optimizer update"] = update * 1e3
        classes["optimizer update"] = "elementwise"
        measured: dict[str, float] = {}
        for entry in profile["ops"]:
            if entry["op"].startswith("aten::"):
                name = entry["op"][len("aten::") :]
                name = _TRACED_AS.get(name, name)
                measured[name] = measured.get(name, 0.0) + entry["self_device_us"] / 1e3
        for name, ms in measured.items():
            if name in priced:
                totals = both.setdefault(name, [0.0, 0.0, 0.0])
                totals[0] += 1
                totals[1] += ms
                totals[2] += priced[name]
            else:
                profile_only[name] = profile_only.get(name, 0.0) + ms
        for name, ms in priced.items():
            if name not in measured:
                traced_only[name] = traced_only.get(name, 0.0) + ms
    if not both:
        return ""
    lines = [
        f"## Per operator: priced against the profiler ({profiles.name}; self device time of "
        "one step, its top 60 entries)",
        "| operator (as traced) | class | configurations | measured ms | priced ms | "
        "priced/measured |",
        "|---|---|---|---|---|---|",
    ]
    for name, (count, measured_ms, priced_ms) in sorted(both.items(), key=lambda i: -i[1][1]):
        lines.append(
            f"| {name} | {classes[name]} | {count:.0f} | {measured_ms:.2f} | {priced_ms:.2f} | "
            f"x{priced_ms / measured_ms:.2f} |"
        )
    measured_total = sum(v[1] for v in both.values())
    priced_total = sum(v[2] for v in both.values())
    lines.append(
        f"| all of these | | | {measured_total:.2f} | {priced_total:.2f} | "
        f"x{priced_total / measured_total:.2f} |"
    )

    def listed(values: dict[str, float]) -> str:
        top = sorted(values.items(), key=lambda i: -i[1])[:8]
        return ", ".join(f"{name} {ms:.2f}" for name, ms in top) or "none"

    lines += [
        "",
        f"Profiled, not traced (ms): {listed(profile_only)}",
        f"Traced, not in the profile's top entries (priced ms): {listed(traced_only)}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps", type=Path, action="append", default=None, help="*-steps.jsonl (repeatable)"
    )
    parser.add_argument("--only", default="named,file,sweep", help="sources to check")
    parser.add_argument("--rows", type=Path, default=None, help="write each row's numbers")
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="the GPU time model file to check (default data/gpu_models/opcost.json)",
    )
    args = parser.parse_args()
    paths = args.steps or sorted(MEASURED.glob("*-steps.jsonl"), key=lambda p: len(p.name))
    sources = set(args.only.split(","))
    everything: list[dict[str, Any]] = []
    runs: list[tuple[str, list[dict[str, Any]], GpuSpec]] = []
    began = time.perf_counter()
    for path in paths:
        provenance = json.loads(
            path.with_name(path.name.replace("-steps.jsonl", "-provenance.json")).read_text()
        )
        spec = datasheet_spec(provenance["gpu"])
        generation = gpu_generation(spec.name) or "hopper"
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        rows = [r for r in rows if r["status"] == "ok" and r["source"] in sources]
        checked = [check_row(r, spec, generation, args.model) for r in rows]
        print(f"# {path.name}")
        print(report(checked, provenance))
        timed = [r["time_s"] for r in checked if "time_s" in r]
        if timed:
            print(
                f"\none time estimate (trace + pricing) median {statistics.median(timed):.2f} s, "
                f"max {max(timed):.2f} s; "
            )
        print(
            f"memory median {statistics.median(r['memory_s'] for r in checked):.2f} s; spec "
            f"{spec.name}: {spec.sms} SMs, {spec.fp32_gflops:.0f} GFLOP/s, "
            f"{spec.bandwidth_gbs:.0f} GB/s; context assumed for {generation} "
            f"{context_mb(generation):.0f} MiB\n"
        )
        profiles = path.with_name(path.name.replace("-steps.jsonl", "-kernels.jsonl"))
        if profiles.exists() and "named" in sources:
            by_key = {r["key"]: r for r in rows}
            print(operator_report(profiles, by_key, spec, args.model) + "\n")
        everything += checked
        runs.append((provenance["measured_at"], checked, spec))
    first_at, first, spec = runs[0]
    when = datetime.fromisoformat(first_at)
    fit_on = [r for r in _rows(first, spec.name, when) if r.id.startswith("sweep:")]
    if len(fit_on) >= HOST_MIN_ROWS:
        heldout = {
            "first machine, named models and files": [
                r for r in _rows(first, spec.name, when) if not r.id.startswith("sweep:")
            ]
        }
        for at, checked, other in runs[1:]:
            heldout[f"another machine ({at})"] = _rows(
                checked, other.name, datetime.fromisoformat(at)
            )
        print(correction_report(fit_on, heldout))
    print(f"\n{len(everything)} rows in {time.perf_counter() - began:.0f} s")
    if args.rows:
        args.rows.write_text("".join(json.dumps(r) + "\n" for r in everything))
    if any(math.isnan(r["allocated_mib"][0]) for r in everything):
        raise SystemExit("a white-box estimate was NaN")


if __name__ == "__main__":
    main()
