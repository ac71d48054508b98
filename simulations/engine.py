"""The discrete-event scheduling core: FCFS, EASY and conservative backfilling, compiled.

Jobs are columns of numpy arrays sorted by submit time. The loop jumps from event to
event (the next arrival or the next completion from a heap), frees processors, admits
arrivals and schedules, and writes each job's start and end. Jobs are killed at their
request (``req_s``): a job with ``run_s > req_s`` ends at ``start + req_s``.

What a reservation believes a job will take is ``est_s``:

- ``user`` estimates are the requests themselves;
- ``last2`` (Tsafrir's EASY++) is the average run time of the user's last two finished
  jobs, capped at the request, and the request when there is less history. It is
  computed inside the loop, from jobs that have finished *in the simulation* by the time
  the job arrives. A running job that outlives its estimate has it raised to its request;
- ``model`` estimates arrive precomputed (the history estimator's p50, capped at the
  request); they are raised the same way when outlived.

The FCFS and EASY queue is in arrival order unless a scorer is given
(:mod:`simulations.learned.priority`): then a small tanh network scores every queued
job from ``SCORE_FEATURES`` at every event and the queue runs lowest score first (stable,
so equal scores keep arrival order); the first job is the head, and EASY backfills the
rest in that order. One loop serves both, so both get the same tie rules.

Cost per event: FCFS O(1) amortized; EASY O(R log R) to find the head's reservation
(R = running jobs) plus a scan of the queue for backfill candidates; conservative
O(Q * P) to re-place every queued job in the free-processor profile (Q = queue length,
P = profile breakpoints, at most R + Q). Whole-trace cost grows with the number of
events (two per job) times those per-event costs, so busy traces with long queues cost
more per job than quiet ones.
"""

# The compiled helpers are typed by numba when they are compiled; mypy sees numpy
# scalars flowing into ``int`` parameters and cannot follow numba's dispatch.
# mypy: disable-error-code="arg-type,return-value,assignment,no-any-return"

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
from numba import njit

from knowledge_base.errors import InvalidInputError

__all__ = [
    "ARRIVAL",
    "CONSERVATIVE",
    "EASY",
    "EXPANSION",
    "FCFS",
    "NO_BOUND",
    "SCORE_FEATURES",
    "SHORTEST",
    "SMALLEST_AREA",
    "Distribution",
    "Scorer",
    "simulate_arrays",
    "warm_up",
]

FCFS, EASY, CONSERVATIVE = 0, 1, 2
ARRIVAL, SHORTEST, SMALLEST_AREA, EXPANSION = 0, 1, 2, 3
"""Orders, for EASY's backfill candidates and for the queue itself: arrival (queue) order,
shortest estimate first (SJBF / SJF), smallest estimate x processors first, largest
predicted expansion factor first ((wait + estimate) / max(estimate, 10 s), the job's
bounded slowdown if it started now)."""
NO_BOUND = 2**62
"""A starvation bound that never triggers."""
_ORDERS = (ARRIVAL, SHORTEST, SMALLEST_AREA, EXPANSION)
_INF = np.int64(2**62)
_SMALL = 32
"""Up to this many keys an event sorts by insertion into scratch space, above it numpy's."""
_STARVED_OFFSET = 1e15
"""Starved jobs' queue keys are their starvation times minus this: below every order key."""

SCORE_FEATURES = ("log_wait", "log_request", "log_procs", "fits_now")
"""What a scorer sees of a queued job, in the order of its first layer's rows."""

Scorer = tuple[np.ndarray, np.ndarray, np.ndarray, float]
"""A queue scorer's weights: (features x hidden, hidden biases, hidden -> 1, output bias)."""

_NO_SCORER: Scorer = (np.zeros((len(SCORE_FEATURES), 1)), np.zeros(1), np.zeros(1), 0.0)

Distribution = tuple[np.ndarray, np.ndarray, float]
"""Each job's run-time distribution for corrections: (run times ascending, n x K, in s;
P(run <= each), n x K, non-decreasing; the conditional quantile to pick)."""

_NO_DISTRIBUTION: Distribution = (
    np.zeros((1, 1), dtype=np.int64),
    np.ones((1, 1), dtype=np.float64),
    0.5,
)


