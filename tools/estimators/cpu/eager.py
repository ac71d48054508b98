"""What an eager CPU training step costs beyond its operators' own work, as the
per-operator model's step law (``opcost``) reads it from a traced step.

- ``eager_operators``: operators the step dispatches from Python (a recurrent layer's
  C++ loop counts as one forward and one backward call);
- ``eager_extras``: the view operators the step dispatches (``opgraph`` geometry field
  ``view_ops``: reshape, transpose, ... that the traced graph folds into the tensor they
  alias, while eager dispatches each and records it for autograd; a transformer layer
  runs two views per working operator, a convolution network one per ten) and the random
  numbers it draws (``random_elements``: dropout's ``bernoulli_``), from the operators'
  raw geometry rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from knowledge_base.errors import InvalidInputError
from tools.profiling.opgraph import GEOMETRY_FIELDS, GEOMETRY_VERSION

__all__ = ["RANDOM_S_PER_ELEMENT", "eager_extras", "eager_operators", "raw_geometry"]

# Seconds per random number drawn (dropout's ``bernoulli_``), on top of the operator's
# booster price: no timed step draws any (the zoo and the probes train without dropout),
# and the booster prices ``bernoulli_`` as an elementwise operator of its bytes, 20-30x
# under. Measured on the AMD EPYC (AVX-512) host with ``optiming.time_call`` of
# ``bernoulli_(0.9)`` on 1e5-1.6e6 elements: 5.9-7.2 ns each at 1 and at 2 threads (the
# CPU generator runs on one thread).
RANDOM_S_PER_ELEMENT = 6.5e-9
_VIEW_FIELD = GEOMETRY_FIELDS.index("view_ops")
_RANDOM_FIELD = GEOMETRY_FIELDS.index("random_elements")


def raw_geometry(geometry: NDArray[np.float64] | Sequence[Sequence[float]]) -> NDArray[np.float64]:
    """Operators' raw geometry rows as an array of ``GEOMETRY_FIELDS`` columns; rows of
    another width (a step traced by an older version, kept in a cache) are refused, never
    read as rows of this version."""
    g = np.asarray(geometry, dtype=np.float64)
    if g.size and (g.ndim != 2 or g.shape[1] != len(GEOMETRY_FIELDS)):
        raise InvalidInputError(
            f"operator geometry rows of shape {g.shape}; version {GEOMETRY_VERSION} has "
            f"{len(GEOMETRY_FIELDS)} fields (trace the step again)",
            field="geometry",
            value=g.shape[-1],
        )
    return g.reshape(-1, len(GEOMETRY_FIELDS))


def eager_extras(
    geometry: NDArray[np.float64] | Sequence[Sequence[float]] | None,
    counts: NDArray[np.float64] | None = None,
) -> tuple[float, float]:
    """View operators and random numbers drawn in a step, from its operators' raw geometry
    rows (``opgraph.GEOMETRY_FIELDS``; rows of an older, shorter version count none) and
    their occurrence counts (one each where None)."""
    if geometry is None:
        return 0.0, 0.0
    g = np.asarray(geometry, dtype=np.float64)
    if g.ndim != 2 or g.shape[1] < len(GEOMETRY_FIELDS) or g.shape[0] == 0:
        return 0.0, 0.0
    weights = np.ones(g.shape[0]) if counts is None else np.asarray(counts, dtype=np.float64)
    return float(weights @ g[:, _VIEW_FIELD]), float(weights @ g[:, _RANDOM_FIELD])


def eager_operators(total: float, rnn_ops: int, rnn_calls: int) -> float:
    """Operators the eager step dispatches from Python: a recurrent layer's loop counts
    as one operator forward and one backward, whatever its cells' operators."""
    return max(0.0, total - rnn_ops) + 2.0 * rnn_calls
