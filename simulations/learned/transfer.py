"""Where a synthetic-vs-real gap comes from: saved PPO policies on both kinds of test jobs.

    python -m simulations.learned.transfer --policies DIR --generator-file FILE [--trace FILE]

``DIR`` holds the networks ``rl_experiment --save-policies`` wrote (``ppo-<source>-<seed>.pt``)
and ``FILE`` the sequence model they were trained from. Every policy, and FCFS, SJF and F1,
replays the experiment's held-out real sequences and as many 1,024-job sequences of a
synthetic trace sampled from the model with a seed no training run used, so neither
policy saw them. A policy trained on synthetic jobs that does well on synthetic test
sequences but not on real ones learned the generator's world; one that does badly on
both did not learn.

Then, per held-out real sequence, each policy against SJF and F1 (:func:`compare_windows`):
the mean over sequences of ``log(bsld_policy / bsld_heuristic)`` with its standard error,
and on how many sequences the policy's bsld is lower, so that a mean gap can be told from
one sequence carrying it.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict

from knowledge_base.errors import InvalidInputError
from simulations.learned.ppo import PPOPolicy, _Network, heuristic_bsld, policy_bsld
from simulations.learned.rl_experiment import (
    _EVAL_JOBS,
    _TRACE,
    _sequence,
    held_out_windows,
    window_count,
)
from simulations.synth.columns import read_trace
from simulations.synth.generator import generate
from simulations.synth.model_files import load_model, read_torch_file

__all__ = ["WindowComparison", "compare_windows", "load_policy", "main"]

_NAME = re.compile(r"ppo-(real|synthetic)-(\d+)\.pt")
_TEST_SEED = 10_000  # the experiment's seeds sample synthetic traces 0, 1, ...


def load_policy(path: Path) -> PPOPolicy:
    """The PPO network ``rl_experiment --save-policies`` wrote to ``path``, its width read
    from the file's first layer."""
    source = str(path)
    state = read_torch_file(path, what="a PPO policy file", field="policy")
    if not isinstance(state, dict):
        raise InvalidInputError(
            "not a PPO policy file: expected a network's weights",
            source=source,
            field="policy",
            value=type(state).__name__,
        )
    # A residual start's file carries its skip ("prior.weight"); the heuristic it started
    # from only set the skip's first values, which the file holds.
    first = state.get("score.0.weight")
    hidden = int(first.shape[0]) if isinstance(first, torch.Tensor) and first.ndim == 2 else 0
    if hidden < 2:
        raise InvalidInputError(
            "not this PPO network's weights: no first layer (score.0.weight)",
            source=source,
            field="policy",
            value=sorted(state)[:5],
        )
    network = _Network(hidden, residual="SJF" if "prior.weight" in state else None)
    try:
        network.load_state_dict(state)
    except RuntimeError as error:  # missing, unexpected or misshapen weights
        raise InvalidInputError(
            f"not this PPO network's weights: {str(error)[:200]}",
            source=source,
            field="policy",
        ) from error
    return PPOPolicy(network)


