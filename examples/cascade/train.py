"""A small, seeded CNN trained on synthetic data that checkpoints every epoch and resumes.

The workload of ``rightsize demo cascade`` and of the cascade end-to-end test: about four
minutes of single-threaded work on the 2-core development VM, so a partition with a
one-minute limit needs a cascade of segments to finish it.

    python examples/cascade/train.py [--checkpoint-dir DIR] [--epochs N] [--samples N]
                                     [--batch-size N] [--seed N] [--segment-work-s S]

It reads the plan from the environment the Scheduler sets (arguments win):
``RIGHTSIZE_EPOCHS``, ``RIGHTSIZE_BATCH_SIZE`` and, in a cascade,
``RIGHTSIZE_SEGMENT_WORK_S``: train whole epochs while the next one still fits in that
budget (counted from the process start), checkpoint after each, and exit 0. Exiting by
itself matters: SLURM's TIMEOUT comes 60-90 s after the limit, far too late to plan on.

Every line the Scheduler reads:

    RIGHTSIZE_PROGRESS epoch=3/40      where it resumed, and after every epoch
    RIGHTSIZE_DONE final=/path/final.pt  all epochs done, final weights written

With ``RIGHTSIZE_PROFILE_STEPS=k`` it is a downsized profiling run instead: two warm-up
steps and ``k`` timed ones, no checkpoint, and one line for the Profiling agent:

    RIGHTSIZE_PROFILE iteration_s=0.041 spread_s=0.004 peak_memory_mb=310 startup_s=2.1 ...

Determinism (the cascade's final weights must equal an uninterrupted run's): one thread,
``torch.use_deterministic_algorithms(True)``, the data and the initial weights from the
seed, each epoch's shuffle from its own generator (seed, epoch), and the global RNG state
(dropout) saved in every checkpoint and restored on resume. Checkpoints are written to a
temporary file and renamed, so a kill mid-write leaves the previous one intact.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # the budget counts the imports too: they are part of the job

import argparse  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

CLASSES = 10
SHAPE = (3, 32, 32)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint-dir", type=Path, default=Path("."))
    p.add_argument("--epochs", type=int, default=_env_int("RIGHTSIZE_EPOCHS") or 40)
    p.add_argument("--samples", type=int, default=8192, help="Training samples per epoch")
    p.add_argument("--batch-size", type=int, default=_env_int("RIGHTSIZE_BATCH_SIZE") or 64)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--segment-work-s",
        type=float,
        default=_env_int("RIGHTSIZE_SEGMENT_WORK_S"),
        help="Stop (after a checkpoint) before this many seconds; none: run to the end",
    )
    p.add_argument("--profile-steps", type=int, default=_env_int("RIGHTSIZE_PROFILE_STEPS"))
    return p.parse_args(argv)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 8 * 8, 128),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.Linear(128, CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def synthetic_data(samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images from the seed, labelled by a fixed random teacher so there is something to learn."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, *SHAPE, generator=g)
    teacher = torch.randn(SHAPE[0] * SHAPE[1] * SHAPE[2], CLASSES, generator=g)
    y = (x.flatten(1) @ teacher).argmax(dim=1)
    return x, y


def build(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    return model, optimizer


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    data: tuple[torch.Tensor, torch.Tensor],
    batch_size: int,
    seed: int,
    epoch: int,
) -> float:
    x, y = data
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    model.train()
    total = 0.0
    for start in range(0, len(x), batch_size):
        index = order[start : start + batch_size]
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[index]), y[index])
        loss.backward()
        optimizer.step()
        total += loss.item() * len(index)
    return total / len(x)


def save_atomic(obj: object, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def profile(args: argparse.Namespace) -> int:
    data = synthetic_data(max(args.samples, args.batch_size), args.seed)
    model, optimizer = build(args.seed)
    x, y = data
    times = []
    ready_s = time.monotonic() - STARTED
    for step in range(args.profile_steps + 2):
        index = torch.arange(args.batch_size) + (step * args.batch_size) % max(
            1, len(x) - args.batch_size
        )
        began = time.perf_counter()
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[index]), y[index]).backward()
        optimizer.step()
        if step >= 2:  # the first steps warm up the allocator and kernels
            times.append(time.perf_counter() - began)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"RIGHTSIZE_PROFILE iteration_s={statistics.median(times):.6f} "
        f"spread_s={max(times) - min(times):.6f} peak_memory_mb={peak_mb:.0f} "
        f"startup_s={ready_s:.2f} batch_size={args.batch_size} samples={args.samples} "
        f"threads={torch.get_num_threads()}",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    if args.profile_steps:
        return profile(args)
    directory = args.checkpoint_dir
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint, final = directory / "checkpoint.pt", directory / "final.pt"
    data = synthetic_data(args.samples, args.seed)
    model, optimizer = build(args.seed)
    epoch = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        epoch = state["epoch"]
    print(f"RIGHTSIZE_PROGRESS epoch={epoch}/{args.epochs}", flush=True)
    slowest_s = 0.0
    while epoch < args.epochs:
        if args.segment_work_s is not None and epoch > 0:
            # Leave before an epoch that may not fit: the next segment resumes here.
            elapsed = time.monotonic() - STARTED
            if slowest_s and elapsed + slowest_s * 1.15 > args.segment_work_s:
                print(
                    f"segment budget {args.segment_work_s:.0f} s: stopping after "
                    f"{elapsed:.1f} s at epoch {epoch}/{args.epochs}",
                    flush=True,
                )
                return 0
        began = time.monotonic()
        loss = train_epoch(model, optimizer, data, args.batch_size, args.seed, epoch)
        epoch += 1
        save_atomic(
            {
                "epoch": epoch,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
            },
            checkpoint,
        )
        slowest_s = max(slowest_s, time.monotonic() - began)
        print(f"epoch {epoch}: loss {loss:.4f} ({time.monotonic() - began:.1f} s)", flush=True)
        print(f"RIGHTSIZE_PROGRESS epoch={epoch}/{args.epochs}", flush=True)
    if not final.exists():
        save_atomic(model.state_dict(), final)
    print(f"RIGHTSIZE_DONE final={final.resolve()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
