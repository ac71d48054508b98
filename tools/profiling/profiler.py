"""Profile one downsized training configuration in its own process: HARP's Generate step.

``profile(config)`` forks a child that builds the model, runs ``warmup`` training steps
on a synthetic batch and then ``iterations`` timed ones, and returns a ``ProfileRecord``.
A crash, a kill or an allocation failure in the child is recorded as such (status
``crashed`` / ``out_of_memory``) and never reaches the caller as an exception.

Why fork: importing torch costs ~1.5 s, most of a small configuration's run. The caller
imports torch once and each configuration gets a fresh forked process, so crashes and
memory stay isolated. The caller must not have run torch work (fork after OpenMP starts
is unsafe); the sweep's parent only imports.

What is measured (all in the child):
- ``iteration_s``: median wall time (``perf_counter``) of the timed steps; each step is
  zero_grad + forward + loss + backward + optimizer step. ``iteration_s_spread``: max
  minus min of those steps, seconds.
- ``peak_memory_mb``: the child's peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``
  after training, which covers model build, batch and every step) minus its resident set
  at the start, which equals the parent's right after ``import torch``, MiB: what a fresh
  process that imported torch and trained would show. A forked child does not inherit
  the page-table entries of the parent's file-backed pages (shared libraries), so it
  would start ~70 MiB lower and re-fault them while training; the parent lists its
  resident file pages (``/proc/self/pagemap``) and the child maps the same ones first
  (``madvise(MADV_POPULATE_READ)``, ~7 ms). The row's ``measurement`` keeps the parent's
  RSS, the child's at start (after that) and its peak.
- ``measurement.iteration_dedicated_s``: the median over timed steps of the step's wall
  time minus the longest time any of the child's threads sat runnable but waiting for a
  CPU during it (``/proc/self/task/*/schedstat``): the step on a machine with nothing
  else running. The development machine is shared (load averages of 4-6 on 2 cores
  were common), which made raw wall times vary by 2x between repeats; the estimators
  learn this figure (see ``tools.estimators.cpu.dataset``).
- Threads: ``torch.set_num_threads(threads)`` in the child. Sweeps run with
  ``OMP_WAIT_POLICY=PASSIVE`` (set before torch loads): on a machine shared with other
  work, OpenMP's default spin-waiting made 2-thread convolution steps 10-30x slower
  whenever another process held a core (MobileNetV2, batch 32: 7.9 s vs 0.27 s).
- ``flops``: FLOPs of one training step (forward + backward), counted on the first
  warm-up step (``tools.profiling.counting``).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import resource
import signal
import statistics
import struct
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.records import ProfileRecord, ProfileStatus
from tools.profiling.zoo.registry import TrainingTask

__all__ = [
    "ForkedCall",
    "ProfileConfig",
    "ProfileOutcome",
    "fork_call",
    "hardware_descriptors",
    "measure_task",
    "profile",
    "rss_mb",
]

_MIB = 1024.0 * 1024.0


class ProfileConfig(BaseModel):
    """One configuration: which model, how big, on what batch, with how many threads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: str = Field(min_length=1)
    params: dict[str, int] = Field(default_factory=dict)
    batch_size: int = Field(ge=1)
    threads: int = Field(default=1, ge=1)
    optimizer: Literal["sgd", "adam"] = "sgd"
    warmup: int = Field(default=2, ge=1)
    iterations: int = Field(default=5, ge=1)
    repeat: int = Field(default=0, ge=0, description="Index of a repeated run (noise floor)")
    max_train_gflops: float | None = Field(
        default=None, gt=0, description="Skip when one step would exceed this (sizing)"
    )
    max_parameters: int | None = Field(
        default=None, gt=0, description="Skip larger models (optimizer time and memory)"
    )

    @property
    def model_name(self) -> str:
        parts = [f"{k}{v}" for k, v in sorted(self.params.items())]
        return "-".join([self.family, *parts])

    @property
    def config_id(self) -> str:
        """Stable id of the configuration (repeat included); the sweep resumes on it."""
        content = self.model_dump(exclude={"max_train_gflops", "max_parameters"})
        digest = hashlib.sha1(json.dumps(content, sort_keys=True).encode()).hexdigest()
        return f"{self.family}-{digest[:12]}"