class WindowComparison(BaseModel):
    """A policy against a heuristic over the same sequences."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean_log_ratio: float  # mean of log(bsld_policy / bsld_heuristic); < 0: policy better
    standard_error: float  # of that mean (sample standard deviation / sqrt(windows))
    lower: int  # sequences where the policy's bsld is below the heuristic's
    windows: int


def compare_windows(policy: list[float], heuristic: list[float]) -> WindowComparison:
    """``policy`` and ``heuristic``: mean bsld per sequence, the same sequences in order."""
    if len(policy) != len(heuristic):
        raise InvalidInputError(
            f"{len(policy)} policy values against {len(heuristic)} heuristic values",
            field="windows",
            value=len(policy),
        )
    if len(policy) < 2:
        raise InvalidInputError(
            "a standard error needs at least 2 sequences", field="windows", value=len(policy)
        )
    for field, values in (("policy", policy), ("heuristic", heuristic)):
        bad = [v for v in values if not (np.isfinite(v) and v > 0)]
        if bad:
            raise InvalidInputError(
                "a mean bsld must be finite and positive", field=field, value=bad[0]
            )
    ours, theirs = np.asarray(policy, dtype=np.float64), np.asarray(heuristic, dtype=np.float64)
    ratios = np.log(ours / theirs)
    return WindowComparison(
        mean_log_ratio=float(ratios.mean()),
        standard_error=float(ratios.std(ddof=1) / np.sqrt(ratios.size)),
        lower=int((ours < theirs).sum()),
        windows=int(ratios.size),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", type=Path, required=True)
    parser.add_argument("--generator-file", type=Path, required=True)
    parser.add_argument("--trace", type=Path, default=_TRACE)
    parser.add_argument("--split", type=float, default=0.7)
    parser.add_argument(
        "--windows",
        type=window_count,
        default=None,
        help="A number of sequences at fixed random places, or 'all' (the default)",
    )
    parser.add_argument("--synthetic-jobs", type=int, default=12000)
    args = parser.parse_args(argv)
    files: list[tuple[str, int, Path]] = []
    for p in args.policies.glob("ppo-*.pt"):
        if matched := _NAME.fullmatch(p.name):
            files.append((matched[1], int(matched[2]), p))
    files.sort()
    if not files:
        parser.error(f"--policies: no ppo-<source>-<seed>.pt in {args.policies}")

    trace = read_trace(args.trace)
    machine = trace.machine_procs
    n_train = int(len(trace.table) * args.split)
    test = _sequence(trace.table.take(slice(n_train, None)), machine)
    real = [w for _, w in held_out_windows(test, args.windows)]
    sample = generate(load_model(args.generator_file), args.synthetic_jobs, seed=_TEST_SEED)
    synthetic = [w for _, w in held_out_windows(_sequence(sample.table, machine), args.windows)]

    print(
        f"# mean bsld over {len(real)} real and {len(synthetic)} synthetic sequences of "
        f"{_EVAL_JOBS} jobs: real = held-out "
        f"{trace.name} (jobs {n_train + 1:,}-), synthetic = the model's trace seed {_TEST_SEED}"
    )
    print(f"{'scheduler':<10} {'trained on':<10} {'seed':>4} {'on real':>9} {'on synthetic':>13}")
    per_window: dict[str, list[float]] = {}
    for name in ("FCFS", "SJF", "F1"):
        per_window[name] = [heuristic_bsld(w, name) for w in real]
        h_real = float(np.mean(per_window[name]))
        h_synthetic = float(np.mean([heuristic_bsld(w, name) for w in synthetic]))
        print(f"{name:<10} {'-':<10} {'-':>4} {h_real:>9.2f} {h_synthetic:>13.2f}")
    results: dict[str, list[tuple[float, float]]] = {}
    policies_per_window: list[tuple[str, int, list[float]]] = []
    for source, seed, path in files:
        policy = load_policy(path)
        on_each = [policy_bsld(w, policy) for w in real]
        policies_per_window.append((source, seed, on_each))
        on_real = float(np.mean(on_each))
        on_synthetic = float(np.mean([policy_bsld(w, policy) for w in synthetic]))
        results.setdefault(source, []).append((on_real, on_synthetic))
        print(f"{'PPO':<10} {source:<10} {seed:>4} {on_real:>9.2f} {on_synthetic:>13.2f}")
    for source, values in results.items():
        print(
            f"PPO trained on {source}: median {statistics.median(v[0] for v in values):.2f} on "
            f"real, {statistics.median(v[1] for v in values):.2f} on synthetic "
            f"({len(values)} seeds)"
        )
    print(
        f"# per held-out real sequence: mean log(bsld PPO / bsld heuristic) +- standard "
        f"error, sequences where PPO is lower (of {len(real)})"
    )
    print(f"{'trained on':<10} {'seed':>4} {'vs SJF':>16} {'lower':>5} {'vs F1':>16} {'lower':>5}")
    for source, seed, on_each in policies_per_window:
        cells = []
        for name in ("SJF", "F1"):
            c = compare_windows(on_each, per_window[name])
            cells.append(f"{c.mean_log_ratio:>+7.3f} +- {c.standard_error:.3f} {c.lower:>5}")
        print(f"{source:<10} {seed:>4} {cells[0]} {cells[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
