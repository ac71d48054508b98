"""The per-operator CPU model calibrated on another host: its step law refitted on steps
timed there.

The shipped model (``opcost``) was timed on one CPU model (its ``meta.provenance``); on
any other host ``rightsize estimate --hardware local`` had only the untrained analytic
model (the HARP bundle covers the CPU models it was profiled on). Its operator booster
says how the operators of a step compare with each other; how a step's operators add up to
its time on a host (seconds per unit of compute and of other operators, per dispatched
operator, per parameter updated, per recurrent-loop operator: ``opcost._fit_step``) is
what changes most from one CPU to the next. So ``calibrate`` keeps the booster and the
update lines and refits the step law on the zoo steps of the shipped operator sweep
(``data/cpu_opcost/op_timings.jsonl``) and its recurrent probe networks' steps
(``CALIBRATION_PROBES``), timed on this host (``time_zoo_steps``: the same timing as the
shipped steps', ``opsweep``'s, one run each; about two minutes for the 128 steps at 1 and
2 threads on a quiet 2-core VM, seven at load 10).

Its p10/p90 are the wider of the shipped model's and the calibrated steps' own
leave-one-family-out residuals (each family's steps predicted by a step law fitted
without them). Checked on an Intel Xeon (AVX-512) host against the held-out model files
measured there (docs/estimators.md section 9), through ``rightsize estimate --hardware
local``: MAPE 87.5% as shipped (the analytic answer), 16.1% calibrated, p10-p90 coverage
0.85 (the AMD EPYC model's own step law there: 32.3%, coverage 0.40).

The calibrated model lives under ``RIGHTSIZE_HOME/cpu_opcost/HOST`` (``host_key``), is
written whole or not at all, and is used only on a host of the same CPU model and ISA.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xgboost as xgb

from knowledge_base.errors import InvalidInputError
from tools.estimators.cpu import opcost as oc
from tools.estimators.cpu.eager import RANDOM_S_PER_ELEMENT, eager_operators

if TYPE_CHECKING:
    from tools.estimators.cpu.step_law import StepRow

__all__ = [
    "MIN_STEPS",
    "calibrate",
    "calibrated_dir",
    "host_key",
    "load_calibrated",
    "save_calibrated",
    "time_zoo_steps",
    "zoo_items",
]

MIN_STEPS = 8  # steps per thread count below which the five-term step law is not refitted


def host_key(cpu_model: str, cpu_isa: str) -> str:
    """A folder name for a host's CPU model and vector ISA (``intel-r-xeon-r-processor-avx512``)."""
    words = re.sub(r"[^a-z0-9]+", "-", f"{cpu_model} {cpu_isa}".lower()).strip("-")
    if not words:
        raise InvalidInputError("no CPU model or ISA to name the host by", field="cpu_model")
    return words


def calibrated_dir(home: Path, cpu_model: str, cpu_isa: str) -> Path:
    return home.expanduser() / "cpu_opcost" / host_key(cpu_model, cpu_isa)


# Probe networks whose steps the calibration times beside the zoo's: the step law's
# seconds per recurrent-loop operator (``r``) is fitted on them (the zoo's LSTM runs one
# oneDNN kernel a layer, a dozen loop operators a step: too few to fit ``r`` on, which
# came out 0 and priced a GRU's 1,500 cell operators at nothing past the booster's own).
CALIBRATION_PROBES = frozenset({"recurrent"})


