"""Measure training steps on a real GPU: step time and ``torch.cuda.max_memory_allocated``.

Run on a machine with a CUDA GPU, from the repository root (it needs torch, the zoo and
the tracer's ``logits_of`` only, so it runs under whatever PyTorch the GPU machine has)::

    python -m tools.profiling.gpu_measure --out /tmp/h100 --deadline-s 420

Each configuration (a zoo model or a model file, a batch size, an optimizer, a
precision) is one JSON line in ``OUT/gpu_steps.jsonl``, written as soon as it is
measured, so a run cut short keeps what it measured. The step is the one the white-box
memory model traces (``tools/estimators/gpu/memory/recorder.py``): ``zero_grad(set_to_none
=True)``, forward and loss under autocast (no gradient scaler), backward, then SGD
(momentum 0.9) or Adam, ``foreach=True``. Per configuration:

- memory: everything freed and the caches emptied, peak statistics reset, then the model
  and batch moved to the GPU and two steps run; ``max_memory_allocated`` and
  ``max_memory_reserved`` after them (what the white-box predicts), and the process's
  device memory outside the caching allocator (``mem_get_info``'s used minus reserved:
  the CUDA context with the libraries loaded so far);
- time: after three warm-up steps, each step timed with CUDA events (``step_ms``: median,
  p10, p90 of up to ``--iterations``) and the same for forward and backward alone
  (``forward_backward_ms``);
- an out-of-memory or any other failure is a row with ``status`` and ``error``.

``OUT/provenance.json`` says what measured it (GPU, driver, torch, CUDA, cuDNN, the
TF32 switches, the time, the code's commit: ``--commit``, default ``git rev-parse --short
HEAD``), and ``OUT/kernels.jsonl`` holds, for the named zoo models at
their first batch size, the PyTorch profiler's per-operator device time of one step.
Configurations run in priority order (the README example and the model files first,
then the named zoo models in FP32 SGD, then Adam and mixed precision, then a seeded sample
of the zoo's configuration space) until ``--deadline-s`` is spent.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tools.estimators.gpu.trace import logits_of
from tools.profiling.zoo.registry import FAMILIES, TrainingTask, loss_fn, named_model

__all__ = ["Config", "configurations", "current_commit", "main", "measure", "provenance"]

_MIB = float(1 << 20)
_REPO = Path(__file__).resolve().parents[2]

# Named zoo models and the two batch sizes measured for each (the first also with Adam,
# AMP and the profiler).
NAMED_BATCHES: dict[str, tuple[int, int]] = {
    "resnet50": (32, 64),
    "resnet18": (64, 256),
    "resnet34": (64, 128),
    "resnet101": (32, 64),
    "vgg11": (32, 128),
    "vgg16": (32, 64),
    "mobilenet_v2": (64, 128),
    "vit_small": (32, 128),
    "bert_base": (16, 64),
    "transformer": (32, 128),
    "lstm": (32, 128),
    "mlp": (256, 2048),
    "dlrm": (1024, 8192),
}
# Model files (path, class) and their batch sizes.
MODEL_FILES: dict[str, tuple[str, tuple[int, ...]]] = {
    "examples/models/small_cnn.py": ("SmallCNN", (64, 256)),
    "examples/models/heldout/audio_conv1d.py": ("AudioConv1d", (32, 128)),
    "examples/models/heldout/gnn_message.py": ("MessagePassing", (32, 128)),
    "examples/models/heldout/gru_tagger.py": ("GRUTagger", (32, 128)),
    "examples/models/heldout/hf_gpt2.py": ("TinyGPT2", (16, 64)),
    "examples/models/heldout/mlp_mixer.py": ("MLPMixer", (32, 128)),
}


@dataclass(frozen=True)
class Config:
    """One training configuration to measure."""

    source: str  # "named", "file" or "sweep"
    name: str  # zoo model, family or file path
    batch_size: int
    optimizer: str = "sgd"
    precision: str = "fp32"
    params: dict[str, int] = field(default_factory=dict)
    class_name: str = ""
    profile: bool = False

    def key(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        where = f"{self.source}:{self.name}[{extra}]"
        return f"{where}:b{self.batch_size}:{self.optimizer}:{self.precision}"


def configurations(sweep: int, seed: int = 0, plan: str = "main") -> Iterator[Config]:
    """Every configuration of ``plan``, in the order they are measured (most wanted first).

    ``main``: the README example, the model files and the named models at their two batch
    sizes, Adam and AMP, then ``sweep`` draws of the zoo's space. ``check``: what ``main``
    did not measure, to check what was derived from it: the README example and the model
    files again (the spread between runs), every named model at twice its larger batch
    and in AMP bf16 at its larger one, the model files at four times their larger batch,
    then ``sweep`` draws with another ``seed``."""
    if plan == "check":
        yield from _check_configurations(sweep, seed)
        return
    yield from _example_and_files(profile=True)
    for name, batches in NAMED_BATCHES.items():
        for i, batch in enumerate(batches):
            if name != "resnet50":
                yield Config("named", name, batch, profile=i == 0)
    for name, (first, _) in NAMED_BATCHES.items():
        yield Config("named", name, first, optimizer="adam")
        yield Config("named", name, first, precision="amp_fp16")
    for name, (first, _) in NAMED_BATCHES.items():
        yield Config("named", name, first, optimizer="adam", precision="amp_bf16")
    for path, (cls, sizes) in MODEL_FILES.items():
        yield Config("file", path, sizes[0], optimizer="adam", class_name=cls)
    yield from _sweep(sweep, seed)


def _example_and_files(*, profile: bool) -> Iterator[Config]:
    """The README example (ResNet-50 at batch 32 and 64) and the model files."""
    yield Config("named", "resnet50", 32, profile=profile)
    yield Config("named", "resnet50", 64)
    for path, (cls, batches) in MODEL_FILES.items():
        for batch in batches:
            yield Config("file", path, batch, class_name=cls)


def _check_configurations(sweep: int, seed: int) -> Iterator[Config]:
    yield from _example_and_files(profile=False)
    for name, (_, larger) in NAMED_BATCHES.items():
        yield Config("named", name, 2 * larger)
        yield Config("named", name, larger, precision="amp_bf16")
    for path, (cls, batches) in MODEL_FILES.items():
        yield Config("file", path, 4 * batches[-1], class_name=cls)
    yield from _sweep(sweep, seed)


def _sweep(count: int, seed: int) -> Iterator[Config]:
    rng = random.Random(seed)
    families = sorted(FAMILIES)
    for i in range(count):
        fam = FAMILIES[families[i % len(families)]]
        params, batch = fam.sample(rng)
        yield Config("sweep", fam.name, batch, params=params)


def _load_file(path: str, class_name: str) -> tuple[type[nn.Module], Any]:
    spec = importlib.util.spec_from_file_location(f"measured_{Path(path).stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, class_name), module


def build_task(config: Config) -> TrainingTask:
    """The model, batch and loss of ``config`` on the CPU (as the estimators build it)."""
    if config.source == "named":
        found = named_model(config.name)
        if found is None:
            raise ValueError(f"no named zoo model {config.name!r}")
        fam, params = found
        return fam.task(params, config.batch_size)
    if config.source == "sweep":
        return FAMILIES[config.name].task(config.params, config.batch_size)
    model_class, module = _load_file(config.name, config.class_name)
    # a function of the file, else a static method of the class (as model_file reads it)
    maker = getattr(module, "example_batch", None) or getattr(model_class, "example_batch", None)
    if maker is None:
        raise ValueError(f"{config.name}: no example_batch(batch_size) in the file or the class")
    produced = maker(config.batch_size)
    inputs, targets = produced[0], produced[1]
    criterion = produced[2] if len(produced) > 2 else None
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    return TrainingTask(model_class(), tuple(inputs), targets, criterion=criterion)


def _optimizer(kind: str, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if len(ordered) == 1:
        return {"p10": ordered[0], "p50": ordered[0], "p90": ordered[0]}
    cuts = statistics.quantiles(ordered, n=10, method="inclusive")
    return {"p10": cuts[0], "p50": statistics.median(ordered), "p90": cuts[-1]}


def _timed(run: Callable[[], None], iterations: int, budget_s: float, cuda: bool) -> list[float]:
    """Milliseconds of each of up to ``iterations`` calls (at least 3): CUDA events on a GPU."""
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < iterations and (len(times) < 3 or time.perf_counter() - began < budget_s):
        if not cuda:
            t0 = time.perf_counter()
            run()
            times.append((time.perf_counter() - t0) * 1e3)
            continue
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _free_everything() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _memory(cuda: bool) -> dict[str, float | None]:
    """Peak allocated and reserved MiB so far, and device memory outside the allocator."""
    if not cuda:
        return {"allocated": None, "reserved": None, "outside": None}
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {
        "allocated": torch.cuda.max_memory_allocated() / _MIB,
        "reserved": torch.cuda.max_memory_reserved() / _MIB,
        "outside": (total - free - torch.cuda.memory_reserved()) / _MIB,
    }


def measure(
    config: Config, iterations: int, budget_s: float, device: str = "cuda"
) -> dict[str, Any]:
    """Measure one configuration on ``device`` (see the module docstring; memory: CUDA only)."""
    cuda = device == "cuda"
    task = build_task(config)
    _free_everything()
    model = task.model.to(device)
    model.train()
    inputs = tuple(x.to(device) for x in task.inputs)
    targets = task.targets.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = _optimizer(config.optimizer, params)
    criterion = task.criterion or loss_fn(task.loss)
    dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(config.precision)

    def forward_backward() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            output = model(*inputs)
            loss = criterion(logits_of(output), targets)
        loss.backward()  # type: ignore[no-untyped-call]

    def step() -> None:
        forward_backward()
        opt.step()

    for _ in range(2):
        step()
    memory = _memory(cuda)
    step()  # the third warm-up step
    step_ms = _timed(step, iterations, budget_s, cuda)
    fb_ms = _timed(forward_backward, iterations, budget_s / 2, cuda)
    kernels = _profile(step, cuda) if config.profile else None
    row: dict[str, Any] = {
        "key": config.key(),
        "source": config.source,
        "name": config.name,
        "class_name": config.class_name,
        "params": config.params,
        "batch_size": config.batch_size,
        "optimizer": config.optimizer,
        "precision": config.precision,
        "status": "ok",
        "parameters": sum(p.numel() for p in params),
        "device": device,
        "max_memory_allocated_mib": memory["allocated"],
        "max_memory_reserved_mib": memory["reserved"],
        "outside_allocator_mib": memory["outside"],
        "step_ms": _quantiles(step_ms),
        "forward_backward_ms": _quantiles(fb_ms),
        "timed_steps": len(step_ms),
        "timed_forward_backward": len(fb_ms),
        "peak_after_timing_allocated_mib": _memory(cuda)["allocated"],
    }
    if kernels is not None:
        row["kernels"] = kernels
    return row


def _profile(step: Callable[[], None], cuda: bool) -> list[dict[str, Any]]:
    """The profiler's per-operator self device time of one step (top 60 by time)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    rows = []
    for event in prof.key_averages():
        device_us = getattr(event, "self_device_time_total", 0.0)
        if not cuda:
            device_us = event.self_cpu_time_total
        if device_us > 0:
            rows.append({"op": event.key, "count": event.count, "self_device_us": device_us})
    rows.sort(key=lambda r: -r["self_device_us"])
    return rows[:60]


