"""A system's learned wait predictor, kept per process, and the waits of jobs not yet submitted.

Two readers share this: the status page (``rightsize.observability.waits.WaitBoard``: the
starts of pending jobs) and the planner (``tools.planning.queue.QueueModel`` with a live
queue: the wait of each option, a job not yet submitted).

- ``PredictorCache`` keeps one ``WaitPredictor`` per system over the knowledge base's
  recorded waits of that system (the last ``history_days``), and rebuilds it only when
  the system's history has grown (or shrunk) by ``retrain_growth``; the predictor itself
  trains once per ``WaitConfig.retrain_s`` window. One process, one training per system
  per week while the history holds still.
- ``learned_waits`` is what a plan reads: the queue now (``snapshot_from_cluster``) and
  the system's predictor, its new-job model (``WaitPredictor.submission_model_for``:
  trees trained on the jobs of the window at the moment each was submitted, waits of
  zero included, which the pending-job model never sees) trained before planning starts
  (in a thread), or None when it could not be learned (under ``WaitConfig.min_rows``
  recorded waits before the cutoff): the plan then keeps the planner's rule.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import pickle
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from knowledge_base.store import JobQuery, KnowledgeBase
from tools.actuators.state import ClusterState
from tools.waits.job_start import JobStart
from tools.waits.live import history_from_records, snapshot_from_cluster
from tools.waits.predictor import WaitConfig, WaitModel, WaitPredictor
from tools.waits.snapshot import WaitSnapshot

__all__ = ["PREDICTORS", "LearnedWaits", "PredictorCache", "learned_waits"]

log = logging.getLogger(__name__)


_FORMAT = 1  # bump when what a kept predictor file holds changes shape


@dataclass
class PredictorCache:
    """One predictor per system, kept while its recorded history holds still: in memory,
    and under ``folder`` (``HOME/waits``; None: memory only) so that the next process (a
    second ``rightsize plan --live-queue``) reads it instead of training again."""

    history_days: float = 60.0
    history_jobs: int = 50_000
    retrain_growth: float = 0.1
    folder: Path | None = None
    kept: dict[str, tuple[int, WaitPredictor]] = field(default_factory=dict, repr=False)
    built: int = 0  # predictors built so far (what the cache saves)

    async def predictor(
        self, kb: KnowledgeBase, system: str, total_procs: int, now: datetime
    ) -> WaitPredictor:
        """``system``'s predictor: the kept one (in memory, else on disk) while its history
        has not grown by ``retrain_growth`` and was read the same way, else one over the
        last ``history_days`` of it."""
        jobs = await kb.count_jobs(JobQuery(system=system))
        kept = self.kept.get(system) or self._read(system, total_procs)
        if kept is not None and abs(jobs - kept[0]) < max(1.0, self.retrain_growth * kept[0]):
            self.kept[system] = kept
            return kept[1]
        since = now - timedelta(days=self.history_days)
        records = await kb.query_jobs(
            JobQuery(
                system=system, submitted_after=since, newest_first=True, limit=self.history_jobs
            )
        )
        predictor = WaitPredictor(history_from_records(records, total_procs))
        self.kept[system] = (jobs, predictor)
        self.built += 1
        return predictor

    def keep(self, system: str, total_procs: int) -> None:
        """Write ``system``'s predictor, with the models it has trained so far, to the
        folder (whole or not at all); a folder that cannot be written only costs time."""
        if self.folder is None or system not in self.kept:
            return
        jobs, predictor = self.kept[system]
        path = self._path(system)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as stream:
                pickle.dump(
                    (self._key(total_procs), jobs, predictor),
                    stream,
                    protocol=pickle.HIGHEST_PROTOCOL,
                )
            tmp.replace(path)
        except OSError as exc:
            log.warning("wait predictor %s not written: %s", path, exc)

    def _path(self, system: str) -> Path:
        assert self.folder is not None
        digest = hashlib.sha1(system.encode()).hexdigest()[:12]
        return self.folder / f"{digest}.pkl"

    def _key(self, total_procs: int) -> str:
        import xgboost

        return repr(
            (
                _FORMAT,
                xgboost.__version__,
                self.history_days,
                self.history_jobs,
                total_procs,
                WaitConfig().model_dump_json(),
            )
        )

    def _read(self, system: str, total_procs: int) -> tuple[int, WaitPredictor] | None:
        """The predictor kept on disk for ``system`` where it was made the same way."""
        if self.folder is None or not self._path(system).is_file():
            return None
        try:
            with self._path(system).open("rb") as stream:
                key, jobs, predictor = pickle.load(stream)  # our own files
        except (
            OSError,
            pickle.UnpicklingError,
            EOFError,
            AttributeError,
            ImportError,
            ValueError,
            TypeError,
        ) as exc:
            log.warning("wait predictor %s unreadable (%s): training again", system, exc)
            return None
        if key != self._key(total_procs) or not isinstance(predictor, WaitPredictor):
            return None
        return int(jobs), predictor


PREDICTORS = PredictorCache()  # the process's own: plans made in one process share it


@dataclass
class LearnedWaits:
    """One system's queue now and its trained model: the wait of a job not yet submitted."""

    system: str
    snapshot: WaitSnapshot
    predictor: WaitPredictor
    model: WaitModel
    _answers: dict[tuple[int, float, str | None], JobStart] = field(
        default_factory=dict, repr=False
    )

    @property
    def recorded(self) -> int:
        """Recorded waits the model learned from: jobs at their submission."""
        return self.model.rows

    def wait(self, nodes: int, walltime_s: float, queue: str | None = None) -> JobStart:
        """p50 and p10-p90 of a job of ``nodes`` x ``walltime_s`` submitted now, from the
        model trained on jobs at their submission; each size asked once (a plan's options
        share few sizes)."""
        key = (nodes, float(walltime_s), queue)
        if key not in self._answers:
            waits, _ = self.predictor.new_job_waits(self.snapshot, nodes, float(walltime_s), queue)
            t = self.snapshot.taken_at
            self._answers[key] = JobStart(
                job_id="new-job",
                taken_at=t,
                start_s=t + float(waits[1]),
                p10_s=t + float(waits[0]),
                p90_s=t + float(waits[2]),
                wait_s=float(waits[1]),
                basis=self.model.basis(self.predictor.config.coverage),
            )
        return self._answers[key]

    def basis(self, answer: JobStart) -> str:
        low = (answer.p10_s - answer.taken_at) / 3600
        high = (answer.p90_s - answer.taken_at) / 3600
        return (
            f"learned from {self.recorded} recorded waits on {self.system} "
            f"(p10-p90 {low:.1f}-{high:.1f} h, calibrated to "
            f"{self.predictor.config.coverage:.0%}; docs/waits.md)"
        )


async def learned_waits(
    kb: KnowledgeBase,
    system: str,
    state: ClusterState,
    cache: PredictorCache = PREDICTORS,
) -> LearnedWaits | None:
    """The learned waits on ``system`` given its queue ``state``; None (the rule answers)
    when its recorded waits are too few for a model."""
    snapshot = snapshot_from_cluster(state)
    predictor = await cache.predictor(kb, system, snapshot.total_procs, state.taken_at)
    if len(predictor.history) < predictor.config.min_rows:
        return None  # too few recorded waits for the rows a model needs: do not train
    trained = predictor.trained
    model = await asyncio.to_thread(predictor.submission_model_for, snapshot.taken_at)
    if predictor.trained != trained:
        cache.keep(system, snapshot.total_procs)
    if model.booster is None:
        return None
    return LearnedWaits(system, snapshot, predictor, model)