def zoo_items(folder: Path | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The shipped sweep's zoo items and ``CALIBRATION_PROBES`` probe items (their
    operators as timed), and operator geometry."""
    from tools.profiling.opsweep import read_items

    where = folder or oc.default_model_dir()
    items = [
        i
        for i in read_items(where / "op_timings.jsonl")
        if i.get("kind") == "zoo"
        or (i.get("kind") == "probe" and i.get("probe") in CALIBRATION_PROBES)
    ]
    geometry = {i["id"]: i for i in read_items(where / "op_geometry.jsonl")}
    return items, geometry


def time_zoo_steps(
    items: Sequence[Mapping[str, Any]],
    out: Path,
    *,
    threads: Sequence[int] = (1, 2),
    limit: int | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Time each zoo item's whole eager step on this host as the shipped steps were
    (``opsweep.step_line``: 2 warm-up and 5 timed steps, critical-path CPU time; one run),
    appending one JSON line an item to ``out`` after its provenance line, and skipping
    those already there (a run cut short resumes). ``limit``: at most that many items a
    thread count. Returns every line of ``out``."""
    from tools.profiling.opsweep import _item_task, provenance, read_items, step_line
    from tools.profiling.zoo.registry import FAMILIES

    probes: dict[str, Any] = {}
    if any(i.get("kind") == "probe" for i in items):
        from tools.profiling.opsweep import _probe_tasks

        probes = _probe_tasks(oc.default_model_dir() / "op_timings.jsonl")

    done = {i["id"]: i for i in read_items(out)} if out.exists() else {}
    chosen: list[Mapping[str, Any]] = []
    for t in threads:
        ofthreads = [i for i in items if int(i["threads"]) == t]
        chosen += ofthreads[:limit] if limit is not None else ofthreads
    out.parent.mkdir(parents=True, exist_ok=True)
    fresh = not out.exists() or out.stat().st_size == 0
    with out.open("a") as handle:
        if fresh:
            timing = (
                "opsweep.step_line: one run of 2 warm-up and 5 timed eager steps; 1 thread: "
                "the thread's CPU time, 2 threads: max(main, process - main); step_s the "
                "median, least_s the least"
            )
            header = provenance("rightsize profile calibrate", timing, sorted(threads))
            handle.write(json.dumps(header) + "\n")
        for item in chosen:
            if item["id"] in done:
                continue
            if item.get("kind") == "probe":
                make = functools.partial(_item_task, dict(item), probes)
            else:
                family = FAMILIES[item["family"]]
                make = functools.partial(family.task, item["params"], item["batch_size"])
            line = step_line(item, make, 1)
            handle.write(json.dumps(line) + "\n")
            handle.flush()
            done[item["id"]] = line
            if progress is not None:
                progress(item["id"], line["least_s"])
    return done


def _rows(model: oc.OpCostModel, steps: Sequence[oc.StepItem]) -> list[StepRow]:
    out: list[StepRow] = []
    for s in steps:
        compute, other = oc._opsum(model.booster, s.x, s.counts, s.threads, model.op_target)
        operators = eager_operators(float(np.sum(s.counts)), s.rnn_ops, s.rnn_calls)
        update = oc._update_s(model.updates, s.optimizer, s.threads, s.parameters)
        drawn_s = s.random_elements * RANDOM_S_PER_ELEMENT
        out.append(
            (compute, other, operators, update, float(s.rnn_ops), s.views, drawn_s, s.measured_s)
        )
    return out


def _fit(model: oc.OpCostModel, steps: Sequence[oc.StepItem], threads: int) -> list[float]:
    from tools.estimators.cpu.step_law import fit_step  # SciPy: fitting only

    coef = fit_step(_rows(model, steps), str(model.meta.get("step_loss", "relative")))
    if not any(s.rnn_ops for s in steps):
        # no recurrent step to fit it on: the shipped seconds per recurrent-loop operator
        coef[4] = model.step[f"t{threads}"][4] if len(model.step[f"t{threads}"]) > 4 else 0.0
    return coef