@njit(cache=True)
def _next_estimate(
    j: int, elapsed: int, req: Any, dist_s: Any, dist_cover: Any, alpha: float
) -> int:
    """A running job outlived its estimate: the next one from its conditional distribution.

    ``dist_s[j]`` holds run times ascending and ``dist_cover[j]`` P(run <= each), non-
    decreasing. Knowing run > ``elapsed``, P(run <= c | run > elapsed) is
    (cover(c) - cover(elapsed)) / (1 - cover(elapsed)); the next estimate is the smallest
    c past ``elapsed`` where that reaches ``alpha``, else the request (the kill time)."""
    k_count = dist_s.shape[1]
    below = 0.0
    for k in range(k_count):
        if dist_s[j, k] <= elapsed:
            below = dist_cover[j, k]
    left = 1.0 - below
    for k in range(k_count):
        value = dist_s[j, k]
        if value <= elapsed or value >= req[j]:
            continue
        if left <= 0.0 or (dist_cover[j, k] - below) >= alpha * left:
            return value
    return req[j]


@njit(cache=True)
def _estimated_end(
    j: int,
    t: int,
    start: Any,
    est: Any,
    req: Any,
    dist_s: Any,
    dist_cover: Any,
    alpha: float,
    conditional: bool,
) -> int:
    """When a running job is believed to end. Once outlived, its estimate is raised (and
    kept raised): to the request, or with ``conditional`` to the next estimate from its
    run-time distribution."""
    guess = start[j] + est[j]
    if guess <= t:
        if conditional:
            est[j] = _next_estimate(j, t - start[j], req, dist_s, dist_cover, alpha)
        else:
            est[j] = req[j]
        return start[j] + est[j]
    return guess


@njit(cache=True)
def _start_job(
    j: int, t: int, run: Any, req: Any, start: Any, end: Any, killed: Any, heap: Any, running: Any
) -> None:
    start[j] = t
    if run[j] > req[j]:
        end[j] = t + req[j]
        killed[j] = True
    else:
        end[j] = t + run[j]
    heapq.heappush(heap, (end[j], j))
    running.append(j)


@njit(cache=True)
def _rank(keys: Any, order: Any, count: int) -> None:
    """``order[:count]`` = the indices of ``keys[:count]`` ascending, ties by index
    (a stable argsort, by insertion: for the few keys an event sorts it allocates nothing
    and beats numpy's call)."""
    for a in range(count):
        key = keys[a]
        b = a - 1
        while b >= 0 and keys[order[b]] > key:
            order[b + 1] = order[b]
            b -= 1
        order[b + 1] = a


@njit(cache=True)
def _easy_shadow(
    t: int,
    head_procs: int,
    free: int,
    running: Any,
    start: Any,
    est: Any,
    req: Any,
    procs: Any,
    dist_s: Any,
    dist_cover: Any,
    alpha: float,
    conditional: bool,
    ends: Any,
    order: Any,
) -> tuple[int, int]:
    """The head's reservation (shadow time) and the processors spare at that time.

    ``ends`` and ``order`` are scratch space (at least one slot per running job), so
    nothing is allocated per event. Ties among the ends may come out in any order: all
    jobs ending at the shadow time are counted whatever their order."""
    n_running = len(running)
    for k in range(n_running):
        ends[k] = _estimated_end(
            running[k], t, start, est, req, dist_s, dist_cover, alpha, conditional
        )
    if n_running > _SMALL:
        order = np.argsort(ends[:n_running])
    else:
        _rank(ends, order, n_running)
    available = free
    for i in range(n_running):
        k = order[i]
        available += procs[running[k]]
        if available >= head_procs:
            shadow = ends[k]
            # every job ending at the shadow time frees its processors then (ties)
            for later in range(i + 1, n_running):
                other = order[later]
                if ends[other] != shadow:
                    break
                available += procs[running[other]]
            return shadow, available - head_procs
    return _INF, 0  # cannot happen for a job that fits the machine


@njit(cache=True)
def _order_by_score(
    queue: Any, t: int, free: int, machine: int, submit: Any, req: Any, procs: Any, scorer: Any
) -> None:
    """Sort ``queue`` in place by the scorer's score, lowest first, ties in queue order."""
    w1, b1, w2, b2 = scorer
    n = len(queue)
    scores = np.empty(n, dtype=np.float64)
    x = np.empty(4, dtype=np.float64)
    scale = np.log1p(machine)
    for k in range(n):
        j = queue[k]
        x[0] = np.log1p(t - submit[j]) / 10.0
        x[1] = np.log1p(req[j]) / 12.0
        x[2] = np.log1p(procs[j]) / scale
        x[3] = 1.0 if procs[j] <= free else 0.0
        score = b2
        for h in range(w1.shape[1]):
            a = b1[h]
            for f in range(4):
                a += x[f] * w1[f, h]
            score += np.tanh(a) * w2[h]
        scores[k] = score
    # Stable: equal scores keep arrival order, so a scorer of zeros is plain EASY.
    order = np.argsort(scores, kind="mergesort")
    ordered = np.empty(n, dtype=np.int64)
    for k in range(n):
        ordered[k] = queue[order[k]]
    for k in range(n):
        queue[k] = ordered[k]