class ProfileOutcome(BaseModel):
    """A profile and what was measured beside it (not part of ``ProfileRecord``)."""

    model_config = ConfigDict(extra="forbid")

    record: ProfileRecord | None = Field(description="None when the configuration was skipped")
    skipped: str = ""
    measurement: dict[str, float | list[float]] = Field(default_factory=dict)


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set (or ``VmHWM``, its peak) from /proc, MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    if "avx512f" in flags:
                        return "avx512"
                    return "avx2" if "avx2" in flags else "sse"
    except OSError:
        pass
    return "unknown"


def hardware_descriptors(threads: int) -> dict[str, str | int | float]:
    """What the profile ran on: CPU model, vector ISA, cores, threads used, GPU (none)."""
    return {
        "device": "cpu",
        "cpu_model": _cpu_model(),
        "cpu_isa": _cpu_flags(),
        "cpu_cores": os.cpu_count() or 1,
        "threads": threads,
        "gpu_model": "",
    }


_PAGE = os.sysconf("SC_PAGE_SIZE")
_MADV_POPULATE_READ = 22  # Linux >= 5.14


def _resident_file_runs() -> list[tuple[int, int]]:
    """(address, length) runs of this process's resident, readable, file-backed pages."""
    runs: list[tuple[int, int]] = []
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
            for line in maps:
                parts = line.split()
                if len(parts) < 6 or not parts[5].startswith("/") or "r" not in parts[1]:
                    continue
                low, high = (int(x, 16) for x in parts[0].split("-"))
                pagemap.seek(low // _PAGE * 8)
                data = pagemap.read((high - low) // _PAGE * 8)
                entries = struct.unpack(f"{len(data) // 8}Q", data)
                start: int | None = None
                for index, entry in enumerate((*entries, 0)):
                    if entry >> 63 & 1:
                        start = index if start is None else start
                    elif start is not None:
                        runs.append((low + start * _PAGE, (index - start) * _PAGE))
                        start = None
    except OSError:
        runs = []
    return runs


def _map_like_parent(runs: list[tuple[int, int]]) -> None:
    """In the child: fault in the parent's resident file pages (see the module docstring)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for address, length in runs:
        libc.madvise(address, length, _MADV_POPULATE_READ)


def _measure(config: ProfileConfig) -> dict[str, Any]:
    """Run in the child: build, size, warm up, time. Returns JSON-able results."""
    import torch

    from tools.profiling import counting
    from tools.profiling.zoo import family

    start_mb = rss_mb()
    torch.set_num_threads(config.threads)
    torch.manual_seed(0)
    fam = family(config.family)
    task = fam.task(config.params, config.batch_size)
    if config.max_parameters is not None:
        count = counting.parameter_count(task.model)
        if count > config.max_parameters:
            return {"skipped": f"{count} parameters > {config.max_parameters}"}
    if config.max_train_gflops is not None:
        probe = fam.task(config.params, 2)
        estimate = 3 * counting.count_forward_flops(probe) / 2 * config.batch_size
        if estimate > config.max_train_gflops * 1e9:
            return {"skipped": f"~{estimate / 1e9:.1f} GFLOPs per step > budget"}
    return measure_task(task, config.optimizer, config.warmup, config.iterations, start_mb)


def _run_queue_waits() -> dict[str, float]:
    """Seconds each thread of this process has waited runnable for a CPU (schedstat)."""
    waits: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return waits
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                waits[tid] = int(stat.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return waits


def measure_task(
    task: TrainingTask, optimizer_name: str, warmup: int, iterations: int, start_mb: float
) -> dict[str, Any]:
    """Warm up and time training steps of ``task`` in this process (the child)."""
    import torch

    from tools.profiling import counting

    model = task.model.train()
    optimizer: torch.optim.Optimizer = (
        torch.optim.Adam(model.parameters(), lr=1e-4)
        if optimizer_name in {"adam", "adamw"}
        else torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    )
    flops = counting.count_training_flops(task, optimizer)
    for _ in range(warmup - 1):
        counting.training_step(task, optimizer)
    samples: list[float] = []
    cpu_samples: list[float] = []
    waits: list[float] = []
    for _ in range(iterations):
        waiting = _run_queue_waits()
        began, cpu_began = time.perf_counter(), time.process_time()
        counting.training_step(task, optimizer)
        samples.append(time.perf_counter() - began)
        cpu_samples.append(time.process_time() - cpu_began)
        after = _run_queue_waits()
        waits.append(max((after[t] - waiting.get(t, 0.0) for t in after), default=0.0))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    # Without the time a thread sat runnable but descheduled (other work on the machine),
    # never below a tenth of the wall time (the waits cover a hair more than the step).
    dedicated = [max(0.1 * w, w - q) for w, q in zip(samples, waits, strict=True)]
    return {
        "iteration_s": statistics.median(samples),
        "iteration_s_spread": max(samples) - min(samples),
        "peak_memory_mb": peak_mb - start_mb,
        "flops": float(flops),
        "parameters": counting.parameter_count(model),
        "samples": samples,
        "cpu_s": statistics.median(cpu_samples),
        "waits": waits,
        "dedicated_s": statistics.median(dedicated),
        "rss_start_mb": start_mb,
        "rss_peak_mb": peak_mb,
    }


def _child(
    work: Callable[[], dict[str, Any]],
    write_fd: int,
    memory_limit_mb: float | None,
    runs: list[tuple[int, int]],
) -> None:
    """Body of the forked child; never returns (``os._exit``)."""
    code = 0
    try:
        _map_like_parent(runs)
        if memory_limit_mb is not None:
            # Address-space cap above what the process already maps: an allocation past
            # it fails inside torch (recorded as out_of_memory) instead of waking the
            # machine's OOM killer on a box shared with other work.
            mapped = rss_mb("VmSize") * _MIB
            limit = int(mapped + memory_limit_mb * _MIB)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            result = work()
        except MemoryError as error:
            result = {"status": "out_of_memory", "error": f"MemoryError: {error}"}
        except RuntimeError as error:
            text = str(error)
            oom = "can't allocate memory" in text or "out of memory" in text.lower()
            result = {
                "status": "out_of_memory" if oom else "crashed",
                "error": f"{type(error).__name__}: {text[:500]}",
            }
        except Exception as error:  # the record keeps it; the sweep goes on
            result = {"status": "crashed", "error": f"{type(error).__name__}: {str(error)[:500]}"}
        os.write(write_fd, json.dumps(result).encode())
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class ForkedCall:
    """``work`` running in a forked child (see ``fork_call``): started now, its result
    read by ``wait``; the parent goes on meanwhile (the child's result, a few hundred
    bytes, waits in the pipe)."""

    pid: int
    read_fd: int
    parent_mb: float

    @classmethod
    def start(
        cls, work: Callable[[], dict[str, Any]], *, memory_limit_mb: float | None
    ) -> ForkedCall:
        read_fd, write_fd = os.pipe()
        runs = _resident_file_runs()
        parent_mb = rss_mb()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            os.close(read_fd)
            _child(work, write_fd, memory_limit_mb, runs)
        os.close(write_fd)
        return cls(pid, read_fd, parent_mb)

    def wait(self, timeout_s: float) -> tuple[int, dict[str, Any], bool, float]:
        """(wait status, the child's JSON result, timed out, parent MiB); the child is
        killed after ``timeout_s`` (counted from now)."""
        deadline = time.monotonic() + timeout_s
        status = 0
        timed_out = False
        payload = b""
        try:
            os.set_blocking(self.read_fd, False)
            while True:
                with suppress(BlockingIOError):
                    payload += os.read(self.read_fd, 65536)
                done, raw = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    status = raw
                    break
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    _, status = os.waitpid(self.pid, 0)
                    timed_out = True
                    break
                # A bounded poll: the child's results are a few hundred bytes.
                time.sleep(0.005)
            os.set_blocking(self.read_fd, True)
            with suppress(OSError):
                payload += _read_all(self.read_fd)
        finally:
            with suppress(OSError):
                os.close(self.read_fd)
        result: dict[str, Any] = {}
        if payload:
            with suppress(json.JSONDecodeError):
                result = json.loads(payload)
        return status, result, timed_out, self.parent_mb

    def cancel(self) -> None:
        """Kill the child and reap it (the parent no longer wants its result)."""
        with suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        with suppress(OSError):
            os.close(self.read_fd)


def fork_call(
    work: Callable[[], dict[str, Any]],
    *,
    timeout_s: float,
    memory_limit_mb: float | None,
) -> tuple[int, dict[str, Any], bool, float]:
    """Run ``work`` in a forked child: (wait status, its JSON result, timed out, parent MiB).

    The child first maps the parent's resident file pages (see the module docstring),
    caps its address space ``memory_limit_mb`` above what it maps, and is killed after
    ``timeout_s``.
    """
    return ForkedCall.start(work, memory_limit_mb=memory_limit_mb).wait(timeout_s)


def profile(
    config: ProfileConfig,
    *,
    timeout_s: float = 120.0,
    memory_limit_mb: float | None = 8192.0,
) -> ProfileOutcome:
    """Profile ``config`` in a forked child; never raises for the child's failures."""
    status, result, timed_out, parent_mb = fork_call(
        lambda: _measure(config), timeout_s=timeout_s, memory_limit_mb=memory_limit_mb
    )
    return _outcome(config, status, result, timed_out, parent_mb, timeout_s)


def _outcome(
    config: ProfileConfig,
    status: int,
    result: dict[str, Any],
    timed_out: bool,
    parent_mb: float,
    timeout_s: float,
) -> ProfileOutcome:
    base: dict[str, Any] = {
        "id": config.config_id,
        "family": config.family,
        "model": config.model_name,
        "config": {
            **config.params,
            "batch_size": config.batch_size,
            "optimizer": config.optimizer,
            "threads": config.threads,
            "warmup": config.warmup,
            "iterations": config.iterations,
            "repeat": config.repeat,
        },
        "hardware": hardware_descriptors(config.threads),
    }
    if "skipped" in result:
        return ProfileOutcome(record=None, skipped=str(result["skipped"]))
    if timed_out:
        record = ProfileRecord(
            **base, status=ProfileStatus.CRASHED, error=f"timed out after {timeout_s:g} s"
        )
        return ProfileOutcome(record=record)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        # SIGKILL without our timeout is the kernel's OOM killer in practice.
        kind = ProfileStatus.OUT_OF_MEMORY if signum == signal.SIGKILL else ProfileStatus.CRASHED
        name = signal.Signals(signum).name
        return ProfileOutcome(record=ProfileRecord(**base, status=kind, error=f"killed by {name}"))
    if "status" in result:
        record = ProfileRecord(
            **base, status=ProfileStatus(result["status"]), error=str(result.get("error", ""))
        )
        return ProfileOutcome(record=record)
    if "iteration_s" not in result:
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        return ProfileOutcome(
            record=ProfileRecord(
                **base, status=ProfileStatus.CRASHED, error=f"child exited {code} without result"
            )
        )
    record = ProfileRecord(
        **base,
        status=ProfileStatus.OK,
        iteration_s=result["iteration_s"],
        iteration_s_spread=result["iteration_s_spread"],
        peak_memory_mb=max(0.0, result["peak_memory_mb"]),
        flops=result["flops"],
        parameters=result["parameters"],
    )
    measurement: dict[str, float | list[float]] = {
        "rss_start_mb": result["rss_start_mb"],
        "rss_peak_mb": result["rss_peak_mb"],
        "parent_rss_mb": parent_mb,
        "iteration_samples_s": [float(x) for x in result["samples"]],
        # Process CPU time per step (all threads): wall >> cpu / threads means waiting.
        "iteration_cpu_s": float(result["cpu_s"]),
        # Per step, the longest any thread waited runnable for a CPU (schedstat), and the
        # median step time without it: what a dedicated machine would show.
        "run_queue_wait_s": [float(x) for x in result.get("waits", [])],
        "iteration_dedicated_s": float(result.get("dedicated_s", result["iteration_s"])),
        # Other work on the machine distorts timings; kept so analyses can filter on it.
        "loadavg_1m": os.getloadavg()[0],
    }
    if not math.isfinite(result["iteration_s"]):
        record = record.model_copy(update={"status": ProfileStatus.CRASHED, "error": "non-finite"})
    return ProfileOutcome(record=record, measurement=measurement)
