"""Held-out model files of families the zoo does not name: estimate against measurement.

The files (``examples/models/unseen/``: an LSTM word language model, a U-Net, a GRU
encoder-decoder, a text classifier and a small ViT on ``nn.TransformerEncoderLayer``)
are never fitted on: not by the operator booster, the step law, the calibration or the
intervals. This script

1. ``--measure``: times each file's training step here, in a fresh child process per run
   (``RUNS`` runs at ``THREADS`` threads, ``nice``; each run 1 warm-up and ``STEPS``
   timed SGD steps): the step's critical-path CPU time (``optiming.training_step_samples``,
   the statistic the per-operator model is fitted on; a shared machine's load inflates wall
   time far more) and the peak resident set above the process's after ``import torch``
   (what the profiler measures, what the estimate answers); the median of the runs'
   medians, and the least, go to ``--out`` (default ``data/cpu_opcost/unseen_HOST.json``);
2. asks ``rightsize estimate --hardware local --threads 2 --json`` for every file (the
   door a user takes; a calibrated host answers from ``rightsize profile calibrate``'s
   model) and prints estimate against measurement: APE per row, mean and max, time and
   memory (the answer's memory less the process's own, ``TORCH_PROCESS_MB``, which a
   request includes and the measurement does not).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/heldout_models.py --measure
    python benchmarks/heldout_models.py            # estimates against the stored times
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

UNSEEN = REPO / "examples" / "models" / "unseen"
DATA = REPO / "data" / "cpu_opcost"
# file stem -> (class, batch sizes)
MODELS: dict[str, tuple[str, tuple[int, ...]]] = {
    "lstm_lm": ("LSTMWordLM", (8, 32)),
    "unet": ("UNet", (4, 16)),
    "gru_seq2seq": ("GRUSeq2Seq", (8, 32)),
    "text_encoder": ("TextEncoder", (4, 16)),
    "vit_small": ("SmallViT", (8, 32)),
}
THREADS = 2
RUNS = 3
STEPS = 3


def _child(stem: str, batch: int, seed: int) -> dict[str, Any]:
    """One run, in this (fresh) process: the step samples and the peak memory."""
    import resource
    import time

    import torch

    from tools.estimators.model_file import load_user_model
    from tools.profiling import counting
    from tools.profiling.profiler import rss_mb

    start_mb = rss_mb()
    torch.manual_seed(seed)
    torch.set_num_threads(THREADS)
    user = load_user_model(UNSEEN / f"{stem}.py", MODELS[stem][0])
    task = user.task(batch)
    optimizer = torch.optim.SGD(task.model.train().parameters(), lr=1e-3, momentum=0.9)
    counting.training_step(task, optimizer)  # warm-up
    samples, wall = [], []
    for _ in range(STEPS):
        # as optiming.training_step_samples: the critical path of the threads' CPU time
        p0, t0, w0 = time.process_time_ns(), time.thread_time_ns(), time.perf_counter()
        counting.training_step(task, optimizer)
        t1, p1, w1 = time.thread_time_ns(), time.process_time_ns(), time.perf_counter()
        main = (t1 - t0) / 1e9
        samples.append(main if THREADS <= 1 else max(main, (p1 - p0) / 1e9 - main))
        wall.append(w1 - w0)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return {"samples_s": samples, "wall_s": wall, "peak_memory_mb": peak_mb - start_mb}


def _host_key() -> str:
    from tools.estimators.cpu.host_calibration import host_key
    from tools.profiling.profiler import hardware_descriptors

    here = hardware_descriptors(1)
    return host_key(str(here["cpu_model"]), str(here["cpu_isa"]))


def default_out() -> Path:
    return DATA / f"unseen_{_host_key()}.json"


def measure(out_path: Path) -> None:
    """Time every file ``RUNS`` times, each run in a fresh child process."""
    from tools.profiling.profiler import hardware_descriptors

    rows: list[dict[str, Any]] = []
    for stem, (cls, batches) in MODELS.items():
        for batch in batches:
            runs = []
            for run in range(RUNS):
                done = subprocess.run(
                    [sys.executable, __file__, "--child", stem, str(batch), str(run)],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "OMP_NUM_THREADS": str(THREADS)},
                )
                runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            medians = [statistics.median(r["samples_s"]) for r in runs]
            walls = [statistics.median(r["wall_s"]) for r in runs]
            row = {
                "file": stem,
                "class": cls,
                "batch_size": batch,
                "threads": THREADS,
                "step_s": statistics.median(medians),
                "least_s": min(min(r["samples_s"]) for r in runs),
                "runs_step_s": medians,
                "wall_s": statistics.median(walls),
                "peak_memory_mb": statistics.median(r["peak_memory_mb"] for r in runs),
                "runs_peak_memory_mb": [round(r["peak_memory_mb"], 1) for r in runs],
                "loadavg_1m": round(os.getloadavg()[0], 2),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    body = {
        "provenance": {
            **hardware_descriptors(1),
            "command": "python benchmarks/heldout_models.py --measure",
            "niceness": os.nice(0),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
            "time_basis": "optiming.training_step_samples: critical-path CPU time of an "
            f"eager SGD step at {THREADS} threads; {RUNS} runs (fresh processes) of 1 "
            f"warm-up and {STEPS} timed steps; step_s the median of the runs' medians",
            "memory_basis": "peak resident set (ru_maxrss) above the resident set after "
            "import torch; the median of the runs",
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        "rows": rows,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(body, indent=1) + "\n")
    print(f"wrote {out_path}", flush=True)


def estimates(stem: str) -> dict[int, dict[str, Any]]:
    """``rightsize estimate --json`` for every batch size of ``stem`` (batch -> answer)."""
    cls, batches = MODELS[stem]
    command = [
        sys.executable,
        "-m",
        "rightsize",
        "estimate",
        "--model-file",
        str(UNSEEN / f"{stem}.py"),
        "--model-class",
        cls,
        "--epochs",
        "1",
        "--samples",
        "1000",
        "--threads",
        str(THREADS),
        "--json",
    ]
    for batch in batches:
        command += ["--batch-size", str(batch)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{stem}: rightsize estimate failed: {done.stderr.strip()[-400:]}")
    body = json.loads(done.stdout)
    return {
        int(e["batch_size"]): e for e in body["estimates"] if e.get("hardware", "local") == "local"
    }


def _ape(estimate: float, measured: float) -> float:
    return abs(estimate - measured) / measured


def merged_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """The measuring sessions' rows as one per file and batch: the median of the sessions'
    steps (each the median of its runs' medians), the least step of all, the median
    memory."""
    by_key: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            by_key.setdefault((row["file"], int(row["batch_size"])), []).append(row)
    return [
        {
            **rows[0],
            "step_s": statistics.median(r["step_s"] for r in rows),
            "least_s": min(r["least_s"] for r in rows),
            "peak_memory_mb": statistics.median(r["peak_memory_mb"] for r in rows),
            "sessions": len(rows),
        }
        for rows in by_key.values()
    ]


def report(truth_paths: list[Path]) -> None:
    # The answer's memory is a request: what training adds and the process after ``import
    # torch`` (a constant); the measurements are what training adds.
    from tools.planning.cpu_model_file import TORCH_PROCESS_MB

    rows = merged_rows(truth_paths)
    basis = json.loads(truth_paths[0].read_text())["provenance"]["time_basis"]
    print(f"truth: {', '.join(str(p) for p in truth_paths)} ({basis}; sessions merged)")
    print(
        "| file | batch | measured s | least s | estimate p50 (p10-p90) | err | err (least) | "
        "measured MB | estimate MB (less the process) | err | estimator |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    time_apes, least_apes, memory_apes = [], [], []
    answers = {stem: estimates(stem) for stem in MODELS}
    for row in rows:
        answer = answers[row["file"]].get(int(row["batch_size"]))
        if answer is None:
            continue
        t, m = answer["iteration_time_s"], answer["peak_memory_mb"]
        time_err = t["p50"] / row["step_s"] - 1.0
        memory_mb = m["p50"] - TORCH_PROCESS_MB
        memory_err = memory_mb / row["peak_memory_mb"] - 1.0
        least_err = t["p50"] / row["least_s"] - 1.0
        time_apes.append(abs(time_err))
        least_apes.append(abs(least_err))
        memory_apes.append(abs(memory_err))
        print(
            f"| {row['file']} | {row['batch_size']} | {row['step_s']:.4f} | "
            f"{row['least_s']:.4f} | {t['p50']:.4f} ({t['p10']:.4f}-{t['p90']:.4f}) | "
            f"{time_err:+.0%} | {least_err:+.0%} | "
            f"{row['peak_memory_mb']:.0f} | {memory_mb:.0f} | {memory_err:+.0%} | "
            f"{answer.get('estimator', '')} |"
        )
    if time_apes:
        print(
            f"time (median step): mean APE {statistics.mean(time_apes):.1%}, max "
            f"{max(time_apes):.1%} ({len(time_apes)} rows); time (least step): mean APE "
            f"{statistics.mean(least_apes):.1%}, max {max(least_apes):.1%}; memory: mean APE "
            f"{statistics.mean(memory_apes):.1%}, max {max(memory_apes):.1%}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="time the files here first")
    parser.add_argument("--out", type=Path, help="the measurements' file (default: per host)")
    parser.add_argument(
        "--truth", type=Path, nargs="+", help="measurement files to merge (default: --out)"
    )
    parser.add_argument(
        "--child", nargs=3, metavar=("STEM", "BATCH", "SEED"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        stem, batch, seed = args.child
        print(json.dumps(_child(stem, int(batch), int(seed))))
        return 0
    if os.nice(0) < 10:
        os.nice(10 - os.nice(0))
    out = args.out or default_out()
    if args.measure:
        measure(out)
    report(args.truth or [out])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
