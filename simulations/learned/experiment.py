"""Seed 003's open question: does a scheduler trained on synthetic traces do as well as one
trained on the real trace? Measured on a held-out part of the real trace.

    python -m simulations.learned.experiment [--trace FILE] [--split 0.7] [--json]

The trace's first ``split`` of jobs (in submit order) is the training part, the rest is
held out. Generators (copula; TVAE unless ``--no-tvae``) are fitted on the training part
only and sample as many jobs as it has. A priority policy is trained (same settings and
seed) on the real training part and on each synthetic trace; every policy and plain
EASY are then replayed on the held-out part. The training part is the only thing any
learner or generator sees.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from simulations.learned.priority import PriorityPolicy
from simulations.learned.train import JobArrays, TrainingSettings, train_policy
from simulations.metrics import bounded_slowdown
from simulations.synth.columns import JobTable, Trace, read_trace
from simulations.synth.generator import generate
from simulations.synth.model_files import fit_model

__all__ = ["HeldOutResult", "arrays_from_table", "main"]

log = logging.getLogger(__name__)

_TRACE = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "traces"
    / "SDSC-SP2-1998-4.2-cln.swf.gz"
)


class HeldOutResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: str
    trained_on: str
    seed: int
    training_seconds: float
    training_objective: float
    training_easy_objective: float
    held_out_mean_bsld: float
    held_out_mean_wait_s: float


def arrays_from_table(table: JobTable, machine_procs: int) -> JobArrays:
    return JobArrays(
        submit_s=np.rint(table.submit_s).astype(np.int64),
        run_s=table.run_s.astype(np.int64),
        req_s=table.requested_time_s.astype(np.int64),
        procs=table.procs.astype(np.int64),
        machine_procs=machine_procs,
    )


def _held_out(jobs: JobArrays, policy: PriorityPolicy | None) -> tuple[float, float]:
    start, end = jobs.schedule(policy)
    wait = (start - jobs.submit_s).astype(np.float64)
    bsld = bounded_slowdown(wait, (end - start).astype(np.float64))
    return float(bsld.mean()), float(wait.mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", type=Path, default=_TRACE)
    parser.add_argument("--split", type=float, default=0.7)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--population", type=int, default=24)
    parser.add_argument("--tvae-epochs", type=int, default=60)
    parser.add_argument("--no-tvae", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="First seed")
    parser.add_argument("--seeds", type=int, default=3, help="Seeds (generator + training)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)

    trace = read_trace(args.trace)
    n_train = int(len(trace.table) * args.split)
    train_table = trace.table.take(slice(0, n_train))
    test_table = trace.table.take(slice(n_train, None))
    machine = trace.machine_procs
    train_trace = Trace(
        name=f"{trace.name}[:{n_train}]",
        table=train_table,
        machine_procs=machine,
        header=trace.header,
    )
    test = arrays_from_table(test_table, machine)
    easy_bsld, easy_wait = _held_out(test, None)
    results = [
        HeldOutResult(
            policy="EASY",
            trained_on="-",
            seed=-1,
            training_seconds=0.0,
            training_objective=float("nan"),
            training_easy_objective=float("nan"),
            held_out_mean_bsld=easy_bsld,
            held_out_mean_wait_s=easy_wait,
        )
    ]
    kinds = ["copula"] if args.no_tvae else ["copula", "tvae"]
    for seed in range(args.seed, args.seed + args.seeds):
        sources: dict[str, JobArrays] = {"real": arrays_from_table(train_table, machine)}
        for kind in kinds:
            options = {"epochs": args.tvae_epochs} if kind == "tvae" else {}
            model = fit_model(train_trace, kind, seed=seed, **options)  # type: ignore[arg-type]
            sample = generate(model, n_train, seed=seed)
            sources[f"synthetic {kind}"] = arrays_from_table(sample.table, machine)
        settings = TrainingSettings(
            generations=args.generations, population=args.population, seed=seed
        )
        for label, jobs in sources.items():
            began = time.perf_counter()
            trained = train_policy(jobs, settings)
            bsld, wait = _held_out(test, trained.policy)
            results.append(
                HeldOutResult(
                    policy="learned + EASY backfill",
                    trained_on=label,
                    seed=seed,
                    training_seconds=time.perf_counter() - began,
                    training_objective=trained.policy_objective,
                    training_easy_objective=trained.easy_objective,
                    held_out_mean_bsld=bsld,
                    held_out_mean_wait_s=wait,
                )
            )
            log.info("%s seed %d: held-out bsld %.2f", label, seed, bsld)
    if args.json:
        print(json.dumps([r.model_dump() for r in results], indent=1))
        return 0
    print(
        f"# {trace.name}: train on jobs 1-{n_train:,}, hold out {len(test_table):,}; "
        f"CEM {args.population} x {args.generations} generations, seeds "
        f"{args.seed}..{args.seed + args.seeds - 1}"
    )
    print(
        f"{'policy':<24} {'trained on':<17} {'seed':>4} {'train s':>8} {'train bsld (EASY)':>18} "
        f"{'held-out bsld':>14} {'wait h':>7}"
    )
    for r in results:
        print(
            f"{r.policy:<24} {r.trained_on:<17} {r.seed if r.seed >= 0 else '-':>4} "
            f"{r.training_seconds:>8.0f} "
            f"{f'{r.training_objective:.1f} ({r.training_easy_objective:.1f})':>18} "
            f"{r.held_out_mean_bsld:>14.2f} {r.held_out_mean_wait_s / 3600:>7.2f}"
        )
    for label in dict.fromkeys(r.trained_on for r in results if r.seed >= 0):
        values = [r.held_out_mean_bsld for r in results if r.trained_on == label]
        print(
            f"trained on {label}: held-out bsld median {statistics.median(values):.2f} "
            f"(range {min(values):.2f}-{max(values):.2f}) vs EASY {easy_bsld:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
