"""NeuSight's end-to-end measurements: Hugging Face models timed whole on each GPU.

``e2e/GPU/MODEL-MODE-SEQ-BATCH.json`` holds ``e2e_latency`` (ms): ``train`` is one
forward and backward without the optimizer step, ``inf`` a forward pass. The models are
built from ``models/MODEL.json`` with ``transformers`` (random weights, on the meta
device, nothing downloaded) and traced as this project traces any model file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from tools.profiling.zoo.registry import TrainingTask

__all__ = ["E2ERun", "hf_task", "load_e2e_runs"]

_NAME = re.compile(r"^(?P<model>.+)-(?P<mode>train|inf)-(?P<seq>\d+)-(?P<batch>\d+)$")


@dataclass(frozen=True, slots=True)
class E2ERun:
    gpu: str
    model: str
    train: bool
    seq: int
    batch: int
    latency_ms: float
    # The forward part of the run (``fw_latency``; the whole run for inference).
    forward_ms: float = 0.0

    @property
    def key(self) -> tuple[str, bool, int, int]:
        return (self.model, self.train, self.seq, self.batch)


def load_e2e_runs(root: Path, gpus: tuple[str, ...]) -> list[E2ERun]:
    """Single-GPU, unfused runs on ``gpus`` whose model config is in ``models/``."""
    runs = []
    for gpu in gpus:
        for path in sorted((root / "e2e" / gpu).glob("*.json")):
            match = _NAME.match(path.stem)
            if match is None or not (root / "models" / f"{match['model']}.json").exists():
                continue  # fused, multi-GPU (dp4/tp4/pp4) or unknown runs
            if match["model"].startswith("switch"):
                continue  # mixture-of-experts routing: data-dependent, not traced here
            document = json.loads(path.read_text(encoding="utf-8"))
            runs.append(
                E2ERun(
                    gpu,
                    match["model"],
                    match["mode"] == "train",
                    int(match["seq"]),
                    int(match["batch"]),
                    float(document["e2e_latency"]),
                    float(document.get("fw_latency") or document["e2e_latency"]),
                )
            )
    return runs


def _lm_loss(output: object, targets: Tensor) -> Tensor:
    logits = getattr(output, "logits", None)
    if logits is None:
        logits = getattr(output, "prediction_logits", None)
    if not isinstance(logits, Tensor):
        raise TypeError(f"no logits in {type(output).__name__}")
    return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def hf_task(root: Path, model: str, seq: int, batch: int) -> TrainingTask:
    """The model of ``models/MODEL.json`` on the meta device with a batch of token ids."""
    import transformers

    config_doc = json.loads((root / "models" / f"{model}.json").read_text(encoding="utf-8"))
    config = transformers.AutoConfig.for_model(**config_doc)
    with torch.device("meta"):
        if config.model_type == "bert":
            module = transformers.BertForPreTraining._from_config(  # type: ignore[no-untyped-call]
                config, attn_implementation="eager"
            )
        else:
            module = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                config, attn_implementation="eager"
            )
    ids = torch.empty(batch, seq, dtype=torch.long, device="meta")
    return TrainingTask(module, (ids,), ids, criterion=_lm_loss)
