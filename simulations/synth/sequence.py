"""A sequence generator: jobs drawn in submit order, each conditioned on what came before.

The copula and the TVAE draw every job on its own, so a trace's daily and weekly cycles,
its bursts and its users' sessions (one user submitting a run of similar jobs) are lost.
Here a job is the next step of a sequence, factorized in time order:

1. the **gap** since the previous submission, in operational time
   (:mod:`simulations.synth.intensity`: the clock stretched by the trace's weekly arrival
   rate, so the daily and weekly cycle is the fitted rate's, not the network's), given the
   history: the local hour and weekday of the last submission, where in the trace's span
   it is, the last gaps, the previous job's tokens, the **queue state** (the fluid
   backlog and the trailing day's, 3 days' and week's offered load,
   :mod:`simulations.synth.queue_state`: real users submit less when the machine is
   backed up) and the open sessions (below);
2. the **session**: continue one of the ``_SLOTS`` most recently active users' sessions
   (slot 0 the latest), or start a new one, given that plus each slot's time since its
   user's last job and the length of its current session (a user's jobs less than 20
   minutes apart, as :mod:`simulations.synth.temporal` counts them). Independent class
   draws made about twice the real number of sessions, each half as long;
3. the **class** (user x size class, :mod:`simulations.synth.classes`) given that and
   the new job's hour and weekday: a continued session draws among that user's classes
   (seeing the class of its last job), a new one among the classes of users not in the
   slots; the user is the slot's, or drawn within the class from the others;
4. **processors**, **request**, **run fraction** and **status**, in that order, each
   given everything above (the new job's own hour and weekday too: LANL-CM5's night jobs
   run five times as long as its afternoon ones), the tokens already drawn for this job,
   and the class's own history: its previous job's tokens, the time since it and its
   jobs in the last 24 h.
   A user resubmitting the same job is explicit: the processors, request and run-fraction
   heads each have a **copy gate**, a logit added to the class's previous token, the heads
   after them see whether each repeated it, and a repeated processors or request token
   repeats the previous value (a bin's token alone would draw a new value within the
   bin: HPC2N-2002's fit 1 repeated a user's request token in 77% of the pairs within the
   hour but the value in 63%, real 88% / 88%). The run-fraction draw is also held to the
   training trace's run classes per size class, per run class of the class's previous
   job and per request class (:class:`_RunClassFeedback`), so short-run jobs come in
   failure chains, and those asking hours as often as the trace's.

Users submit **runs of identical jobs** (HPC2N-2002: 72% of the jobs repeat the same
user's previous one, class, processors and request, a median 5 s after it; 174 runs reach
100 jobs): the trunk sees how long the previous job's run is, the session head each slot
user's, the job heads the class's; and an **again** head, after the session head, decides
whether a continued session's job repeats its user's last one whole (class, processors
and request, values too), or is drawn by the class and job heads (whose loss leaves the
repeated jobs out). Drawn without it, the runs broke off too often: a user's next job
within the hour changed shape after a run of 5-10 jobs in 11% of cases (real 6%), and the
50th and later jobs of a run were 6% of the jobs (real 19%; with the head 6% and 9%).
The head's repeats are held to the training trace's share per run length
(:class:`_AgainFeedback`): left alone, a run feeds itself.

A trace without user ids (ALCF-Theta's) gets none of the resubmission structure (copy
gates, run classes per previous run class and request class, runs, again): its classes
are sizes alone, whose "previous job" is anyone's.

Every column is a token (REaLTabFormer, which seed 003 found best on marginals and
correlations, also generates tabular rows as token sequences): categorical columns
(status, processors when a trace has at most 256 sizes) by value; continuous ones by
value for **atoms** (values holding >= 0.5% of the rows: a 3600 s request, the run
fraction 1 of a job killed at its limit) and otherwise by quantile bin in log space; a
bin decodes to a value interpolated in its own table of observed quantiles. The heads
are small MLPs over a shared trunk, trained by teacher forcing (cross-entropy, Adam) on
the first 90% of the trace; a random 10% of the rows chooses the epoch (early stopping). Sampling
runs the same history code as training, one job at a time, with the network's weights
in numpy (a torch call per head costs more than the arithmetic).

Time: the sampled trace starts at the training trace's first submission, in its zone
(:class:`~simulations.synth.clock.TraceClock`), so times of day line up. Real-time gaps
are never rescaled (that would slide the daily cycle); asked for a ``load``, sampling
runs operational time faster or slower, which keeps the cycle, so that
:func:`~simulations.synth.generator.generate` can draw more load than the target and
thin it.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np
import torch

from knowledge_base.errors import InvalidInputError
from simulations.synth.clock import TraceClock
from simulations.synth.closed_loop import after_short_share
from simulations.synth.columns import MODEL_COLUMNS, Trace
from simulations.synth.generator import SynthMetadata, training_data
from simulations.synth.intensity import WEEK_BINS, OperationalTime, weekly_rates
from simulations.synth.load import (
    easy_queue_s,
    easy_wait_s,
    mean_backlog_s,
    peak_week_load,
    short_backlog_ratio,
    short_wait_ratio,
)
from simulations.synth.model_state import state_errors
from simulations.synth.queue_state import QUEUE_NUMBERS, QueueState, job_work
from simulations.synth.sequence_feedback import (
    _NO_PREVIOUS,
    _REQUEST_CLASSES,
    _RUN_CLASSES,
    _RUN_LENGTH_EDGES,
    _AgainFeedback,
    _logistic,
    _MarginalFeedback,
    _RunClassFeedback,
    again_shares,
    previous_run_classes,
    run_class,
    run_class_shares,
)
from simulations.synth.sequence_history import (
    _History,
    _Users,
)
from simulations.synth.sequence_network import (
    _AGAIN_TAKES,
    _MASKED,
    _Batch,
    _draw,
    _hot,
    _loss,
    _Network,
    _NumpyNet,
)
from simulations.synth.sequence_tokens import (
    _COPIED,
    _HEADS,
    _SLOT_NUMERIC,
    _SLOTS,
    _VALUE_COPIED,
    TokenColumn,
)
from simulations.synth.tvae import one_thread, require_at_least_one

__all__ = ["SequenceModel", "TokenColumn"]

log = logging.getLogger(__name__)


class SequenceModel:
    """Token columns, the class scheme (in metadata), the weekly rates and the network."""

    def __init__(
        self,
        metadata: SynthMetadata,
        columns: list[TokenColumn],
        network: _Network,
        token_shares: dict[str, np.ndarray],
        rates: np.ndarray,
        run_classes: np.ndarray | None = None,
        again: np.ndarray | None = None,
    ) -> None:
        self.metadata = metadata
        # The training trace's repeats per run length (None: no "again" head, or a file
        # from before they were recorded).
        self.again_shares = again
        self.token_shares = token_shares
        # The training trace's run classes per size class (None: a file from before them).
        self.run_classes = run_classes
        self.columns = columns
        self.network = network.eval()
        self.rates = np.asarray(rates, dtype=np.float64)
        self.vocab = self._vocab(columns, len(metadata.classes.classes))
        self.users = _Users(metadata.classes.classes)
        self._numpy: _NumpyNet | None = None

    @staticmethod
    def _vocab(columns: list[TokenColumn], classes: int) -> dict[str, int]:
        by_name = {c.name: c.vocab for c in columns}
        return {
            "gap": by_name["interarrival_s"],
            "session": _SLOTS + 1,
            "class": classes,
            "procs": by_name["procs"],
            "request": by_name["requested_time_s"],
            "fraction": by_name["run_fraction"],
            "status": by_name["status"],
        }

    @property
    def span_s(self) -> float:
        """The training trace's span: where a job sits in it is one of its inputs."""
        return float(self.metadata.options.get("span_s", 1.0))

    @property
    def clock(self) -> TraceClock:
        return self.metadata.clock

    def _history(self, work_scale: float = 1.0) -> _History:
        """A fresh history; ``work_scale``: the share of each job's work the queue state
        counts (sampling more load than will be kept counts the share kept)."""
        clock = self.clock
        return _History(
            clock,
            OperationalTime(clock, self.rates),
            self.span_s,
            self.vocab,
            self.users,
            QueueState(self.metadata.machine_procs, work_scale=work_scale),
            runs=self.network.runs,
        )

    def _features(self, matrix: np.ndarray, labels: np.ndarray, user_ids: np.ndarray) -> _Batch:
        """Teacher-forcing inputs and tokens for every row of a training trace, in one pass.

        ``matrix[:, 0]`` holds operational gaps (already tokenized by the gap column)."""
        n = matrix.shape[0]
        history = self._history()
        procs_total = float(self.metadata.machine_procs)
        by_name = {c.name: c for c in self.columns}
        tokens = np.column_stack(
            [
                by_name["interarrival_s"].encode(matrix[:, 0]),
                np.zeros(n, dtype=np.int64),  # session: filled below
                labels.astype(np.int64),
            ]
            + [by_name[c].encode(matrix[:, k]) for k, c in enumerate(MODEL_COLUMNS) if k > 0]
        )
        users = np.array([self.users.index[int(u)] for u in user_ids], dtype=np.int64)
        numeric, slots, class_numeric = history.widths
        numbers = np.zeros((n, numeric), dtype=np.float32)
        previous = np.zeros((n, 4), dtype=np.int64)
        when = np.zeros((n, 4), dtype=np.int64)
        slot_numbers = np.zeros((n, slots), dtype=np.float32)
        slot_users = np.zeros((n, _SLOTS), dtype=np.int64)
        slot_class = np.zeros(n, dtype=np.int64)
        class_numbers = np.zeros((n, class_numeric), dtype=np.float32)
        class_previous = np.zeros((n, 3), dtype=np.int64)
        again = np.zeros(n, dtype=bool)
        user_run = np.zeros(n, dtype=np.int64)
        for i in range(n):
            numbers[i], previous[i], when[i, 0], when[i, 1] = history.context()
            op_gap = float(matrix[i, 0]) if i else 0.0
            at = history.operational.inverse(history.now_op + op_gap) if i else 0.0
            when[i, 2], when[i, 3] = self.clock.hour_and_weekday_at(at)
            slot_numbers[i], slot_users[i], classes = history.slots(at)
            session = history.session_token(int(users[i]))
            tokens[i, 1] = session
            slot_class[i] = classes[session] if session < _SLOTS else self.vocab["class"]
            class_numbers[i], class_previous[i] = history.class_context(int(tokens[i, 2]), at)
            shape = (int(tokens[i, 2]), int(tokens[i, 3]), int(tokens[i, 4]))
            again[i] = session < _SLOTS and history.last_shape(int(users[i])) == shape
            user_run[i] = history.run_length(int(users[i]))
            row = dict(zip(_HEADS, (int(t) for t in tokens[i]), strict=True))
            work = job_work(matrix[i, 1], matrix[i, 2], matrix[i, 3], procs_total)
            history.push(at - history.now_s, op_gap, row, int(users[i]), work)
        return _Batch(
            torch.from_numpy(numbers),
            torch.from_numpy(previous),
            torch.from_numpy(when),
            torch.from_numpy(slot_numbers),
            torch.from_numpy(slot_users),
            torch.from_numpy(slot_class),
            torch.from_numpy(class_numbers),
            torch.from_numpy(class_previous),
            torch.from_numpy(tokens),
            torch.from_numpy(again),
            torch.from_numpy(user_run),
        )

    @classmethod
    @one_thread()
    def fit(
        cls,
        trace: Trace,
        *,
        seed: int = 0,
        epochs: int = 30,
        batch_size: int = 256,
        hidden: int = 128,
        head_hidden: int = 64,
        bins: int = 48,
        learning_rate: float = 2e-3,
        validation: float = 0.1,
        min_class_jobs: int = 30,
    ) -> SequenceModel:
        require_at_least_one(
            epochs=epochs, batch_size=batch_size, hidden=hidden, head_hidden=head_hidden, bins=bins
        )
        if not 0 <= validation < 1:
            raise InvalidInputError(
                "validation is a share of the trace in [0, 1)", field="validation", value=validation
            )
        began = time.perf_counter()
        data = training_data(trace, min_class_jobs=min_class_jobs)
        # Resubmissions are a user's: a log without user ids (ALCF-Theta's) has classes of
        # size alone, whose "previous job" is anyone's, so it gets no copy gates and run
        # classes per size class only.
        users_known = bool((trace.table.user >= 0).any())
        submit = trace.table.submit_s
        rates = weekly_rates(submit, trace.clock)
        operational = OperationalTime(trace.clock, rates).forward_many(submit)
        matrix = data.matrix.copy()
        matrix[:, 0] = np.diff(operational, prepend=operational[:1])
        columns = [
            TokenColumn.fit(name, matrix[:, k], bins) for k, name in enumerate(MODEL_COLUMNS)
        ]
        options: dict[str, float | int | str | bool] = {
            "epochs": epochs,
            "batch_size": batch_size,
            "hidden": hidden,
            "head_hidden": head_hidden,
            "bins": bins,
            "learning_rate": learning_rate,
            "validation": validation,
            "min_class_jobs": min_class_jobs,
            "job_when": True,
            "repeat": users_known,
            "runs": users_known,
            "span_s": float(submit[-1]),
            "session_slots": _SLOTS,
            "queue_numbers": QUEUE_NUMBERS,
            "peak_week_load": peak_week_load(trace.table, trace.machine_procs),
            "mean_backlog_s": mean_backlog_s(trace.table, trace.machine_procs),
            "easy_queue_s": easy_queue_s(trace.table, trace.machine_procs),
            "easy_wait_s": easy_wait_s(trace.table, trace.machine_procs),
        }
        for name, ratio in (
            ("short_backlog_ratio", short_backlog_ratio(trace.table, trace.machine_procs)),
            ("short_wait_ratio", short_wait_ratio(trace.table, trace.machine_procs)),
            ("after_short_share", after_short_share(trace.table, trace.machine_procs)),
        ):
            if ratio is not None:
                options[name] = ratio
        metadata = SynthMetadata.of_training(
            trace, data, kind="sequence", seed=seed, options=options
        )
        vocab = cls._vocab(columns, len(data.scheme.classes))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            network = _Network(
                vocab, hidden, head_hidden, job_when=True, repeat=users_known, runs=users_known
            )
        placeholder = {h: np.ones(vocab[h]) / vocab[h] for h in _HEADS}
        run_s = np.minimum(trace.table.run_s, trace.table.requested_time_s)
        run_classes = run_class_shares(
            trace.table.procs,
            run_s,
            data.scheme.size_edges,
            previous=previous_run_classes(data.labels, run_s) if users_known else None,
            request_s=trace.table.requested_time_s if users_known else None,
        )
        model = cls(metadata, columns, network, placeholder, rates, run_classes)
        batch = model._features(matrix, data.labels, trace.table.user)
        tokens = batch.tokens.numpy()
        if network.runs:
            model.again_shares = again_shares(
                batch.again.numpy(), tokens[:, 1], batch.user_run.numpy()
            )
        model.token_shares = {
            head: np.bincount(tokens[:, k], minlength=vocab[head]) / tokens.shape[0]
            for k, head in enumerate(_HEADS)
        }
        n = tokens.shape[0]
        generator = torch.Generator().manual_seed(seed)
        # Validation rows are drawn at random: every part of the trace's span is seen.
        shuffled = torch.randperm(n, generator=generator)
        n_held = int(n * validation)
        n_train = n - n_held
        train, held = batch.rows(shuffled[n_held:]), batch.rows(shuffled[:n_held])
        optimizer = torch.optim.Adam(network.parameters(), lr=learning_rate, weight_decay=1e-5)
        best_loss, best_state, best_epoch = math.inf, None, 0
        train_loss = math.nan
        for epoch in range(epochs):
            network.train()
            order = torch.randperm(n_train, generator=generator)
            total = 0.0
            for begin in range(0, n_train, batch_size):
                rows = train.rows(order[begin : begin + batch_size])
                loss = _loss(network, rows, model.users)
                optimizer.zero_grad()
                torch.autograd.backward(loss)
                optimizer.step()
                total += float(loss.detach()) * rows.tokens.shape[0]
            train_loss = total / n_train
            network.eval()
            with torch.no_grad():
                held_loss = float(_loss(network, held, model.users)) if n_held else train_loss
            log.info(
                "sequence epoch %d/%d: loss %.4f, held-out %.4f",
                epoch + 1,
                epochs,
                train_loss,
                held_loss,
            )
            if held_loss < best_loss:
                best_loss, best_epoch = held_loss, epoch + 1
                best_state = {k: v.detach().clone() for k, v in network.state_dict().items()}
        if best_state is not None:
            network.load_state_dict(best_state)
        network.eval()
        model._numpy = None
        model.metadata = metadata.model_copy(
            update={
                "fit_seconds": time.perf_counter() - began,
                "options": {
                    **options,
                    "best_epoch": best_epoch,
                    "held_out_loss": round(best_loss, 6),
                    "final_train_loss": round(train_loss, 6),
                },
            }
        )
        return model

    def sample_rows(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Not how this model samples: its classes come out of the sequence itself."""
        raise InvalidInputError(
            "a sequence model draws its own classes; use sample_sequence", field="model"
        )

    def sample_sequence(
        self, n_jobs: int, rng: np.random.Generator, *, load: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``n_jobs`` rows of MODEL_COLUMNS in submit order, and their users.

        ``load`` (processor-seconds asked per second, over the machine): run operational
        time faster or slower so that the jobs offer that much on average. The speed is
        ``load`` over the model's own load per operational second, estimated from the
        jobs drawn so far (starting from the training load over one operational day), so
        it settles within days and leaves the model's busy and quiet weeks, and the daily
        and weekly cycle, as they are. ``None``: the model's own pace."""
        if load is not None and not (math.isfinite(load) and load > 0):
            raise InvalidInputError("load must be a positive number", field="load", value=load)
        procs_total = float(self.metadata.machine_procs)
        prior_op_s = 86_400.0
        drawn_op_s = prior_op_s
        drawn_work = self.metadata.offered_load * procs_total * prior_op_s
        density = 1.0 if load is None else load / self.metadata.offered_load
        if self._numpy is None:
            self._numpy = _NumpyNet(self.network)
        net = self._numpy
        emb = net.embed
        by_name = {c.name: c for c in self.columns}
        classes = self.metadata.classes.classes
        # Jobs drawn at ``density`` times the model's load are thinned to its load later.
        history = self._history(work_scale=1.0 / density)
        rows = np.empty((n_jobs, len(MODEL_COLUMNS)), dtype=np.float64)
        users = np.empty(n_jobs, dtype=np.int64)
        # One uniform more for the "again" head (``runs``).
        uniforms = rng.random((n_jobs, 14 if net.again is not None else 13))
        feedback = _MarginalFeedback(self.token_shares)
        run_feedback = (
            None
            if self.run_classes is None
            else _RunClassFeedback(self.run_classes, by_name["run_fraction"])
        )
        again_feedback = (
            None
            if net.again is None or self.again_shares is None
            else _AgainFeedback(self.again_shares)
        )
        size_edges = self.metadata.classes.size_edges
        none_class = self.vocab["class"]
        repeat = self.network.repeat
        # A token that repeats the class's previous one repeats its value too (a
        # resubmitted job asks what it did; a bin's token alone would draw a new value
        # within the bin): the history keeps each class's and user's last values.
        last_run_class: dict[int, int] = {}  # each class's last job's run class
        for i in range(n_jobs):
            u = uniforms[i]
            numbers, previous, hour, weekday = history.context()
            context = np.concatenate(
                [
                    numbers,
                    emb["gap"][previous[0]],
                    emb["class"][previous[1]],
                    emb["procs"][previous[2]],
                    emb["request"][previous[3]],
                    _hot(hour, 24),
                    _hot(weekday, 7),
                ]
            )
            h = net.mlp(net.trunk, context, last_relu=True)  # the trunk ends in a ReLU
            gap_token = _draw(net.mlp(net.heads["gap"], h), u[0], feedback.weights("gap"))
            feedback.drawn("gap", gap_token)
            op_gap = by_name["interarrival_s"].decode(gap_token, u[1]) if i else 0.0
            gap = 0.0
            if i:
                at_real = history.operational.inverse(history.now_op + op_gap / density)
                gap = float(max(round(at_real - history.now_s), 1))
            at = history.now_s + gap
            new_hour, new_weekday = self.clock.hour_and_weekday_at(at)
            new_when = np.concatenate([_hot(new_hour, 24), _hot(new_weekday, 7)])
            gap_embedding = emb["gap"][gap_token]
            slot_numbers, slot_users, slot_classes = history.slots(at)
            session_logits = net.mlp(
                net.heads["session"], np.concatenate([h, gap_embedding, slot_numbers, new_when])
            )
            session_logits[:_SLOTS][slot_users == self.users.none] = _MASKED
            session = _draw(session_logits, u[2], feedback.weights("session"))
            feedback.drawn("session", session)
            slot_class = slot_classes[session] if session < _SLOTS else none_class
            class_input = np.concatenate(
                [h, gap_embedding, new_when, emb["session"][session], emb["class"][slot_class]]
            )
            # A continued session's job may repeat its user's last one: its shape and values.
            taken: tuple[tuple[int, int, int], tuple[float, ...]] | None = None
            if net.again is not None and session < _SLOTS:
                slot_user = int(slot_users[session])
                chosen = np.append(
                    slot_numbers[session * _SLOT_NUMERIC : (session + 1) * _SLOT_NUMERIC],
                    slot_numbers[_SLOTS * _SLOT_NUMERIC + session],
                )
                logit = float(net.mlp(net.again, np.concatenate([class_input, chosen]))[0])
                run = history.run_length(slot_user)
                p = (
                    _logistic(logit)
                    if again_feedback is None
                    else again_feedback.probability(logit, run)
                )
                last_job = history.last_job(slot_user)
                if u[13] < p and last_job is not None:
                    taken = last_job
                if again_feedback is not None:
                    again_feedback.drawn(run, taken is not None)
            if taken is None:
                class_logits = net.mlp(net.heads["class"], class_input)
                class_logits[~self.users.allowed(session, slot_users)] = _MASKED
                label = _draw(class_logits, u[3], feedback.weights("class"))
            else:
                label = taken[0][0]
            feedback.drawn("class", label)
            class_numbers, class_previous = history.class_context(label, at)
            job = np.concatenate(
                [
                    h,
                    gap_embedding,
                    emb["session"][session],
                    emb["class"][label],
                    class_numbers,
                    emb["procs"][class_previous[0]],
                    emb["request"][class_previous[1]],
                    emb["fraction"][class_previous[2]],
                    *([new_when] if self.network.job_when else []),
                ]
            )
            tokens = {"gap": gap_token, "session": session, "class": label}
            values = [gap]
            for k, (head, column) in enumerate(
                (
                    ("procs", "procs"),
                    ("request", "requested_time_s"),
                    ("fraction", "run_fraction"),
                    ("status", "status"),
                )
            ):
                copied = repeat and head in _COPIED
                if taken is not None and head in _AGAIN_TAKES:
                    token = taken[0][_AGAIN_TAKES.index(head)]
                    values.append(taken[1][k])
                else:
                    weights = feedback.weights(head)
                    if head == "fraction" and run_feedback is not None:
                        size_class = int(np.searchsorted(size_edges, values[1], side="right"))
                        previous_run = last_run_class.get(label, _NO_PREVIOUS)
                        weights = weights * run_feedback.weights(
                            size_class, values[2], previous_run
                        )
                    logits = net.mlp(net.heads[head], job)
                    if copied and class_previous[k] < logits.size:
                        logits[class_previous[k]] += net.mlp(net.copy[head], job)[0]
                    token = _draw(logits, u[4 + 2 * k], weights)
                    repeated = copied and token == class_previous[k]
                    class_values = history.class_values.get(label)
                    if repeated and head in _VALUE_COPIED and class_values is not None:
                        values.append(class_values[k])
                    else:
                        values.append(by_name[column].decode(token, u[5 + 2 * k]))
                feedback.drawn(head, token)
                tokens[head] = token
                same = [[float(token == class_previous[k])]] if copied else []
                job = np.concatenate([job, emb[head][token], *same])
            rows[i] = values
            if run_feedback is not None:
                run_s = values[3] * values[2]
                run_feedback.drawn(size_class, previous_run, values[2], run_s)
                last_run_class[label] = int(run_class(run_s, run_feedback.edges))
            work = job_work(values[1], values[2], values[3], procs_total)
            if load is not None:
                drawn_op_s += op_gap
                drawn_work += work
                density = float(np.clip(load * procs_total * drawn_op_s / drawn_work, 0.1, 10.0))
            user = self._user(classes[label], session, slot_users, u[12])
            users[i] = self.users.ids[user]
            copied_values = tuple(values[1 : 1 + len(_VALUE_COPIED)])
            history.push(gap, op_gap, tokens, user, work, copied_values)
            feedback.next_job()
        return rows, users

    def _user(self, job_class: Any, session: int, slot_users: np.ndarray, u: float) -> int:
        """The job's user index: the continued slot's, else one of the class's users
        drawn by their job counts, those with an open slot left out (when any remain)."""
        if session < _SLOTS:
            return int(slot_users[session])
        candidates = np.array([self.users.index[int(x)] for x in job_class.users])
        weights = np.array(job_class.user_jobs, dtype=np.float64)
        others = ~np.isin(candidates, slot_users)
        if others.any():
            candidates, weights = candidates[others], weights[others]
        cumulative = np.cumsum(weights)
        pick = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
        return int(candidates[min(pick, candidates.size - 1)])

    def state(self) -> dict[str, Any]:
        return {
            "columns": [c.state() for c in self.columns],
            "network": self.network.state_dict(),
            "token_shares": [
                torch.from_numpy(self.token_shares[h].astype(np.float64)) for h in _HEADS
            ],
            "weekly_rates": torch.from_numpy(self.rates.astype(np.float64)),
            **(
                {}
                if self.run_classes is None
                else {"run_classes": torch.from_numpy(self.run_classes.astype(np.float64))}
            ),
            **(
                {}
                if self.again_shares is None
                else {"again_shares": torch.from_numpy(self.again_shares.astype(np.float64))}
            ),
        }

    @classmethod
    def from_state(cls, metadata: SynthMetadata, state: dict[str, Any]) -> SequenceModel:
        with state_errors("sequence model"):
            slots = metadata.options.get("session_slots")
            if slots != _SLOTS:
                raise ValueError(
                    f"fitted with {slots} session slots; this build uses {_SLOTS} (refit it)"
                )
            queue = metadata.options.get("queue_numbers")
            if queue != QUEUE_NUMBERS:
                raise ValueError(
                    f"fitted with {queue or 'no'} queue-state numbers; this build conditions "
                    f"on {QUEUE_NUMBERS} (refit it)"
                )
            columns = [TokenColumn.from_state(spec) for spec in state["columns"]]
            names = tuple(c.name for c in columns)
            if names != MODEL_COLUMNS:
                raise ValueError(f"columns {names}, expected {MODEL_COLUMNS}")
            options = metadata.options
            vocab = cls._vocab(columns, len(metadata.classes.classes))
            network = _Network(
                vocab,
                int(options["hidden"]),
                int(options["head_hidden"]),
                job_when=bool(options.get("job_when", False)),
                repeat=bool(options.get("repeat", False)),
                runs=bool(options.get("runs", False)),
            )
            network.load_state_dict(state["network"], strict=True)
            shares = {
                h: t.double().numpy() for h, t in zip(_HEADS, state["token_shares"], strict=True)
            }
            for h in _HEADS:
                if shares[h].shape != (vocab[h],):
                    raise ValueError(
                        f"{h} token shares of shape {shares[h].shape}, vocab {vocab[h]}"
                    )
            rates = state["weekly_rates"].double().numpy()
            if rates.shape != (WEEK_BINS,):
                raise ValueError(f"weekly rates of shape {rates.shape}, expected ({WEEK_BINS},)")
            # A file from before the run classes were recorded samples without their feedback.
            run_classes = state.get("run_classes")
            if run_classes is not None:
                run_classes = run_classes.double().numpy()
                # Per size class in four run classes (a file from before the 10 s edge) or
                # five (a trace without user ids), or per size class and previous run class
                # (a file from before the request classes), or per request class too.
                sizes = len(metadata.classes.size_edges) + 1
                shapes = (
                    (sizes, _RUN_CLASSES - 1),
                    (sizes, _RUN_CLASSES),
                    (sizes, _RUN_CLASSES + 1, _RUN_CLASSES),
                    (sizes, _RUN_CLASSES + 1, _REQUEST_CLASSES, _RUN_CLASSES),
                )
                if run_classes.shape not in shapes:
                    raise ValueError(
                        f"run classes of shape {run_classes.shape}, expected one of {shapes}"
                    )
            # A file from before the repeats per run length samples the again head alone.
            again = state.get("again_shares")
            if again is not None:
                again = again.double().numpy()
                buckets = (_RUN_LENGTH_EDGES.size + 1,)
                if not network.runs or again.shape != buckets:
                    raise ValueError(
                        f"again shares of shape {again.shape}, expected {buckets} "
                        "with a network that has the again head"
                    )
                if not np.all((again >= 0) & (again <= 1)):
                    raise ValueError(f"again shares outside [0, 1]: {again.tolist()}")
        return cls(metadata, columns, network, shares, rates, run_classes, again)
