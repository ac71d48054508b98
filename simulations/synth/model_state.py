"""What every generator's ``from_state`` shares: one way to say a state does not fit.

A model file's state is tensors and lists checked against its metadata; a key missing,
a tensor of the wrong shape or a network that will not load surfaces as one of a few
Python errors. :func:`state_errors` turns each into :class:`InvalidInputError` naming the
model and the field ``state``, which :func:`~simulations.synth.model_files.load_model`
then ties to the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from knowledge_base.errors import InvalidInputError

__all__ = ["state_errors"]

_STATE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, RuntimeError, IndexError)


@contextmanager
def state_errors(model: str) -> Iterator[None]:
    """Inside, a malformed state raises :class:`InvalidInputError` for ``model``."""
    try:
        yield
    except _STATE_ERRORS as error:
        raise InvalidInputError(
            f"the {model}'s state does not match its metadata ({str(error)[:300]})",
            field="state",
        ) from error