@njit(cache=True)
def _order_key(
    kind: int, j: int, t: int, submit: Any, est: Any, procs: Any, age_rate: float
) -> float:
    """A queued job's place in ``kind``'s order, lowest first. ``age_rate`` (1 / s) adds
    wait x rate to the expansion factor: a long job ages as if its estimate were at most
    1 / rate (0: plain xf)."""
    if kind == SHORTEST:
        return float(est[j])
    if kind == SMALLEST_AREA:
        return float(est[j]) * float(procs[j])
    if kind == EXPANSION:
        wait = float(t - submit[j])
        return -(wait + float(est[j])) / float(max(est[j], 10)) - wait * age_rate
    return float(j)


@njit(cache=True)
def _order_queue_at(
    queue: Any,
    t: int,
    starve_at: Any,
    submit: Any,
    est: Any,
    procs: Any,
    kind: int,
    age_rate: float,
    keys: Any,
    ids: Any,
    all_starved: bool,
) -> None:
    """Sort ``queue`` in place by ``kind``'s key, ties in arrival order. The oldest job
    past its starvation time (``starve_at[j]``, absolute; the earliest such time, then
    arrival) goes before all others; the other starved jobs keep their key's place, or,
    with ``all_starved``, go before the rest too, by starvation time. ``keys`` and
    ``ids`` are scratch space, one slot per queued job at least."""
    n = len(queue)
    first = -1  # the oldest starved job: earliest starvation time, then arrival
    for k in range(n):
        j = queue[k]
        if t > starve_at[j] and (
            first < 0
            or starve_at[j] < starve_at[first]
            or (starve_at[j] == starve_at[first] and j < first)
        ):
            first = j
    for k in range(n):
        j = queue[k]
        ids[k] = j
        if t > starve_at[j] and (all_starved or j == first):
            # below every order key (those are > -1e13), exact for times < 2**53 s
            keys[k] = float(starve_at[j]) - _STARVED_OFFSET
        else:
            keys[k] = _order_key(kind, j, t, submit, est, procs, age_rate)
    # Insertion sort by (key, arrival): the queue arrives in last event's order, which
    # the keys barely change between events, so this is close to linear.
    for a in range(1, n):
        key = keys[a]
        j = ids[a]
        b = a - 1
        while b >= 0 and (keys[b] > key or (keys[b] == key and ids[b] > j)):
            keys[b + 1] = keys[b]
            ids[b + 1] = ids[b]
            b -= 1
        keys[b + 1] = key
        ids[b + 1] = j
    for k in range(n):
        queue[k] = ids[k]


@njit(cache=True)
def _order_queue(
    queue: Any,
    t: int,
    submit: Any,
    est: Any,
    procs: Any,
    kind: int,
    starve_s: int,
    age_rate: float,
    keys: Any,
    ids: Any,
) -> None:
    """``_order_queue_at`` with one bound for every job (as ``agents.ordering`` ranks):
    the oldest job that has waited longer than ``starve_s`` goes before all others."""
    starve_at = submit + min(starve_s, NO_BOUND)
    _order_queue_at(queue, t, starve_at, submit, est, procs, kind, age_rate, keys, ids, False)


@njit(cache=True)
def _earliest_fit(t: int, width: int, duration: int, times: Any, free: Any, count: int) -> int:
    """Earliest breakpoint index where ``width`` processors stay free for ``duration``."""
    for a in range(count):
        if free[a] < width:
            continue
        begin = times[a]
        ok = True
        b = a + 1
        while b < count and times[b] < begin + duration:
            if free[b] < width:
                ok = False
                break
            b += 1
        if ok:
            return a
    return -1


@njit(cache=True)
def _reserve(begin: int, finish: int, width: int, times: Any, free: Any, count: int) -> int:
    """Take ``width`` processors over [begin, finish) in the profile; returns its new size."""
    for point in (begin, finish):
        k = 0
        while k < count and times[k] < point:
            k += 1
        if k < count and times[k] == point:
            continue
        for m in range(count, k, -1):  # insert a breakpoint carrying the level before it
            times[m] = times[m - 1]
            free[m] = free[m - 1]
        times[k] = point
        free[k] = free[k - 1] if k > 0 else free[0]
        count += 1
    for k in range(count):
        if begin <= times[k] < finish:
            free[k] -= width
    return count


