"""Seed 003's question in RLScheduler's setting: PPO and the learned priority, each trained
on the real trace and on a synthetic one from the same source, on held-out real jobs.

    python -m simulations.learned.rl_experiment [--trace FILE] [--seeds 3] [--json]

The trace's first ``--split`` of jobs is the training part; the sequence generator
(:mod:`simulations.synth.sequence`) is fitted on it alone and samples as many jobs. Each
scheduler (PPO, :mod:`simulations.learned.ppo`; the CEM-trained priority,
:mod:`simulations.learned.train`) is trained with the same settings and seed on the real
part and on the synthetic trace; PPO starts every seed as SJF exactly (``--residual``)
and fine-tunes it for 20 epochs on the first four fifths of its source, keeping the epoch
(the start included) that does best on the last fifth (``--validation-share``);
``--imitate SJF`` starts from a clone of SJF instead, ``--imitate none --ppo-epochs 40``
from random weights. Evaluation: the held-out part cut into consecutive sequences of
1,024 jobs (``--windows all``; a number: that many at fixed random places), each
replayed on an empty machine with EASY backfilling; the figure is the mean over sequences
of each sequence's mean bounded slowdown, as RLScheduler reports it. Heuristics on the
same sequences: FCFS, SJF, F1 (same simulator as PPO), EASY++ (EASY with Tsafrir's last-
two-runs estimates and shortest-first backfilling, in the compiled simulator) and plain
EASY there (which should equal FCFS here: a check that both simulators agree).
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
import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from knowledge_base.errors import InvalidInputError
from simulations.engine import EASY, SHORTEST, simulate_arrays
from simulations.learned.ppo import PPOSettings, Sequence, heuristic_bsld, policy_bsld, train_ppo
from simulations.learned.train import JobArrays, TrainingSettings, train_policy
from simulations.metrics import bounded_slowdown
from simulations.synth.columns import JobTable, Trace, read_trace
from simulations.synth.generator import generate
from simulations.synth.model_files import fit_model, load_model, save_model

__all__ = [
    "Experiment",
    "Row",
    "experiment",
    "held_out_windows",
    "main",
    "report",
    "run",
    "window_count",
]

log = logging.getLogger(__name__)

_TRACE = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "data"
    / "traces"
    / "SDSC-SP2-1998-4.2-cln.swf.gz"
)
_EVAL_JOBS = 1024
# Every seed starts as SJF exactly (the residual start) and fine-tunes for 20 epochs,
# validating on the last fifth of its training source, which it never trains on. The SJF
# clone (and 20 epochs) cut SDSC-SP2's held-out spread from 31.6-92.6 (random start) to
# 48.4-55.3; on CTC-SP2 the exact start validated on windows training also replayed gave
# 10.3-22.1 over 10 real-trained seeds (medians real / synthetic 20.7 / 13.3), validated
# apart 12.8-19.0 over 20 (medians 14.96 / 16.30; docs/synthetic.md, PPO section).
_RESIDUAL = "SJF"
_EPOCHS = 20
_VALIDATION_SHARE = 0.2


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scheduler: str
    trained_on: str
    seed: int
    training_seconds: float
    held_out_bsld: float  # mean over the evaluation sequences
    per_sequence: list[float]
    kept_epoch: int | None = None  # PPO: the epoch whose weights it kept (0: the start)


class Experiment(BaseModel):
    """One trace's experiment: every scheduler's row, and what was run."""

    model_config = ConfigDict(extra="forbid")

    trace: str
    description: str  # the table's first line: split, windows, PPO settings, seeds
    rows: list[Row]

    def held_out(self, scheduler: str, trained_on: str = "-") -> list[float]:
        """Held-out bsld of ``scheduler`` trained on ``trained_on`` ('-': a heuristic), by
        seed."""
        return [
            r.held_out_bsld
            for r in self.rows
            if r.scheduler == scheduler and r.trained_on == trained_on
        ]


def _sequence(table: JobTable, machine: int) -> Sequence:
    submit = np.rint(table.submit_s).astype(np.int64)
    return Sequence(
        submit_s=submit - submit[0],
        run_s=table.run_s.astype(np.int64),
        req_s=table.requested_time_s.astype(np.int64),
        procs=table.procs.astype(np.int64),
        machine_procs=machine,
    )


def _engine_bsld(seq: Sequence, user: np.ndarray, *, easy_plus: bool) -> float:
    start, end, _, _ = simulate_arrays(
        submit_s=seq.submit_s,
        run_s=seq.run_s,
        req_s=seq.req_s,
        procs=seq.procs,
        est_s=seq.req_s,
        user=user,
        machine_procs=seq.machine_procs,
        policy=EASY,
        last2=easy_plus,
        order=SHORTEST if easy_plus else 0,
    )
    wait = (start - seq.submit_s).astype(np.float64)
    return float(bounded_slowdown(wait, (end - start).astype(np.float64)).mean())


def _priority_bsld(seq: Sequence, policy: object) -> float:
    jobs = JobArrays(
        submit_s=seq.submit_s,
        run_s=seq.run_s,
        req_s=seq.req_s,
        procs=seq.procs,
        machine_procs=seq.machine_procs,
    )
    return jobs.mean_bsld(policy)  # type: ignore[arg-type]


def window_count(text: str) -> int | None:
    """``--windows``: a number of sequences, or None for 'all'."""
    if text == "all":
        return None
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or 'all', not {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"at least 1 sequence, not {count}")
    return count


def held_out_windows(seq: Sequence, count: int | None) -> list[tuple[int, Sequence]]:
    """(first job, sequence) of ``count`` 1,024-job sequences of ``seq`` at fixed random
    places (the same for every run), or, with None, every consecutive one (the tail
    shorter than a sequence left out)."""
    n = seq.submit_s.size
    if n <= _EVAL_JOBS:
        raise InvalidInputError(
            f"the test trace has {n} jobs, no more than one sequence", field="jobs", value=n
        )
    if count is None:
        places = np.arange(0, n - _EVAL_JOBS + 1, _EVAL_JOBS)
    else:
        places = np.random.default_rng(1234).integers(0, n - _EVAL_JOBS, count)
    return [(int(b), seq.window(int(b), _EVAL_JOBS)) for b in places]


def _parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", type=Path, default=_TRACE)
    parser.add_argument("--split", type=float, default=0.7)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--windows",
        type=window_count,
        default=None,
        help="Held-out 1,024-job sequences at fixed random places, or 'all' (the default): "
        "the held-out part cut into consecutive sequences",
    )
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument(
        "--sources",
        default="real,synthetic",
        help="Comma-separated training sources: real, synthetic (the sequence model)",
    )
    parser.add_argument(
        "--ppo-epochs",
        type=int,
        default=_EPOCHS,
        help=f"PPO epochs (default {_EPOCHS}, after the start)",
    )
    parser.add_argument(
        "--trajectories",
        type=int,
        default=PPOSettings().trajectories,
        help="PPO training sequences per epoch (the same for every source)",
    )
    parser.add_argument(
        "--updates",
        type=int,
        default=PPOSettings().updates,
        help="PPO steps over each epoch's batch",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=PPOSettings().learning_rate,
        help="First epoch's learning rate (falls linearly to 0)",
    )
    parser.add_argument(
        "--entropy",
        type=float,
        default=PPOSettings().entropy,
        help="First epoch's entropy bonus (falls linearly to 0)",
    )
    parser.add_argument(
        "--baseline",
        default=PPOSettings().baseline,
        choices=["SJF", "F1", "FCFS", "none"],
        help="Heuristic the PPO reward is relative to (SJF, F1, FCFS; 'none': minus bsld)",
    )
    parser.add_argument(
        "--validation-share",
        type=float,
        default=_VALIDATION_SHARE,
        help="Share of each training source's last jobs PPO validates on and never trains on "
        f"(default {_VALIDATION_SHARE}; 0: validation windows anywhere in the source)",
    )
    parser.add_argument(
        "--validation-windows",
        type=int,
        default=PPOSettings().validation_windows,
        help="Validation sequences that pick the kept epoch",
    )
    parser.add_argument(
        "--cem-generations", type=int, default=10, help="0: train no CEM priority (PPO only)"
    )
    parser.add_argument("--generator-epochs", type=int, default=10)
    parser.add_argument(
        "--fit-generator-once",
        action="store_true",
        help="Fit the sequence model once (seed 0); each seed samples its own trace from it",
    )
    parser.add_argument(
        "--generator-file",
        type=Path,
        help="The sequence model to sample from: loaded if the file exists, otherwise fitted "
        "once (first seed) and saved there; runs with seeds apart share it",
    )
    parser.add_argument(
        "--synthetic-jobs",
        type=int,
        default=0,
        help="Jobs in each seed's synthetic trace (default: as many as the training part)",
    )
    parser.add_argument(
        "--residual",
        choices=["SJF", "FCFS", "none"],
        help=f"PPO starts as this heuristic exactly and learns a correction to its ranking "
        f"(default {_RESIDUAL} unless --imitate)",
    )
    parser.add_argument(
        "--imitate",
        choices=["SJF", "F1", "FCFS", "none"],
        help="PPO starts from a copy of this heuristic instead (behaviour cloning); 'none': "
        "from random weights",
    )
    parser.add_argument(
        "--save-policies",
        type=Path,
        help="Folder for each trained PPO network's weights (ppo-<source>-<seed>.pt)",
    )
    parser.add_argument("--json", action="store_true")
    return parser


def _ppo_settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> PPOSettings:
    # Neither given: the residual start. One given: that start alone. Both: checked below.
    residual = args.residual or ("none" if args.imitate else _RESIDUAL)
    imitate = args.imitate or "none"
    try:
        return PPOSettings(
            epochs=args.ppo_epochs,
            trajectories=args.trajectories,
            updates=args.updates,
            learning_rate=args.learning_rate,
            entropy=args.entropy,
            baseline=None if args.baseline == "none" else args.baseline,
            imitate=None if imitate == "none" else imitate,
            residual=None if residual == "none" else residual,
            validation_share=args.validation_share,
            validation_windows=args.validation_windows,
        )
    except ValidationError as e:
        parser.error(str(e))


def _start(ppo: PPOSettings) -> str:
    if ppo.residual is not None:
        return f"{ppo.residual} exactly (residual)"
    return ppo.imitate or "random"


def experiment(argv: list[str], *, prog: str | None = None) -> Experiment:
    """The experiment the command line ``argv`` asks for (errors exit as argparse's do)."""
    parser = _parser(prog)
    return run(parser.parse_args(argv), parser)


def main(argv: list[str] | None = None, *, prog: str | None = None) -> int:
    """The experiment on ``argv`` (the command line's when None); ``prog``: the name its
    help and errors give the command (``rightsize synth schedulers``)."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    result = run(args, parser)
    if args.json:
        print(json.dumps([r.model_dump() for r in result.rows], indent=1))
        return 0
    print("\n".join(report(result)))
    return 0


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Experiment:
    """Every scheduler of the experiment ``args`` describes (``parser`` reports errors)."""
    wanted = {w.strip() for w in args.sources.split(",") if w.strip()}
    if not wanted or not wanted <= {"real", "synthetic"}:
        parser.error(f"--sources: use real and/or synthetic, not {args.sources!r}")
    ppo = _ppo_settings(args, parser)
    trace = read_trace(args.trace)
    machine = trace.machine_procs
    n_train = int(len(trace.table) * args.split)
    train_table = trace.table.take(slice(0, n_train))
    test_table = trace.table.take(slice(n_train, None))
    test = _sequence(test_table, machine)
    users = test_table.user.astype(np.int64)
    windows = [(w, users[b : b + _EVAL_JOBS]) for b, w in held_out_windows(test, args.windows)]
    rows: list[Row] = []

    def add(
        scheduler: str,
        trained_on: str,
        seed: int,
        seconds: float,
        values: list[float],
        kept_epoch: int | None = None,
    ) -> None:
        rows.append(
            Row(
                scheduler=scheduler,
                trained_on=trained_on,
                seed=seed,
                training_seconds=seconds,
                held_out_bsld=float(np.mean(values)),
                per_sequence=[round(v, 3) for v in values],
                kept_epoch=kept_epoch,
            )
        )
        log.info(
            "%s (%s, seed %d): held-out bsld %.2f",
            scheduler,
            trained_on,
            seed,
            rows[-1].held_out_bsld,
        )

    for name in ("FCFS", "SJF", "F1"):
        add(name, "-", -1, 0.0, [heuristic_bsld(w, name) for w, _ in windows])
    add("EASY (engine)", "-", -1, 0.0, [_engine_bsld(w, u, easy_plus=False) for w, u in windows])
    add("EASY++", "-", -1, 0.0, [_engine_bsld(w, u, easy_plus=True) for w, u in windows])

    train_trace = Trace(
        name=f"{trace.name}[:{n_train}]",
        table=train_table,
        machine_procs=machine,
        header=trace.header,
    )
    model = None
    real_jobs = _sequence(train_table, machine) if "real" in wanted else None
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        sources = {}
        if real_jobs is not None:
            sources["real"] = real_jobs
        if "synthetic" in wanted:
            if model is None and args.generator_file is not None and args.generator_file.exists():
                model = load_model(args.generator_file)
            if model is None or not (args.fit_generator_once or args.generator_file):
                model = fit_model(train_trace, "sequence", seed=seed, epochs=args.generator_epochs)
                if args.generator_file is not None:
                    save_model(model, args.generator_file)
            synthetic = generate(model, args.synthetic_jobs or n_train, seed=seed).table
            sources["synthetic sequence"] = _sequence(synthetic, machine)
        for label, jobs in sources.items():
            policy, trained = train_ppo(jobs, ppo.model_copy(update={"seed": seed}))
            held_out = [policy_bsld(w, policy) for w, _ in windows]
            add("PPO", label, seed, trained.seconds, held_out, trained.kept_epoch)
            if args.save_policies is not None:
                args.save_policies.mkdir(parents=True, exist_ok=True)
                name = f"ppo-{label.split()[0]}-{seed}.pt"
                torch.save(policy.network.state_dict(), args.save_policies / name)
            log.info(
                "PPO (%s, seed %d): kept epoch %d; validation %s",
                label,
                seed,
                trained.kept_epoch,
                " ".join(f"{e}:{v:.1f}" for e, v in trained.validation),
            )
            if args.cem_generations < 1:
                continue
            began = time.perf_counter()
            arrays = JobArrays(
                submit_s=jobs.submit_s,
                run_s=jobs.run_s,
                req_s=jobs.req_s,
                procs=jobs.procs,
                machine_procs=machine,
            )
            cem = train_policy(
                arrays, TrainingSettings(generations=args.cem_generations, seed=seed)
            )
            add(
                "learned priority (CEM)",
                label,
                seed,
                time.perf_counter() - began,
                [_priority_bsld(w, cem.policy) for w, _ in windows],
            )
    return Experiment(
        trace=trace.name,
        description=f"# {trace.name}: train on jobs 1-{n_train:,}, evaluate on {len(windows)} "
        f"sequences of {_EVAL_JOBS} held-out jobs (EASY backfilling); PPO {args.ppo_epochs} "
        f"epochs x {args.trajectories} sequences of 256 ({ppo.updates} steps each, lr "
        f"{ppo.learning_rate:g}, entropy {ppo.entropy:g}), reward vs {ppo.baseline or '-'}, "
        f"start {_start(ppo)}; "
        f"seeds {args.first_seed}..{args.first_seed + args.seeds - 1}",
        rows=rows,
    )


def report(result: Experiment) -> list[str]:
    """The experiment's table and medians, as the command prints them."""
    lines = [result.description]
    lines.append(
        f"{'scheduler':<24} {'trained on':<19} {'seed':>4} {'train s':>8} {'held-out bsld':>14}"
    )
    for r in result.rows:
        lines.append(
            f"{r.scheduler:<24} {r.trained_on:<19} {r.seed if r.seed >= 0 else '-':>4} "
            f"{r.training_seconds:>8.0f} {r.held_out_bsld:>14.2f}"
        )
    for scheduler in ("PPO", "learned priority (CEM)"):
        medians = {}
        for label in ("real", "synthetic sequence"):
            values = result.held_out(scheduler, label)
            if values:
                medians[label] = statistics.median(values)
                lines.append(
                    f"{scheduler} trained on {label}: median {medians[label]:.2f} "
                    f"(range {min(values):.2f}-{max(values):.2f}, {len(values)} seeds)"
                )
        if len(medians) == 2:
            gap = medians["synthetic sequence"] / medians["real"] - 1
            lines.append(f"{scheduler}: synthetic-trained vs real-trained median {gap:+.1%}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
