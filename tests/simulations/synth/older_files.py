"""Sequence model files as an earlier build wrote them: an option left out of the
metadata, state entries left out, and a network without the parts that option added."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from simulations.synth.model_files import load_model, save_model
from simulations.synth.sequence import SequenceModel
from simulations.synth.sequence_network import _Network


def older_file(
    sequence: SequenceModel,
    path: Path,
    *,
    option: str,
    state: tuple[str, ...] = (),
    **network: Any,
) -> SequenceModel:
    """``sequence`` saved to ``path`` without ``option`` and the ``state`` entries, its
    network replaced by a fresh one built with ``network`` (``repeat=False``...), loaded."""
    save_model(sequence, path)
    payload = torch.load(path, weights_only=True)
    del payload["metadata"]["options"][option]
    for name in state:
        del payload["state"][name]
    options = sequence.metadata.options
    plain = _Network(sequence.vocab, int(options["hidden"]), int(options["head_hidden"]), **network)
    payload["state"]["network"] = plain.state_dict()
    torch.save(payload, path)
    old = load_model(path)
    assert isinstance(old, SequenceModel)
    return old
