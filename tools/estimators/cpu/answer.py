"""Finding, training, registering and asking the DNN estimators (HARP's Predict step).

Trained files: the repository ships a bundle in ``data/dnn_profiles/models`` (next to
the dataset it was trained on; the settings' ``dnn_models`` point elsewhere); without one,
the first use trains a bundle from the dataset and caches it under
``HOME/dnn/models/<dataset digest>`` (op graphs under ``HOME/dnn/graphs``).
``register`` records every estimator of a bundle in the knowledge base's registry with
its validation metrics and promotes the ones HARP's rule selected.

``estimate`` answers a user's model file on hardware options: the trained estimators
where the bundle's domain covers the hardware (this machine's CPU model and thread
counts), the analytic op-graph model elsewhere (``analytic-opgraph``, wide intervals).
Where the per-operator CPU model (``opcost``, ``load_opcost``) covers the hardware too
and was the better of the two on the held-out model files (its file records that
comparison), it answers the time per iteration and the bundle the memory.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import EstimatorRecord, WorkPriced
from knowledge_base.store import KnowledgeBase
from tools.estimators.cpu.bundle import TARGETS, EstimatorBundle, train_bundle
from tools.estimators.cpu.coverage import MOST, pricing_coverage, require_priced
from tools.estimators.cpu.dataset import (
    GraphData,
    GraphStore,
    default_dataset_path,
    load_examples,
)
from tools.estimators.cpu.features import FeatureInput
from tools.estimators.cpu.opcost import OpCostModel, default_model_dir
from tools.estimators.gpu.memory.context import context_for
from tools.estimators.model_file import UserModel
from tools.planning.analytic import STARTUP_LOW_S, STARTUP_POINT_S, STARTUP_S
from tools.profiling.analytic import (
    HardwareSpec,
    analytic_memory_mb,
    analytic_time_s,
    cpu_spec,
    gpu_spec,
)
from tools.profiling.profiler import ForkedCall, hardware_descriptors, measure_task, rss_mb

__all__ = [
    "ANALYTIC_OPGRAPH_ID",
    "HardwareOption",
    "OptionEstimate",
    "Quantiles",
    "bundle_records",
    "committed_models_dir",
    "estimate",
    "gpu_roofline_record",
    "hardware_options",
    "load_bundle",
    "load_host_opcost",
    "load_opcost",
    "register",
    "smoke_step",
    "train_to",
]

log = logging.getLogger(__name__)

ANALYTIC_OPGRAPH_ID = "analytic-opgraph"
# Spreads of the untrained analytic op-graph estimate, as the planner's fallback uses.
_CPU_TIME_SPREAD = (0.4, 2.5)
_GPU_TIME_SPREAD = (0.5, 2.0)
_MEMORY_SPREAD = (0.7, 1.4)
TARGET_IDS = {"iteration_s": "dnn_iteration_s", "peak_memory_mb": "dnn_peak_memory_mb"}


def committed_models_dir(override: Path | None = None) -> Path:
    """``override`` (the settings' ``dnn_models``), else ``models/`` beside the committed
    dataset."""
    if override is not None:
        return override.expanduser()
    return default_dataset_path().parent / "models"


def _digest(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()[:12]


def load_bundle(
    home: Path,
    dataset: Path | None = None,
    *,
    models: Path | None = None,
    train: bool = True,
    workers: int = 2,
) -> tuple[EstimatorBundle, Path]:
    """The bundle to answer with and the folder it lives in (trained on first use);
    ``models``: a folder of trained files to use instead of the shipped ones."""
    source = dataset or default_dataset_path()
    committed = committed_models_dir(models)
    if dataset is None and (committed / "bundle.json").exists():
        return EstimatorBundle.load(committed), committed
    if not source.exists():
        raise InvalidInputError(
            "no profiled dataset to train the DNN estimators from (run `rightsize profile "
            "sweep`, or set RIGHTSIZE_DNN_PROFILES)",
            field="dataset",
            value=str(source),
        )
    folder = home.expanduser() / "dnn" / "models" / _digest(source)
    if (folder / "bundle.json").exists():
        return EstimatorBundle.load(folder), folder
    if not train:
        raise InvalidInputError("no trained DNN estimators", field="models", value=str(folder))
    examples = load_examples(source)
    store = GraphStore(home.expanduser() / "dnn" / "graphs")
    store.build(examples, workers=workers)
    bundle = train_bundle(examples, store)
    bundle.save(folder)
    return bundle, folder


def load_opcost(folder: Path | None = None) -> OpCostModel | None:
    """The per-operator CPU model in ``folder`` (the settings' ``cpu_opcost``), else the
    shipped one; None where there is none."""
    where = folder.expanduser() if folder is not None else default_model_dir()
    if not (where / "opcost.json").exists() or not (where / "opcost.ubj").exists():
        return None
    return OpCostModel.load(where)


def load_host_opcost(home: Path) -> OpCostModel | None:
    """The per-operator CPU model calibrated on this host (``rightsize profile
    calibrate``, under ``home``), or None where this host has none."""
    from tools.estimators.cpu.host_calibration import load_calibrated

    here = hardware_descriptors(1)
    return load_calibrated(home, str(here["cpu_model"]), str(here["cpu_isa"]))


def train_to(
    home: Path, out: Path, dataset: Path | None = None, *, workers: int = 2, gnn_epochs: int = 80
) -> EstimatorBundle:
    """Train a bundle on the dataset and save it in ``out`` (e.g. the shipped folder)."""
    examples = load_examples(dataset or default_dataset_path())
    store = GraphStore(home.expanduser() / "dnn" / "graphs")
    store.build(examples, workers=workers)
    bundle = train_bundle(examples, store, gnn_epochs=gnn_epochs)
    bundle.save(out)
    return bundle


def bundle_records(bundle: EstimatorBundle, folder: Path) -> list[EstimatorRecord]:
    """Registry records of every estimator in ``bundle`` (ids depend on the files)."""
    meta = bundle.meta
    digest = hashlib.sha1((folder / "bundle.json").read_bytes()).hexdigest()[:10]
    records: list[EstimatorRecord] = []
    for target in TARGETS:
        for kind, scores in meta.validation.get(target, {}).items():
            calibration = meta.calibration[target][kind]
            validation = {
                "mape": scores.mape / 100,
                "under_rate": scores.under_rate,
                "over_error": scores.over_error / 100,
                "safety_factor": calibration.safety_factor,
                "interval_widen_log": calibration.widen_log,
                "interval_widen_low_log": (
                    calibration.widen_log
                    if calibration.widen_low_log is None
                    else calibration.widen_low_log
                ),
                "interval_widen_high_log": (
                    calibration.widen_log
                    if calibration.widen_high_log is None
                    else calibration.widen_high_log
                ),
            }
            if scores.coverage is not None:
                validation["coverage_p10_p90"] = scores.coverage
            seen = meta.in_family.validation.get(target, {}).get(kind) if meta.in_family else None
            if seen is not None:
                validation["in_family_mape"] = seen.mape / 100
                validation["in_family_under_rate"] = seen.under_rate
                if seen.coverage is not None:
                    validation["in_family_coverage_p10_p90"] = seen.coverage
            names = {
                "blackbox": meta.blackbox_names,
                "hybrid": meta.hybrid_names,
                "whitebox": ["op_graph", "hardware", "batch", "optimizer", "analytic"],
            }[kind]
            domain = meta.domain
            records.append(
                EstimatorRecord(
                    id=f"dnn-{kind}-{target}-{digest}",
                    kind={"blackbox": "xgboost", "whitebox": "gnn", "hybrid": "hybrid"}[kind],
                    target=TARGET_IDS[target],
                    validation=validation,
                    training_rows=meta.training_rows,
                    artifact_path=str(folder),
                    features=list(names),
                    notes=(
                        f"HARP DNN estimator ({kind}); validation "
                        f"({meta.validation_method or 'in family'}) rows {meta.validation_rows}; "
                        f"selected: {meta.selected.get(target) == kind}; domain: "
                        + (domain.model_dump_json() if domain else "{}")
                    ),
                )
            )
    return records


def gpu_roofline_record() -> EstimatorRecord:
    """The planner's GPU estimator (``adapter``) as a registry record."""
    from tools.estimators.gpu.gavel_estimator import GPU_ROOFLINE_ID, gavel_points, trained_roofline

    _, (mape, q10, q90), _ = trained_roofline()
    return EstimatorRecord(
        id=GPU_ROOFLINE_ID,
        kind="roofline",
        target="dnn_iteration_s_gpu",
        validation={"mape": mape, "relative_error_p10": q10, "relative_error_p90": q90},
        training_rows=len(gavel_points()),
        artifact_path=str(default_dataset_path().parent / "gavel_single_gpu.json"),
        features=["model", "batch_size", "gpu_fp32_tflops"],
        notes="Gavel K80/P100/V100 single-GPU steps; validation: leave one GPU out",
    )


async def register(kb: KnowledgeBase, bundle: EstimatorBundle, folder: Path) -> list[str]:
    """Put the bundle's estimators in the registry (once) and promote the selected ones."""
    from knowledge_base.errors import NotFoundError

    ids: list[str] = []
    for record in bundle_records(bundle, folder):
        try:
            await kb.get_estimator(record.id)
        except NotFoundError:
            await kb.put_estimator(record)
            kind = record.id.split("-")[1]
            target = next(t for t, i in TARGET_IDS.items() if i == record.target)
            if bundle.meta.selected.get(target) == kind:
                await kb.promote_estimator(record.id)
        ids.append(record.id)
    from tools.estimators.gpu.gavel_estimator import GPU_ROOFLINE_ID

    try:
        await kb.get_estimator(GPU_ROOFLINE_ID)
    except NotFoundError:  # its record costs a leave-one-GPU-out fit: built only when new
        gpu = gpu_roofline_record()
        await kb.put_estimator(gpu)
        await kb.promote_estimator(gpu.id)
    return ids


class HardwareOption(BaseModel):
    """One place to run: this machine, or one GPU / one whole CPU node of a partition."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str
    spec: HardwareSpec
    cpu_model: str = ""
    cpu_isa: str = Field(default="", description="vector ISA (avx512, avx2...); '' unknown")
    capacity_mb: float | None = Field(default=None, description="Memory that must hold it")
    gpu_model: str = Field(
        default="",
        description="The catalog's GPU model ('' for CPUs): its generation's CUDA context",
    )
    local: bool = False


def _memory_total_mb() -> float:
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024
    return math.inf


def hardware_options(
    wanted: Sequence[str], catalog: Catalog | None, threads: int | None
) -> list[HardwareOption]:
    """Options for ``--hardware`` values: ``local``, ``all``, ``SYSTEM`` or ``SYSTEM/PARTITION``."""
    options: list[HardwareOption] = []
    here = hardware_descriptors(1)
    cpu_model, cpu_isa = str(here["cpu_model"]), str(here["cpu_isa"])
    local_threads = threads or 1

    def add_local() -> None:
        options.append(
            HardwareOption(
                name="local",
                spec=cpu_spec(cpu_model, local_threads, _memory_total_mb()),
                cpu_model=cpu_model,
                cpu_isa=cpu_isa,
                capacity_mb=_memory_total_mb(),
                local=True,
            )
        )

    def add_partitions(system_name: str, partition_name: str | None) -> None:
        if catalog is None:
            raise InvalidInputError("no catalog", field="--hardware", value=system_name)
        try:
            system = catalog.system(system_name)
        except Exception as error:
            raise InvalidInputError(
                f"unknown system (known: {', '.join(catalog.names())})",
                field="--hardware",
                value=system_name,
            ) from error
        partitions = [
            p for p in system.partitions if partition_name is None or p.name == partition_name
        ]
        if not partitions:
            raise InvalidInputError(
                f"{system.name} has no partition {partition_name!r}",
                field="--hardware",
                value=f"{system_name}/{partition_name}",
            )
        types = {t.name: t for t in system.node_types}
        for partition in partitions:
            node = types.get(partition.node_type or "")
            if node is None:
                continue
            where = f"{system.name}/{partition.name}"
            if partition.gpus_per_node and node.gpu is not None:
                spec = gpu_spec(node.gpu)
                if spec is not None:
                    capacity = float(node.gpu.memory_mb) if node.gpu.memory_mb else None
                    options.append(
                        HardwareOption(
                            name=where, spec=spec, capacity_mb=capacity, gpu_model=node.gpu.model
                        )
                    )
            elif not partition.gpus_per_node:
                cores = min(
                    node.cores or partition.max_cores_per_node, partition.max_cores_per_node
                )
                memory = node.usable_memory_mb or node.memory_mb
                options.append(
                    HardwareOption(
                        name=where,
                        spec=cpu_spec(node.cpu_model or node.name, cores),
                        cpu_model=node.cpu_model or "",
                        capacity_mb=float(memory) if memory else None,
                    )
                )

    for value in wanted:
        if value == "local":
            add_local()
        elif value == "all":
            add_local()
            for name in catalog.names() if catalog else []:
                add_partitions(name, None)
        else:
            system, _, partition = value.partition("/")
            add_partitions(system, partition or None)
    return options


class Quantiles(BaseModel):
    model_config = ConfigDict(extra="forbid")

    p10: float
    p50: float
    p90: float


class OptionEstimate(BaseModel):
    """One hardware option and batch size: the keys ``rightsize estimate --json`` prints."""

    model_config = ConfigDict(extra="forbid")

    hardware: str
    batch_size: int
    iteration_time_s: Quantiles
    peak_memory_mb: Quantiles
    walltime_s: Quantiles
    fits: bool
    estimator: str
    iterations: int
    note: str = ""
    validation_mape: float | None = Field(
        default=None, description="The time estimator's validation MAPE (fraction), if known"
    )
    work_priced: WorkPriced | None = Field(
        default=None, description="How the per-operator model priced the step's work"
    )


def start_smoke_step(user: UserModel, batch_size: int, optimizer: str) -> ForkedCall:
    """One real training step of the user's model, started now in a forked child
    (memory-capped) on one thread: whether the step runs and fits this machine does not
    depend on the thread count, and a forked child that starts an OpenMP team after its
    parent ran one (the estimate's own work) can wait for ever on the parent's threads,
    which it lacks. The caller goes on meanwhile and reads it with ``smoke_outcome``."""
    available = _memory_available_mb()

    def work() -> dict[str, object]:
        import torch

        start = rss_mb()
        torch.set_num_threads(1)
        return measure_task(user.task(batch_size), optimizer, 1, 1, start)

    return ForkedCall.start(work, memory_limit_mb=max(256.0, available * 0.9))


def smoke_outcome(call: ForkedCall, timeout_s: float = 300.0) -> dict[str, object]:
    """The smoke step's result: ``status`` timeout / out_of_memory / crashed, or the
    measurement."""
    status, result, timed_out, _ = call.wait(timeout_s)
    if timed_out:
        return {"status": "timeout"}
    if os.WIFSIGNALED(status) and not result:
        return {"status": "out_of_memory", "error": f"killed by signal {os.WTERMSIG(status)}"}
    return dict(result)


def smoke_step(
    user: UserModel, batch_size: int, optimizer: str, timeout_s: float = 300.0
) -> dict[str, object]:
    """``start_smoke_step`` and its ``smoke_outcome``, one after the other."""
    return smoke_outcome(start_smoke_step(user, batch_size, optimizer), timeout_s)


def _memory_available_mb() -> float:
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 8192.0


def _spread(point: float, spread: tuple[float, float]) -> Quantiles:
    return Quantiles(p10=point * spread[0], p50=point, p90=point * spread[1])


def estimate(
    graphs: Mapping[int, GraphData],
    *,
    epochs: int,
    samples: int,
    optimizer: str,
    options: Sequence[HardwareOption],
    bundle: EstimatorBundle | None,
    bundle_ids: dict[str, str] | None = None,
    opcost: OpCostModel | None = None,
    host_opcost: OpCostModel | None = None,
) -> list[OptionEstimate]:
    """Estimates for every (option, batch size) from each batch size's op graph.

    ``opcost``: the shipped per-operator CPU model (it answers its own CPU model);
    ``host_opcost``: the one calibrated on this host (``load_host_opcost``), which answers
    options of this host's CPU model and ISA in its place, also where no bundle covers them.

    ``peak_memory_mb`` is what a profile measures: training memory above the process's
    resident set after ``import torch``; ``fits`` adds that baseline back on CPUs.
    """
    out: list[OptionEstimate] = []
    baseline_mb = rss_mb()
    for batch, data in graphs.items():
        summary = data.summary
        iterations = epochs * math.ceil(samples / batch)
        for option in options:
            item = FeatureInput(
                family=None,
                params={},
                batch_size=batch,
                optimizer=optimizer,
                hardware=option.spec,
                summary=summary,
            )
            covered = bundle is not None and _covered(bundle, option)
            if covered and bundle is not None:
                predicted = bundle.predict([item], [data])
                chosen = {t: bundle.selected_kind(t, item.family) for t in TARGETS}
                time_q = predicted["iteration_s"][chosen["iteration_s"]].quantiles[0]
                memory_q = predicted["peak_memory_mb"][chosen["peak_memory_mb"]].quantiles[0]
                ids = bundle_ids or {}
                estimator = ", ".join(sorted({ids.get(t, f"dnn-{chosen[t]}-{t}") for t in TARGETS}))
                iteration = Quantiles(p10=time_q[0], p50=time_q[1], p90=time_q[2])
                memory = Quantiles(p10=memory_q[0], p50=memory_q[1], p90=memory_q[2])
                note = "trained on this machine kind"
                time_scores = bundle.meta.validation.get("iteration_s", {}).get(
                    chosen["iteration_s"]
                )
                validation_mape = time_scores.mape / 100 if time_scores else None
                changed = _isa_changed(bundle, option)
                if changed:
                    # Another vector ISA runs the same operators at another speed: the
                    # bundle's time does not speak for this host; memory does not depend
                    # on it (the held-out files' memory was within 3-9% on this avx2 host).
                    time_s = analytic_time_s(summary, option.spec, optimizer)
                    iteration = _spread(time_s, _CPU_TIME_SPREAD)
                    validation_mape = None
                    estimator = f"{ANALYTIC_OPGRAPH_ID}, " + ids.get(
                        "peak_memory_mb", f"dnn-{chosen['peak_memory_mb']}"
                    )
                    note = (
                        f"time: analytic op-graph model (wide interval): {changed}; "
                        "memory: trained on this CPU model (independent of the vector ISA)"
                    )
                per_cpu = _opcost_for(option, opcost, host_opcost)
                per_op = _opcost_answer(
                    per_cpu,
                    option,
                    data,
                    optimizer,
                    memory=(
                        f"trained on this CPU model (independent of the vector ISA; {changed})"
                        if changed
                        else "trained on this machine kind"
                    ),
                )
                work_priced = None
                if per_cpu is not None and per_op is not None:
                    iteration, validation_mape, note = per_op
                    work_priced, coverage_line = _work_priced(per_cpu, data)
                    if coverage_line:
                        note = f"{note}; {coverage_line}"
                    memory_id = ids.get("peak_memory_mb", f"dnn-{chosen['peak_memory_mb']}")
                    estimator = f"{per_cpu.estimator_id}, {memory_id}"
            else:
                time_s = analytic_time_s(summary, option.spec, optimizer)
                memory_mb = analytic_memory_mb(summary, optimizer)
                gpu = option.spec.kind == "gpu"
                iteration = _spread(time_s, _GPU_TIME_SPREAD if gpu else _CPU_TIME_SPREAD)
                # The CUDA context the planner's analytic model and the white-box peak
                # assume for this GPU's generation (unknown: the largest).
                context_mb = context_for(option.gpu_model) if gpu else 0.0
                memory = _spread(memory_mb + context_mb, _MEMORY_SPREAD)
                estimator = ANALYTIC_OPGRAPH_ID
                note = "analytic op-graph model (untrained for this hardware): wide interval"
                validation_mape = None
                calibrated = _opcost_for(option, None, host_opcost)
                # No bundle covers this CPU: time from the model calibrated here (if any),
                # memory from the analytic model.
                per_op = _opcost_answer(
                    calibrated,
                    option,
                    data,
                    optimizer,
                    memory="analytic op-graph model (untrained for this CPU model)",
                )
                work_priced = None
                if calibrated is not None and per_op is not None:
                    iteration, validation_mape, note = per_op
                    work_priced, coverage_line = _work_priced(calibrated, data)
                    if coverage_line:
                        note = f"{note}; {coverage_line}"
                    estimator = f"{calibrated.estimator_id}, {ANALYTIC_OPGRAPH_ID}"
                elif option.local and option.spec.kind == "cpu":
                    note += (
                        "; `rightsize profile calibrate` (about 2 minutes), or `rightsize "
                        "estimate --calibrate`, calibrates the per-operator CPU model on "
                        "this host"
                    )
            walltime = Quantiles(
                p10=iterations * iteration.p10 + STARTUP_LOW_S,
                p50=iterations * iteration.p50 + STARTUP_POINT_S,
                p90=iterations * iteration.p90 + STARTUP_S,
            )
            host_extra = baseline_mb if option.spec.kind == "cpu" else 0.0
            fits = option.capacity_mb is None or memory.p90 + host_extra <= option.capacity_mb
            out.append(
                OptionEstimate(
                    hardware=option.name,
                    batch_size=batch,
                    iteration_time_s=iteration,
                    peak_memory_mb=memory,
                    walltime_s=walltime,
                    fits=bool(fits),
                    estimator=estimator,
                    iterations=iterations,
                    note=note,
                    validation_mape=validation_mape,
                    work_priced=work_priced,
                )
            )
    return out


def _work_priced(opcost: OpCostModel, data: GraphData) -> tuple[WorkPriced | None, str]:
    """The per-operator model's pricing coverage of the step (``dnn.coverage``), of the
    FLOPs where the step has any, else of the bytes, and the one line an answer carries
    when timings priced less than most of the work ("" otherwise); (None, "") where the
    model file records no timed domain. A step whose unpriced operators carry most of
    its work is refused, naming the operator."""
    found = pricing_coverage(data, opcost.meta.get("timed_domain"))
    if found is None:
        return None, ""
    require_priced(found)
    shares = found.flops if sum(found.flops.values()) > 0 else found.bytes
    priced = WorkPriced(
        learned=shares["learned"], analytic=shares["analytic"], unpriced=shares["none"]
    )
    return priced, (found.line() if found.learned_share < MOST else "")


def _opcost_for(
    option: HardwareOption, shipped: OpCostModel | None, calibrated: OpCostModel | None
) -> OpCostModel | None:
    """The per-operator CPU model for ``option``: the one calibrated on this host where
    the option is this host's CPU model and ISA, else the shipped one."""
    if calibrated is not None:
        provenance = calibrated.meta.get("provenance") or {}
        if option.cpu_model == provenance.get("cpu_model") and option.cpu_isa == provenance.get(
            "cpu_isa"
        ):
            return calibrated
    return shipped


def _opcost_answer(
    opcost: OpCostModel | None,
    option: HardwareOption,
    data: GraphData,
    optimizer: str,
    memory: str = "trained on this machine kind",
) -> tuple[Quantiles, float | None, str] | None:
    """The per-operator model's time, its held-out MAPE and a note (ending in where the
    memory comes from, ``memory``); None where it should not answer (absent, other CPU or
    threads, or not better than the bundle held out; a model calibrated on this host,
    ``host_calibration``, answers its host)."""
    if opcost is None or option.spec.kind != "cpu":
        return None
    heldout = opcost.meta.get("heldout") or {}
    provenance = opcost.meta.get("provenance") or {}
    calibration = opcost.meta.get("host_calibration")
    if option.cpu_model != provenance.get("cpu_model"):
        return None
    if not heldout.get("better_than_bundle") and not calibration:
        return None
    isa = str(provenance.get("cpu_isa") or "")
    if isa and option.cpu_isa and option.cpu_isa != isa:
        return None  # timed on another vector ISA: its operators' times do not hold here
    if option.spec.threads not in opcost.threads:
        return None
    if opcost.needs_geometry and data.geometry is None:
        return None  # a graph stored without its operators' geometry
    rnn_ops, rnn_calls = data.rnn_counts
    p10, p50, p90 = opcost.predict_s(
        data.x.astype(float),
        None,
        threads=option.spec.threads,
        optimizer=optimizer,
        parameters=int(data.summary.get("parameters", 0.0)),
        rnn_ops=rnn_ops,
        rnn_calls=rnn_calls,
        geometry=data.geometry,
    )
    if calibration:
        steps = ", ".join(
            f"{n} at {k[1:]} thread{'' if k == 't1' else 's'}"
            for k, n in calibration["steps"].items()
        )
        total = sum(calibration["steps"].values())
        family_out = calibration.get("zoo_family_out_mape")
        scored = f"zoo, one family left out: MAPE {family_out:.1%}; " if family_out else ""
        note = (
            f"time: per-operator CPU model calibrated on this host ({total} zoo steps timed "
            f"here, {steps}, {calibration['calibrated_at']}; {scored}from "
            f"{calibration['from']}); memory: {memory}"
        )
        return Quantiles(p10=p10, p50=p50, p90=p90), family_out, note
    scores = heldout["opcost"]
    zoo = opcost.meta.get("validation", {}).get("all", {})
    note = (
        f"time: per-operator CPU model (held-out model files: MAPE {scores['mape']:.1%}, "
        f"p10-p90 coverage {scores['coverage_p10_p90']:.2f}; zoo, one family group left "
        f"out: MAPE {zoo.get('mape', float('nan')):.1%}); memory: {memory}"
    )
    return Quantiles(p10=p10, p50=p50, p90=p90), float(scores["mape"]), note


def _isa_changed(bundle: EstimatorBundle, option: HardwareOption) -> str:
    """Why the bundle's time does not speak for this option's vector ISA ('' where it
    does, or where either side did not record one)."""
    domain = bundle.meta.domain
    if domain is None or not domain.cpu_isas or not option.cpu_isa:
        return ""
    if option.cpu_isa in domain.cpu_isas:
        return ""
    return (
        f"the DNN estimators were trained on {', '.join(domain.cpu_models)} with "
        f"{'/'.join(domain.cpu_isas)}, this CPU has {option.cpu_isa}"
    )


def _covered(bundle: EstimatorBundle, option: HardwareOption) -> bool:
    domain = bundle.meta.domain
    if domain is None or option.spec.kind != "cpu":
        return False
    return option.cpu_model in domain.cpu_models and option.spec.threads in domain.threads