def provenance(commit: str = "unknown") -> dict[str, Any]:
    """What measured: the GPU, driver, software versions and switches, when, and the
    code's ``commit``."""
    props = torch.cuda.get_device_properties(0)
    smi = ""
    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        ).stdout.strip()
    except OSError as error:
        smi = f"nvidia-smi failed: {error}"
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "gpu": props.name,
        "multiprocessors": props.multi_processor_count,
        "memory_mib": props.total_memory / _MIB,
        "capability": f"{props.major}.{props.minor}",
        "nvidia_smi": smi,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),  # type: ignore[no-untyped-call]
        "python": sys.version.split()[0],
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "context_after_init_mib": (total - free - torch.cuda.memory_reserved()) / _MIB,
        "code": commit,
    }


def current_commit(repo: Path = _REPO) -> str:
    """``git rev-parse --short HEAD`` of the repository ("unknown" without git)."""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline-s", type=float, default=420.0)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--budget-s", type=float, default=2.0, help="timing per configuration")
    parser.add_argument("--sweep", type=int, default=120, help="zoo space samples at the end")
    parser.add_argument("--plan", choices=("main", "check"), default="main")
    parser.add_argument("--seed", type=int, default=0, help="of the zoo space's draws")
    parser.add_argument("--limit", type=int, default=0, help="stop after this many (0: all)")
    parser.add_argument("--skip", type=int, default=0, help="skip the first N configurations")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a dry run")
    parser.add_argument(
        "--commit",
        default=None,
        help="the code's version in the provenance (default: git rev-parse --short HEAD, "
        "'unknown' without git)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device here, nothing measured", file=sys.stderr)
        return 2
    began = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.device == "cuda":
        torch.zeros(1, device="cuda")
        commit = args.commit or current_commit()
        found = {**provenance(commit), "plan": args.plan, "seed": args.seed}
        (args.out / "provenance.json").write_text(json.dumps(found, indent=2) + "\n")
    done = 0
    with (
        (args.out / "gpu_steps.jsonl").open("a") as steps,
        (args.out / "kernels.jsonl").open("a") as kernels,
    ):
        for index, config in enumerate(configurations(args.sweep, args.seed, args.plan)):
            if index < args.skip:
                continue
            if time.perf_counter() - began > args.deadline_s or (args.limit and done >= args.limit):
                print(f"stopped after {done} configurations", flush=True)
                break
            t0 = time.perf_counter()
            try:
                row = measure(config, args.iterations, args.budget_s, args.device)
            except torch.OutOfMemoryError as error:
                row = {"key": config.key(), "status": "out_of_memory", "error": str(error)[:300]}
            except Exception as error:  # one model's failure must not stop the run
                row = {
                    "key": config.key(),
                    "status": "failed",
                    "error": f"{type(error).__name__}: {str(error)[:300]}",
                }
            _free_everything()
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            profiled = row.pop("kernels", None)
            if profiled is not None:
                kernels.write(json.dumps({"key": row["key"], "ops": profiled}) + "\n")
                kernels.flush()
            steps.write(json.dumps(row) + "\n")
            steps.flush()
            done += 1
            shown = row.get("step_ms", {}).get("p50", float("nan"))
            mem = row.get("max_memory_allocated_mib") or float("nan")
            print(
                f"{row['key']:<70} {row['status']:<8} {shown:9.2f} ms {mem:9.1f} MiB "
                f"{row['wall_s']:5.1f} s",
                flush=True,
            )
    print(f"measured {done} configurations in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
