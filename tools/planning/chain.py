"""The estimator chain: one per process, shared by the CLI, the MCP server and the agents.

For a workload the chain answers with its estimators, best first; the planner asks them
in order and the first answer wins (``tools.planning.estimation.estimate_first``):

1. this very workload's profiles (``ProfiledWorkloadEstimator``: measured iteration time
   and peak memory from downsized runs the Profiling agent made),
2. the promoted registry estimator (Model Promotion's choice), when a loader for it is
   given (the agents' ``agents.promotion`` provides one; tools cannot import agents),
3. the per-hardware estimators (``_hardware_estimators``: Gavel's GPU roofline where it
   has measurements, then the per-operator GPU model where its recorded
   leave-one-GPU-out error beats the analytic fallback's, ``gpu_time_choice``),
4. for generic jobs, the history estimator trained on each system's finished jobs,
5. the analytic fallbacks (``tools.planning.whatif.default_estimators``).

For DNN training every estimator after the profiles is wrapped in
``WhiteBoxGpuMemory``: its GPU answers carry the white-box peak GPU memory (the step
traced once per model and kept per process, ``tools.estimators.gpu.workload_trace``)
and, when the per-operator time model is not used, why not.

What is expensive is kept between requests: a system's history estimator (a full
XGBoost training on up to ``history_jobs`` jobs) and the loaded promoted models. Each
request checks, cheaply, whether the knowledge base has new history: the number of the
system's jobs (``KnowledgeBase.count_jobs``, one indexed count), retraining once it has
moved by ``history_retrain_growth`` of what the model trained on (any history import
counts, whatever its jobs' dates). The registry's promoted models follow one rule
(``tools.estimators.promoted.record.PromotedRecord``): the promoted runtime estimator
(``promoted_record``) and the promoted per-GPU correction of the per-operator time model
(``gpu_correction``, ``tools.estimators.gpu.promoted.PromotedGpuCorrection``, also asked
by ``rightsize estimate --gpu``) are read on the first request, after a promotion event
(``forget_promoted``) and at most once a minute otherwise, not on every request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, Field

from knowledge_base.catalog import Catalog
from knowledge_base.errors import InvalidInputError
from knowledge_base.records import EstimatorRecord, ProfileStatus
from knowledge_base.store import JobQuery, KnowledgeBase
from knowledge_base.workload import DNNTraining, GenericJob, WorkloadSpec
from tools.estimators.gpu.trace_folders import TraceFolders
from tools.estimators.promoted.record import PromotedRecord
from tools.planning.cpu_model_file import CpuModels, ModelFileCpuEstimator
from tools.planning.estimation import Estimator
from tools.planning.model_files import is_model_file
from tools.planning.profiled import PROFILE_FAMILY, ProfiledWorkloadEstimator
from tools.planning.trace_cache import TraceCache
from tools.planning.whatif import default_estimators

if TYPE_CHECKING:  # xgboost is heavy: imported where a history estimator is trained
    from tools.estimators.gpu.promoted import ServingCorrection
    from tools.estimators.gpu.selection import OpCostChoice
    from tools.estimators.history.estimator import HistoryEstimator

__all__ = [
    "RUNTIME_TARGET",
    "ChainConfig",
    "EstimatorChain",
    "PromotedEstimator",
    "PromotedLoader",
]

log = logging.getLogger(__name__)

RUNTIME_TARGET = "runtime_s"
"""The registry target of generic jobs' run time (Model Promotion's)."""


class PromotedEstimator(Protocol):
    """A promoted model behind the estimator seam, asked about a job submitted at ``now``."""

    def at(self, now: datetime) -> Estimator: ...


PromotedLoader = Callable[[EstimatorRecord], PromotedEstimator]
"""Turns the promoted registry record into an estimator (raises OSError/ValueError when
its artifact cannot be read)."""


class ChainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    history_min_jobs: int = Field(default=1000, ge=1, description="To train a history estimator")
    history_jobs: int = Field(default=50_000, ge=1, description="Most jobs one training reads")
    history_retrain_growth: float = Field(
        default=0.1,
        ge=0,
        description="Retrain a system's history estimator once its job count has moved by "
        "this fraction of what it trained on (0: whenever the count moved)",
    )
    home: Path = Field(
        default=Path("~/.rightsize"),
        description="The settings' home: models trained on first use, host calibrations",
    )
    cpu_opcost_dir: Path | None = Field(
        default=None, description="The per-operator CPU model's folder (None: the shipped one)"
    )
    dnn_models_dir: Path | None = Field(
        default=None, description="The DNN estimator bundle's folder (None: the shipped one)"
    )
    gpu_traces: TraceFolders = Field(
        default_factory=TraceFolders,
        description="Where GPU step traces persist (the settings' gpu_traces; default: "
        "this process only)",
    )


@dataclass(frozen=True)
class _TrainedHistory:
    jobs: int  # the system's job count when it trained (or tried to)
    estimator: HistoryEstimator | None  # None: too few finished jobs to train on


class EstimatorChain:
    """Builds the chain for each request from what it keeps: build one per process."""

    def __init__(
        self,
        kb: KnowledgeBase,
        config: ChainConfig | None = None,
        *,
        promoted: PromotedLoader | None = None,
    ) -> None:
        self.kb = kb
        self.config = config or ChainConfig()
        self.promoted_loader = promoted
        self._history: dict[str, _TrainedHistory] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        # The registry's promoted runtime model: read on the first request, after a
        # promotion event (``forget_promoted``) and at most once a minute otherwise.
        self.promoted_record: PromotedRecord[PromotedEstimator] = PromotedRecord(
            RUNTIME_TARGET, self._load_promoted, describe=_cannot_load
        )
        self.trainings = 0  # history trainings so far (what the cache saves shows here)
        self._gpu_choice: OpCostChoice | None = None
        from tools.estimators.gpu.promoted import PromotedGpuCorrection

        # The one owner of which GPU correction serves in this process (registry reads
        # O(1) per promotion, not one per request): the planner's chain and
        # ``rightsize estimate --gpu`` both ask it.
        self.gpu_correction = PromotedGpuCorrection()
        self._correction: ServingCorrection | None = None  # what the choice was made with
        # Users' model files traced once per content, kept on disk under the home.
        self.traces = TraceCache(self.config.home.expanduser() / "traces")
        self.cpu_models = CpuModels(
            self.config.home.expanduser(), opcost_dir=self.config.cpu_opcost_dir,
            models_dir=self.config.dnn_models_dir, traces=self.traces,
        )  # fmt: skip

    async def estimators(
        self, spec: WorkloadSpec, catalog: Catalog, now: datetime | None = None
    ) -> list[Estimator]:
        """The estimators for ``spec``, best first, for a job submitted at ``now``
        (the request's time; None: the wall clock)."""
        now = now or datetime.now(UTC)
        chain: list[Estimator] = []
        chain.extend(await self._profiled(spec))
        promoted = await self.promoted()
        if promoted is not None:
            chain.append(promoted.at(now))
        if isinstance(spec.workload, DNNTraining):
            await self.serving_gpu_correction()
            # GPU answers carry the white-box peak GPU memory, whichever model gives the
            # time; those not from the per-operator model say why it did not answer.
            from tools.estimators.gpu.memory.planner import WhiteBoxGpuMemory

            choice = self.gpu_time_choice()
            histories = await self._trained_histories(spec, catalog)
            for estimator in [*self._hardware_estimators(spec), *default_estimators(spec)]:
                estimator = self._user_memory(estimator, spec, histories, now)
                note = "" if choice.use else choice.reason
                chain.append(WhiteBoxGpuMemory(estimator, note, self.config.gpu_traces))
            return chain
        chain.extend(self._hardware_estimators(spec))
        chain.extend(await self._history_estimators(spec, catalog, now))
        chain.extend(default_estimators(spec))
        return chain

    def gpu_time_choice(self) -> OpCostChoice:
        """Whether GPU options get the per-operator time model (read once per process)."""
        if self._gpu_choice is None:
            from tools.estimators.gpu.selection import choose_opcost, read_meta

            # The metadata decides; the model (and torch with it) loads only when chosen.
            found = self._correction
            try:
                meta, model_id = read_meta()
                choice = choose_opcost(
                    meta,
                    model_id,
                    correction=(found.record_id, found.heldout_mape) if found else None,
                )
                if choice.use:
                    from tools.estimators.gpu.estimator import load_step_model

                    load_step_model()
            except (InvalidInputError, KeyError, TypeError, ValueError, OSError) as exc:
                log.warning("per-operator GPU model cannot be loaded: %s", exc)
                choice = choose_opcost(None)
            self._gpu_choice = choice
        return self._gpu_choice

    async def serving_gpu_correction(self) -> ServingCorrection | None:
        """The promoted per-GPU correction of the per-operator model (Model Promotion's,
        fitted on the center's own GPU runs), as ``gpu_correction`` serves it; the GPU
        time choice is made again when another serves."""
        serving = await self.gpu_correction.current(self.kb)
        if serving is not self._correction:
            self._gpu_choice = None  # chosen again with the new correction
            self._correction = serving
        return serving

    # -- the links -------------------------------------------------------------------------

    async def _profiled(self, spec: WorkloadSpec) -> list[Estimator]:
        workload = spec.workload
        if not isinstance(workload, DNNTraining):
            return []
        profiles = [
            p
            for p in await self.kb.query_profiles(family=PROFILE_FAMILY, status=ProfileStatus.OK)
            if p.model == workload.model
        ]
        return [ProfiledWorkloadEstimator(workload.model, tuple(profiles))] if profiles else []

    async def promoted(self) -> PromotedEstimator | None:
        """The promoted runtime estimator, loaded once per promotion (see the module)."""
        if self.promoted_loader is None:
            return None
        return await self.promoted_record.current(self.kb)

    def _load_promoted(self, record: EstimatorRecord) -> PromotedEstimator:
        assert self.promoted_loader is not None  # asked only through ``promoted``
        return self.promoted_loader(record)

    def unavailable(self) -> list[str]:
        """Why estimators that should be in the chain are not (for the answer's readers)."""
        problem = self.promoted_record.problem if self.promoted_loader is not None else None
        found = [problem] if problem else []
        if self.gpu_correction.problem:
            found.append(f"promoted GPU correction not used: {self.gpu_correction.problem}")
        if self._gpu_choice is not None and not self._gpu_choice.use:
            found.append(self._gpu_choice.reason)
        return found

    def forget_promoted(self) -> None:
        """Drop the loaded promoted model and look at the registry's promoted GPU
        correction on the next request (a promotion event arrived)."""
        self.promoted_record.invalidate()
        self.gpu_correction.invalidate()

    def _hardware_estimators(self, spec: WorkloadSpec) -> list[Estimator]:
        """The one place per-hardware estimators are chosen for a workload: Gavel's
        measured roofline, then the per-operator GPU model where its validation error
        beats the analytic fallback's (``tools.estimators.gpu.selection``)."""
        from tools.estimators.gpu.gavel_estimator import planner_estimators  # torch loads on use

        found: list[Estimator] = []
        if isinstance(spec.workload, DNNTraining) and is_model_file(spec.workload):
            # A model file on a CPU a trained CPU model covers (this host, calibrated).
            found.append(ModelFileCpuEstimator(self.cpu_models))
        found.extend(planner_estimators(spec))
        if isinstance(spec.workload, DNNTraining):
            choice = self.gpu_time_choice()
            if choice.use:
                from tools.estimators.gpu.planner import GpuOpCostEstimator

                found.append(
                    GpuOpCostEstimator(
                        reason=choice.reason,
                        correction=self._correction,
                        traces=self.config.gpu_traces,
                    )
                )
        return found

    async def _trained_histories(
        self, spec: WorkloadSpec, catalog: Catalog
    ) -> list[tuple[str, HistoryEstimator]]:
        """The systems of ``spec``'s goals (every system: none named) whose history
        estimator is trained, with it."""
        found = []
        for system in spec.goals.systems or catalog.names():
            trained = await self.history(system)
            if trained is not None:
                found.append((system, trained))
        return found

    @staticmethod
    def _user_memory(
        estimator: Estimator,
        spec: WorkloadSpec,
        histories: list[tuple[str, HistoryEstimator]],
        now: datetime,
    ) -> Estimator:
        """``estimator`` with its host memory from this user's own runs of this job on
        each system whose history records them (``UserHistoryMemory``); unchanged else."""
        from tools.planning.generic import UserHistoryMemory

        for system, trained in histories:
            estimator = UserHistoryMemory(
                estimator, trained, system=system, user=spec.user, name=spec.name,
                now_s=now.timestamp(),
            )  # fmt: skip
        return estimator

    async def _history_estimators(
        self, spec: WorkloadSpec, catalog: Catalog, now: datetime
    ) -> list[Estimator]:
        if not isinstance(spec.workload, GenericJob):
            return []
        from tools.planning.generic import HistoryRuntimeEstimator

        return [
            HistoryRuntimeEstimator(system, trained, user=spec.user, now_s=now.timestamp())
            for system, trained in await self._trained_histories(spec, catalog)
        ]

    async def history(self, system: str) -> HistoryEstimator | None:
        """``system``'s history estimator: the kept one while the knowledge base has no
        new history for it, else a fresh training."""
        lock = self._locks.setdefault(system, asyncio.Lock())
        async with lock:  # two requests at once train once
            config = self.config
            jobs = await self.kb.count_jobs(JobQuery(system=system))
            cached = self._history.get(system)
            if cached is not None and abs(jobs - cached.jobs) < max(
                1.0, config.history_retrain_growth * cached.jobs
            ):
                return cached.estimator
            if jobs < config.history_min_jobs:
                return cached.estimator if cached is not None else None
            from tools.planning.generic import train_history

            # The latest ``history_jobs`` jobs (newest first from the store), replayed
            # oldest first as they happened.
            latest = await self.kb.query_jobs(
                JobQuery(system=system, newest_first=True, limit=config.history_jobs)
            )
            records = latest[::-1]
            self.trainings += 1
            estimator = await asyncio.to_thread(train_history, records)
            if estimator is None and cached is not None:
                estimator = cached.estimator  # the new history taught nothing usable
            self._history[system] = _TrainedHistory(jobs, estimator)
            log.info("history estimator for %s trained on %d jobs", system, len(records))
            return estimator


def _cannot_load(record: EstimatorRecord, exc: Exception) -> str:
    return (
        f"promoted estimator {record.id} cannot be loaded ({type(exc).__name__}: {exc}); "
        "estimates come from the estimators after it"
    )