def calibrate(
    model: oc.OpCostModel,
    items: Sequence[Mapping[str, Any]],
    timed: Mapping[str, Mapping[str, Any]],
    geometry: Mapping[str, Any] | None,
    provenance: Mapping[str, Any],
) -> oc.OpCostModel:
    """``model`` with its step law refitted on ``timed`` (item id -> ``time_zoo_steps``
    line) for each thread count with at least ``MIN_STEPS`` steps; p10/p90 the wider of the
    model's and the calibrated steps' leave-one-family-out residuals. An InvalidInputError
    where no thread count has enough steps."""
    truth_key = "least_s" if "least" in str(model.meta.get("step_truth", "")) else "step_s"
    ids = {i["id"] for i in items}
    truth = {k: float(v[truth_key]) for k, v in timed.items() if k in ids}
    steps = oc.step_items(items, truth, timed, geometry if model.needs_geometry else None)
    step = dict(model.step)
    residuals: list[float] = []
    counts: dict[str, int] = {}
    for threads in model.threads:
        mine = [s for s in steps if s.threads == threads]
        if len(mine) < MIN_STEPS:
            continue
        step[f"t{threads}"] = _fit(model, mine, threads)
        counts[f"t{threads}"] = len(mine)
        for family in sorted({s.family for s in mine}):
            rest = [s for s in mine if s.family != family]
            if len(rest) < MIN_STEPS:
                continue
            coef = _fit(model, rest, threads)
            for row in _rows(model, [s for s in mine if s.family == family]):
                residuals.append(float(np.log(row[-1] / oc._apply(coef, *row[:-1]))))
    if not counts:
        raise InvalidInputError(
            f"fewer than {MIN_STEPS} timed zoo steps for every thread count "
            f"{model.threads}: time more (rightsize profile calibrate)",
            field="steps",
            value=len(steps),
        )
    q10, q90 = model.log_q10, model.log_q90
    lofo_mape = None
    if residuals:
        q10 = min(q10, float(np.quantile(residuals, 0.1)))
        q90 = max(q90, float(np.quantile(residuals, 0.9)))
        lofo_mape = float(np.mean(np.abs(np.exp(residuals) - 1.0)))
    meta = dict(model.meta)
    meta.pop("heldout", None)  # the held-out files were measured on the shipped host
    meta["provenance"] = dict(provenance)
    meta["host_calibration"] = {
        "from": model.estimator_id,
        "from_host": {
            k: (model.meta.get("provenance") or {}).get(k) for k in ("cpu_model", "cpu_isa")
        },
        "steps": counts,
        "families": sorted({s.family for s in steps}),
        "step_truth": truth_key,
        "zoo_family_out_mape": lofo_mape,
        "calibrated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "shipped_step": model.step,
    }
    return dataclasses.replace(model, step=step, log_q10=q10, log_q90=q90, meta=meta)


def save_calibrated(model: oc.OpCostModel, folder: Path) -> None:
    """Write ``model`` to ``folder`` whole: into a fresh folder beside it, then renamed
    over the old one (a failure leaves the old one as it was)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        model.save(fresh)
        steps = folder / "steps.jsonl"
        if steps.exists():
            shutil.copy2(steps, fresh / "steps.jsonl")
        old = folder.with_name(f".{folder.name}-old")
        if folder.exists():
            folder.rename(old)
        fresh.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise


def load_calibrated(home: Path, cpu_model: str, cpu_isa: str) -> oc.OpCostModel | None:
    """This host's calibrated model under ``home``, or None where there is none (or it was
    calibrated for another host: the folder's name and the file's provenance must agree)."""
    folder = calibrated_dir(home, cpu_model, cpu_isa)
    if not (folder / "opcost.json").exists() or not (folder / "opcost.ubj").exists():
        return None
    try:
        model = oc.OpCostModel.load(folder)
    except (OSError, ValueError, KeyError, TypeError, xgb.core.XGBoostError) as exc:
        raise InvalidInputError(
            f"cannot read this host's calibrated CPU model ({exc}); calibrate again "
            "(rightsize profile calibrate) or remove the folder",
            field="cpu_opcost",
            value=str(folder),
        ) from exc
    provenance = model.meta.get("provenance") or {}
    if provenance.get("cpu_model") != cpu_model or provenance.get("cpu_isa") != cpu_isa:
        return None
    return model