@njit(cache=True)
def _simulate(
    submit: Any,
    run: Any,
    req: Any,
    procs: Any,
    est: Any,
    user: Any,
    machine: int,
    policy: int,
    last2: bool,
    n_users: int,
    scorer: Any,
    scored: bool,
    order_kind: int,
    dist_s: Any,
    dist_cover: Any,
    alpha: float,
    conditional: bool,
    queue_kind: int,
    starve_at: Any,
    age_rate: float,
    all_starved: bool,
) -> tuple[Any, Any, Any, Any]:
    n = submit.shape[0]
    start = np.full(n, -1, dtype=np.int64)
    end = np.full(n, -1, dtype=np.int64)
    killed = np.zeros(n, dtype=np.bool_)
    head_reservation = np.full(n, -1, dtype=np.int64)
    hist_last = np.zeros(max(n_users, 1), dtype=np.int64)
    hist_prev = np.zeros(max(n_users, 1), dtype=np.int64)
    hist_count = np.zeros(max(n_users, 1), dtype=np.int64)

    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
    running = [np.int64(0)]
    running.pop()
    queue = [np.int64(0)]
    queue.pop()
    profile_times = np.empty(2 * n + 4, dtype=np.int64)
    profile_free = np.empty(2 * n + 4, dtype=np.int64)
    # Scratch space for the per-event sorts (queue, running jobs, backfill candidates):
    # allocated once, as events are many (two per job) and their sorts short.
    scratch_keys = np.empty(n + 1, dtype=np.float64)
    scratch_ids = np.empty(n + 1, dtype=np.int64)
    scratch_ends = np.empty(n + 1, dtype=np.int64)
    scratch_order = np.empty(n + 1, dtype=np.int64)
    picked = np.empty(n + 1, dtype=np.int64)
    chosen = np.zeros(n + 1, dtype=np.bool_)

    free = machine
    arrived = 0
    while arrived < n or len(queue) > 0 or len(heap) > 0:
        t = _INF
        if len(heap) > 0:
            t = heap[0][0]
        if arrived < n and submit[arrived] < t:
            t = submit[arrived]

        while len(heap) > 0 and heap[0][0] <= t:
            _, j = heapq.heappop(heap)
            free += procs[j]
            for k in range(len(running)):
                if running[k] == j:
                    running.pop(k)
                    break
            u = user[j]
            if last2 and u >= 0:
                hist_prev[u] = hist_last[u]
                hist_last[u] = end[j] - start[j]
                hist_count[u] += 1

        while arrived < n and submit[arrived] <= t:
            j = arrived
            if last2:
                u = user[j]
                if u >= 0 and hist_count[u] >= 2:
                    guess = (hist_last[u] + hist_prev[u] + 1) // 2
                    est[j] = min(max(guess, 1), req[j])
                else:
                    est[j] = req[j]
            queue.append(j)
            arrived += 1

        if policy == CONSERVATIVE:
            # Rebuild the free-processor profile from what runs, then place every queued
            # job at its earliest fit in FCFS order (reservations are recomputed, i.e.
            # compressed, at every event).
            count = 1
            profile_times[0] = t
            profile_free[0] = free
            ends = np.empty(len(running), dtype=np.int64)
            for k in range(len(running)):
                ends[k] = _estimated_end(
                    running[k], t, start, est, req, dist_s, dist_cover, alpha, conditional
                )
            order = np.argsort(ends)
            for k in order:
                when = ends[k]
                if profile_times[count - 1] == when:
                    profile_free[count - 1] += procs[running[k]]
                else:
                    profile_times[count] = when
                    profile_free[count] = profile_free[count - 1] + procs[running[k]]
                    count += 1
            idx = 0
            while idx < len(queue):
                j = queue[idx]
                a = _earliest_fit(t, procs[j], est[j], profile_times, profile_free, count)
                begin = profile_times[a]
                count = _reserve(
                    begin, begin + est[j], procs[j], profile_times, profile_free, count
                )
                if begin == t and procs[j] <= free:
                    _start_job(j, t, run, req, start, end, killed, heap, running)
                    free -= procs[j]
                    queue.pop(idx)
                    continue
                if head_reservation[j] < 0:
                    head_reservation[j] = begin
                idx += 1
            continue

        if scored and len(queue) > 1:
            _order_by_score(queue, t, free, machine, submit, req, procs, scorer)
        elif queue_kind != ARRIVAL and len(queue) > 1:
            # Order only when some queued job fits now: otherwise nothing starts or
            # backfills at this event, and the order is taken afresh at the next one.
            fits = False
            for k in range(len(queue)):
                if procs[queue[k]] <= free:
                    fits = True
                    break
            if not fits:
                continue
            _order_queue_at(
                queue,
                t,
                starve_at,
                submit,
                est,
                procs,
                queue_kind,
                age_rate,
                scratch_keys,
                scratch_ids,
                all_starved,
            )
        while len(queue) > 0 and procs[queue[0]] <= free:
            j = queue.pop(0)
            _start_job(j, t, run, req, start, end, killed, heap, running)
            free -= procs[j]
        if policy == FCFS or len(queue) == 0:
            continue

        head = queue[0]
        if head_reservation[head] >= 0 and not conditional:
            # Nothing can backfill unless some queued job fits the free processors now:
            # skip the reservation (raising outlived estimates to the request can wait,
            # it does not depend on when it is done; a conditional correction does).
            fits = False
            if free > 0:
                for k in range(1, len(queue)):
                    if procs[queue[k]] <= free:
                        fits = True
                        break
            if not fits:
                continue
        # A starved head is protected from under-estimates: its reservation is taken
        # from the running jobs' requests (their kill times, so it cannot slip), and a
        # candidate must end before it by its request, not by its estimate. That is
        # EASY with requests for this one job: it starts by that reservation.
        protect = t > starve_at[head]
        shadow, extra = _easy_shadow(
            t,
            procs[head],
            free,
            running,
            start,
            req if protect else est,
            req,
            procs,
            dist_s,
            dist_cover,
            alpha,
            conditional and not protect,
            scratch_ends,
            scratch_order,
        )
        if head_reservation[head] < 0:
            head_reservation[head] = shadow
        if order_kind == ARRIVAL:
            idx = 1
            while idx < len(queue) and free > 0:
                j = queue[idx]
                if procs[j] <= free:
                    if t + (req[j] if protect else est[j]) <= shadow:
                        _start_job(j, t, run, req, start, end, killed, heap, running)
                        free -= procs[j]
                        queue.pop(idx)
                        continue
                    if procs[j] <= extra:
                        _start_job(j, t, run, req, start, end, killed, heap, running)
                        free -= procs[j]
                        extra -= procs[j]
                        queue.pop(idx)
                        continue
                idx += 1
            continue
        # Shortest (estimated) first, or smallest area first: try the candidates that
        # fit now in that order; the head keeps its place and its reservation.
        if free == 0:
            continue
        # Only candidates that could start now: free processors and spare ones at the
        # shadow only shrink as candidates start, so one that fails now fails later too.
        keys = scratch_keys
        count = 0
        for k in range(1, len(queue)):
            j = queue[k]
            if procs[j] <= free and (
                t + (req[j] if protect else est[j]) <= shadow or procs[j] <= extra
            ):
                picked[count] = k
                keys[count] = _order_key(order_kind, j, t, submit, est, procs, age_rate)
                count += 1
        if count == 0:
            continue
        # Stable: equal keys keep queue order.
        if count > _SMALL:
            ranked = np.argsort(keys[:count], kind="mergesort")
        else:
            ranked = scratch_order
            _rank(keys, ranked, count)
        chosen[:count] = False
        for r in range(count):
            m = ranked[r]
            if free == 0:
                break
            j = queue[picked[m]]
            if procs[j] > free:
                continue
            if t + (req[j] if protect else est[j]) <= shadow:
                _start_job(j, t, run, req, start, end, killed, heap, running)
                free -= procs[j]
                chosen[m] = True
            elif procs[j] <= extra:
                _start_job(j, t, run, req, start, end, killed, heap, running)
                free -= procs[j]
                extra -= procs[j]
                chosen[m] = True
        # Drop the started jobs from the queue, keeping the others in arrival order.
        for m in range(count - 1, -1, -1):
            if chosen[m]:
                queue.pop(picked[m])
    return start, end, killed, head_reservation


