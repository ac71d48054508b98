"""Synthetic traces on SDSC-SP2: fit time, sampling speed, fidelity for both generators.

    python benchmarks/synth.py [--seeds 5] [--epochs 60] [--report DIR] [--json]
    python benchmarks/synth.py --traces all [--models sequence copula] [--max-jobs 20000]
        [--seeds 1] [--sequence-epochs 8] [--report DIR]

    python benchmarks/synth.py --schedulers [--traces NAME ...|all] [--seeds 5]
        [--generator-dir DIR] [--report DIR] [--fidelity [--draws 2] [--fit-seeds 1]
        [--max-jobs N]]

The third form (issue #21, seed 003's question) trains PPO on each trace's real training
part and on the sequence model's synthetic traces (``rl_experiment``'s protocol and
defaults), seed by seed, and prints one line per trace: heuristics and both sources'
held-out bsld, how many seeds kept their start, the gap between the medians and the
paired gap (``schedulers.png`` and each trace's rows as JSON under ``--report``). With
``--fidelity`` it also checks the sequence model on each whole trace (the second form's
rows, ``--fit-seeds`` fits x ``--draws`` draws; ``--max-jobs`` cuts the traces) and
ends with issue #21's targets per trace in one table
(:mod:`simulations.learned.targets_table`): every draw's EASY bsld, the largest hour TV,
PPO's median and paired gaps, and which targets hold.

The second form (issue #21) is one table over every shared trace (ALCF-Theta included):
per trace and model, the column KS, EASY bsld against the real trace's, and the fidelity
that sees time (hour-of-day and day-of-week arrival TV, autocorrelation differences,
session KS, sequence similarity), the weekly offered load's coefficient of variation, the
backlog arrivals find over its time mean ("found/mean": below 1, arrivals avoid the queue)
and the correlation of a day's jobs with their mean size ("day n~w"), real / synthetic,
with ``temporal.png`` and the other plots per trace and model under ``--report``. Each
model is fitted once per trace (seed 0) and sampled with seeds 0..``--seeds``-1. Traces
longer than ``--max-jobs`` are cut to their first ``--max-jobs`` jobs (header kept) so
that the whole table fits in minutes on 2 cores.

For each model (Gaussian copula, TVAE): fit on the whole trace (53,999 replayable
jobs); time ``load model + generate + write SWF`` for 100,000 jobs (median of 3; target
< 60 s); then, for ``--seeds`` seeds, sample as many jobs as the real trace has, write
it, and run the fidelity report against the real trace (per-column KS and Wasserstein,
correlation difference, EASY bsld / wait / utilization, constraint check). The same
seeds are sampled again without load matching, to show what that step does. Targets
(issue #11): KS <= 0.1 on every column, EASY bsld within 20% of the real trace's.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulations.learned import rl_experiment, scheduler_table, targets_table
from simulations.synth.columns import COLUMNS, read_trace
from simulations.synth.fidelity import evaluate
from simulations.synth.generator import (
    ModelKind,
    generate,
    write_trace,
)
from simulations.synth.model_files import fit_model, load_model, save_model
from simulations.synth.trace_table import HEADER, TraceRow, row_line, trace_table

TRACE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "traces"
    / "SDSC-SP2-1998-4.2-cln.swf.gz"
)


def _run_model(
    kind: ModelKind, args: argparse.Namespace, work: Path, real_jobs: int
) -> dict[str, Any]:
    trace = read_trace(args.trace)
    options: dict[str, Any] = {"epochs": args.epochs} if kind == "tvae" else {}
    began = time.perf_counter()
    model = fit_model(trace, kind, seed=0, **options)
    fit_s = time.perf_counter() - began
    path = save_model(model, work / f"{kind}.pt")

    sample_times = []
    for repeat in range(3):
        began = time.perf_counter()
        loaded = load_model(path)
        written = write_trace(
            work / f"{kind}-100k.swf", generate(loaded, 100_000, seed=repeat), loaded.metadata
        )
        sample_times.append(time.perf_counter() - began)
        assert written == 100_000

    runs: list[dict[str, Any]] = []
    for match_load in (True, False):
        for seed in range(args.seeds):
            synthetic = work / f"{kind}-{seed}-{'load' if match_load else 'raw'}.swf"
            sample = generate(model, real_jobs, seed=seed, match_load=match_load)
            write_trace(synthetic, sample, model.metadata)
            report_dir = None
            if args.report is not None and seed == 0 and match_load:
                report_dir = args.report / kind
            report = evaluate(args.trace, synthetic, report_dir=report_dir)
            runs.append(
                {
                    "seed": seed,
                    "match_load": match_load,
                    "load_factor": sample.load_factor,
                    "ks": {c.column: c.ks for c in report.columns},
                    "wasserstein": {c.column: c.wasserstein for c in report.columns},
                    "wasserstein_relative": {
                        c.column: c.wasserstein_relative for c in report.columns
                    },
                    "corr_max_abs_diff": report.correlation.max_abs_difference,
                    "corr_mean_abs_diff": report.correlation.mean_abs_difference,
                    "bsld": report.scheduling.synthetic.mean_bsld,
                    "wait_s": report.scheduling.synthetic.mean_wait_s,
                    "utilization": report.scheduling.synthetic.utilization,
                    "bsld_rel": report.scheduling.bsld_relative_difference,
                    "constraints_passed": report.constraints.passed,
                    "rows_breaking_constraints": report.constraints.rows_with_violations,
                    "real": report.scheduling.real.model_dump(),
                    "passed": report.passed,
                }
            )
    return {
        "model": kind,
        "fit_s": fit_s,
        "classes": len(model.metadata.classes.classes),
        "sample_100k_s": statistics.median(sample_times),
        "sample_100k_runs_s": sample_times,
        "runs": runs,
    }


def _summary(result: dict[str, Any], match_load: bool) -> dict[str, Any]:
    runs = [r for r in result["runs"] if r["match_load"] is match_load]
    return {
        "ks_median": {c: statistics.median(r["ks"][c] for r in runs) for c in COLUMNS},
        "ks_max": {c: max(r["ks"][c] for r in runs) for c in COLUMNS},
        "w_median": {c: statistics.median(r["wasserstein"][c] for r in runs) for c in COLUMNS},
        "w_rel_median": {
            c: statistics.median(r["wasserstein_relative"][c] for r in runs) for c in COLUMNS
        },
        "corr_max": statistics.median(r["corr_max_abs_diff"] for r in runs),
        "bsld": [r["bsld"] for r in runs],
        "bsld_rel": [r["bsld_rel"] for r in runs],
        "wait_h": [r["wait_s"] / 3600 for r in runs],
        "utilization": [r["utilization"] for r in runs],
        "load_factor": [r["load_factor"] for r in runs],
        "seeds_passing": sum(r["passed"] for r in runs),
        "constraints_passed": all(r["constraints_passed"] for r in runs),
        "seeds": len(runs),
    }


TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
SHARED_TRACES = (
    "ALCF-Theta-2022.swf.gz",
    "SDSC-SP2-1998-4.2-cln.swf.gz",
    "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC-SP2-1996-3.1-cln.swf.gz",
    "HPC2N-2002-2.2-cln.swf.gz",
    "LANL-CM5-1994-4.1-cln.swf.gz",
)


def _traces_table(args: argparse.Namespace) -> int:
    names = SHARED_TRACES if args.traces == ["all"] else tuple(args.traces)
    paths = [TRACES / name if "/" not in name else Path(name) for name in names]
    args.max_jobs = args.max_jobs or _SLICE_JOBS
    if not args.json:
        print(
            f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; first "
            f"{args.max_jobs:,} jobs of each trace; {args.fit_seeds} fit(s) x {args.seeds} "
            "seed(s); sequence "
            f"{args.sequence_epochs} epochs; targets: EASY bsld within 20%, hour-of-day TV "
            "<= 0.05",
            flush=True,
        )
        print(HEADER, flush=True)

    def show(r: TraceRow) -> None:
        print(
            f"# {r.trace} {r.model} fit {r.fit_seed} seed {r.seed}: fit {r.fit_s:.0f} s, "
            f"sample {r.sample_s:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if not args.json:
            print(row_line(r), flush=True)  # each row as it comes: this takes a while

    rows = trace_table(
        paths,
        args.models,
        seeds=args.seeds,
        fit_seeds=args.fit_seeds,
        max_jobs=args.max_jobs,
        sequence_epochs=args.sequence_epochs,
        tvae_epochs=args.epochs,
        report=args.report,
        on_row=show,
    )
    if args.json:
        print(json.dumps([r.model_dump() for r in rows], indent=1))
    return 0


_SLICE_JOBS = 20_000  # the second form's default cut: the whole table in minutes
_WHOLE = 10**9  # --fidelity's default: every job of each trace

SCHEDULER_TRACES = (
    "SDSC-SP2-1998-4.2-cln.swf.gz",
    "KTH-SP2-1996-2.1-cln.swf.gz",
    "CTC-SP2-1996-3.1-cln.swf.gz",
    "HPC2N-2002-2.2-cln.swf.gz",
)


def _schedulers_table(args: argparse.Namespace) -> int:
    """Seed 003's question per trace: PPO trained on real vs synthetic, held-out real."""
    # each scheduler's result as it comes (minutes a trace)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if args.traces in (None, ["all"]):
        names: tuple[str, ...] = SHARED_TRACES if args.traces else SCHEDULER_TRACES
    else:
        names = tuple(args.traces)
    paths = [TRACES / name if "/" not in name else Path(name) for name in names]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:  # before any trace runs: each takes minutes
        print(f"synth.py: --traces: no such trace file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if not args.json:
        print(
            f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; PPO seeds "
            f"0..{args.seeds - 1} per source, {args.synthetic_jobs:,} synthetic jobs a seed, "
            f"rl_experiment's defaults otherwise; target: median gap within "
            f"{scheduler_table.TARGET:.0%}",
            flush=True,
        )
    rows = []
    for path in paths:
        argv = [
            "--trace", str(path),
            "--seeds", str(args.seeds),
            "--cem-generations", "0",
            "--synthetic-jobs", str(args.synthetic_jobs),
            "--generator-epochs", str(args.generator_epochs),
        ]  # fmt: skip
        if args.generator_dir is not None:
            args.generator_dir.mkdir(parents=True, exist_ok=True)
            argv += ["--generator-file", str(args.generator_dir / f"{path.name}-seq.pt")]
        else:
            argv.append("--fit-generator-once")
        began = time.perf_counter()
        result = rl_experiment.experiment(argv)
        print(f"# {path.name}: {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
        if args.report is not None:
            args.report.mkdir(parents=True, exist_ok=True)
            (args.report / f"{path.name}-schedulers.json").write_text(
                result.model_dump_json(indent=1)
            )
        rows.append(scheduler_table.summarize(result))
    if args.report is not None:
        scheduler_table.plot(rows, args.report / "schedulers.png")
    if not args.fidelity:
        if args.json:
            print(json.dumps([r.model_dump() for r in rows], indent=1))
        else:
            print("\n".join(scheduler_table.table_lines(rows)))
        return 0
    fidelity = trace_table(
        paths,
        ["sequence"],
        seeds=args.draws,
        fit_seeds=args.fit_seeds,
        max_jobs=args.max_jobs or _WHOLE,
        sequence_epochs=args.sequence_epochs,
        report=args.report,
        on_row=lambda r: print(row_line(r), file=sys.stderr, flush=True),
    )
    targets = targets_table.combine(fidelity, rows)
    if args.json:
        print(json.dumps([r.model_dump() for r in targets], indent=1))
    else:
        print("\n".join(scheduler_table.table_lines(rows)))
        print()
        print("\n".join(targets_table.target_lines(targets)))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--models", nargs="+", default=["copula", "tvae"])
    parser.add_argument("--report", type=Path, default=None, help="Heatmaps for seed 0 here")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--traces", nargs="+", default=None, help="'all' or trace file names: the #21 table"
    )
    parser.add_argument(
        "--max-jobs",
        type=int,
        default=None,
        help=f"cut each trace to its first N jobs (--traces: {_SLICE_JOBS:,}; --fidelity: "
        "the whole trace)",
    )
    parser.add_argument("--sequence-epochs", type=int, default=8)
    parser.add_argument(
        "--fit-seeds", type=int, default=1, help="with --traces: fits per trace and model"
    )
    parser.add_argument(
        "--schedulers",
        action="store_true",
        help="PPO trained on real vs synthetic per trace (--traces: default SDSC-SP2, KTH-SP2, "
        "CTC-SP2, HPC2N; 'all': the six)",
    )
    parser.add_argument("--synthetic-jobs", type=int, default=12_000, help="with --schedulers")
    parser.add_argument(
        "--generator-epochs", type=int, default=10, help="with --schedulers: sequence model's"
    )
    parser.add_argument(
        "--generator-dir",
        type=Path,
        default=None,
        help="with --schedulers: each trace's sequence model is loaded from here, or fitted "
        "once and saved here",
    )
    parser.add_argument(
        "--fidelity",
        action="store_true",
        help="with --schedulers: also check the sequence model on each trace, and end "
        "with issue #21's targets per trace in one table",
    )
    parser.add_argument("--draws", type=int, default=2, help="with --fidelity: draws per fit")
    args = parser.parse_args()
    if args.fidelity and not args.schedulers:
        parser.error("--fidelity: only with --schedulers (the second form is --traces alone)")
    if args.schedulers:
        return _schedulers_table(args)
    if args.traces:
        if args.models == ["copula", "tvae"]:
            args.models = ["sequence", "copula"]
        if args.seeds == 5:
            args.seeds = 1
        return _traces_table(args)
    real_jobs = len(read_trace(args.trace).table)
    with tempfile.TemporaryDirectory() as directory:
        results = [_run_model(kind, args, Path(directory), real_jobs) for kind in args.models]
    if args.json:
        print(json.dumps(results, indent=1, default=str))
        return 0
    real = results[0]["runs"][0]["real"]
    print(
        f"# {os.cpu_count()} cores, Python {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f}; {args.trace.name}: {real_jobs:,} jobs; "
        f"{args.seeds} seeds per model; real EASY bsld {real['mean_bsld']:.2f}, wait "
        f"{real['mean_wait_s'] / 3600:.2f} h, utilization {real['utilization']:.3f}"
    )
    for result in results:
        loaded = _summary(result, True)
        raw = _summary(result, False)
        print(
            f"\n## {result['model']}: fit {result['fit_s']:.1f} s ({result['classes']} classes); "
            f"100,000 jobs sampled and written in {result['sample_100k_s']:.2f} s (median of 3)"
        )
        print(f"{'column':<18} {'KS median':>9} {'KS max':>7} {'W median':>12} {'W/mean':>7}")
        for c in COLUMNS:
            print(
                f"{c:<18} {loaded['ks_median'][c]:>9.3f} {loaded['ks_max'][c]:>7.3f} "
                f"{loaded['w_median'][c]:>12.1f} {loaded['w_rel_median'][c]:>7.3f}"
            )
        print(f"correlation max |diff| (median over seeds): {loaded['corr_max']:.3f}")
        for label, s in (("load matched", loaded), ("no load matching", raw)):
            bsld = ", ".join(f"{b:.1f}" for b in s["bsld"])
            rel = ", ".join(f"{r:+.0%}" for r in s["bsld_rel"])
            print(
                f"{label:<17} EASY bsld [{bsld}] ({rel}); median "
                f"{statistics.median(s['bsld']):.1f}; wait median "
                f"{statistics.median(s['wait_h']):.2f} h; utilization median "
                f"{statistics.median(s['utilization']):.3f}; load factor "
                f"{min(s['load_factor']):.3f}-{max(s['load_factor']):.3f}; "
                f"{s['seeds_passing']}/{s['seeds']} seeds pass all targets; constraints "
                f"{'hold on every row' if s['constraints_passed'] else 'BROKEN'}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