_warm = False


def warm_up() -> None:
    """Compile (or load from numba's cache) the core once, so timings measure the replay."""
    global _warm
    if not _warm:
        one = np.ones(2, dtype=np.int64)
        zero = np.zeros(2, dtype=np.int64)
        values, cover, alpha = _NO_DISTRIBUTION
        for policy, order in ((EASY, ARRIVAL), (EASY, SHORTEST), (CONSERVATIVE, ARRIVAL)):
            _simulate(
                zero,
                one,
                one,
                one,
                one.copy(),
                -one,
                1,
                policy,
                policy == EASY,
                1,
                _NO_SCORER,
                False,
                order,
                values,
                cover,
                alpha,
                False,
                ARRIVAL,
                zero + NO_BOUND,
                0.0,
                True,
            )
        _warm = True


def simulate_arrays(
    *,
    submit_s: np.ndarray,
    run_s: np.ndarray,
    req_s: np.ndarray,
    procs: np.ndarray,
    est_s: np.ndarray,
    user: np.ndarray,
    machine_procs: int,
    policy: int,
    last2: bool,
    scorer: Scorer | None = None,
    order: int = ARRIVAL,
    distribution: Distribution | None = None,
    queue_order: int = ARRIVAL,
    starve_s: int | np.ndarray = NO_BOUND,
    age_s: float | None = None,
    all_starved: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, killed, first reservation) per job; inputs must be sorted by submit.

    ``scorer`` orders the FCFS or EASY queue by score instead of arrival. ``order`` is the
    order EASY tries backfill candidates in (``ARRIVAL``, ``SHORTEST``, ``SMALLEST_AREA``).
    ``distribution`` (one row per job) corrects an outlived estimate from the job's
    conditional distribution instead of raising it to the request. ``starve_s`` (one
    bound, or one per job) is the wait past which a job is starved: the oldest starved
    job goes first and, as head, is protected (its reservation and the backfills by the
    requests); ``all_starved`` puts every starved job first, by starvation time (the
    earlier rule, kept to compare)."""
    if scorer is not None and policy == CONSERVATIVE:
        raise InvalidInputError(
            "a scorer orders the fcfs or easy queue; conservative places jobs in arrival order",
            field="policy",
            value="conservative",
        )
    if order not in _ORDERS:
        raise InvalidInputError("unknown backfill order", field="order", value=order)
    if queue_order not in _ORDERS:
        raise InvalidInputError("unknown queue order", field="queue_order", value=queue_order)
    if queue_order != ARRIVAL and (scorer is not None or policy == CONSERVATIVE):
        raise InvalidInputError(
            "a queue order applies to the fcfs or easy queue without a scorer",
            field="queue_order",
            value=queue_order,
        )
    bounds = np.minimum(np.asarray(starve_s, dtype=np.int64), NO_BOUND)
    if bounds.ndim > 1 or (bounds.ndim == 1 and bounds.shape != submit_s.shape):
        raise InvalidInputError(
            "the starvation bound is one number or one per job",
            field="starve_s",
            value=bounds.shape,
        )
    if bounds.size and bounds.min() < 0:
        raise InvalidInputError(
            "a starvation bound is >= 0 s", field="starve_s", value=int(bounds.min())
        )
    if age_s is not None and not age_s > 0:
        raise InvalidInputError("an aging time is > 0 s", field="age_s", value=age_s)
    if distribution is not None and distribution[0].shape[0] != submit_s.shape[0]:
        raise InvalidInputError(
            "the run-time distribution needs one row per job",
            field="distribution",
            value=distribution[0].shape,
        )
    n_users = int(user.max()) + 1 if user.size else 1
    w1, b1, w2, b2 = _NO_SCORER if scorer is None else scorer
    values, cover, alpha = _NO_DISTRIBUTION if distribution is None else distribution
    result: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] = _simulate(
        submit_s.astype(np.int64),
        run_s.astype(np.int64),
        req_s.astype(np.int64),
        procs.astype(np.int64),
        est_s.astype(np.int64).copy(),
        user.astype(np.int64),
        int(machine_procs),
        int(policy),
        bool(last2),
        n_users,
        (
            np.ascontiguousarray(w1, dtype=np.float64),
            np.ascontiguousarray(b1, dtype=np.float64),
            np.ascontiguousarray(w2, dtype=np.float64),
            float(b2),
        ),
        scorer is not None,
        int(order),
        np.ascontiguousarray(values, dtype=np.int64),
        np.ascontiguousarray(cover, dtype=np.float64),
        float(alpha),
        distribution is not None,
        int(queue_order),
        submit_s.astype(np.int64) + bounds,
        0.0 if age_s is None else 1.0 / float(age_s),
        bool(all_starved),
    )
    return result
