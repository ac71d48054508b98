"""The shipped bundle and the shipped dataset agree: rows appended to the dataset (the
language-model families) never make a user's first estimate train a bundle, and the
memory hybrid the repository ships was validated on every family the dataset holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.estimators.cpu import answer
from tools.estimators.cpu.bundle import split_validation
from tools.estimators.cpu.dataset import load_examples

REPO = Path(__file__).resolve().parents[4]
DATASET = REPO / "data" / "dnn_profiles" / "cpu_sweep.jsonl"


def _no_training(*args: object, **kwargs: object) -> None:
    raise AssertionError("a bundle was trained")


def test_a_fresh_home_answers_from_the_shipped_bundle_without_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(answer, "train_bundle", _no_training)
    monkeypatch.setattr(answer, "train_to", _no_training)
    bundle, folder = answer.load_bundle(tmp_path)
    assert folder == answer.committed_models_dir()
    assert not (tmp_path / "dnn").exists()
    assert bundle.hybrid["peak_memory_mb"].names == bundle.meta.hybrid_inputs("peak_memory_mb")


def test_the_shipped_memory_hybrid_was_validated_on_every_family_of_the_dataset() -> None:
    examples = load_examples(DATASET)
    families = {e.family for e in examples}
    assert {"rnn_lm", "gpt"} <= families
    bundle, _ = answer.load_bundle(Path("/nonexistent-home"), train=False)
    held = {family for fold in bundle.meta.validation_folds for family in fold}
    assert held == families
    held_rows = sum(1 for e in examples if e.family in held)
    assert bundle.meta.validation["peak_memory_mb"]["hybrid"].rows == held_rows
    # the time estimators were not retrained: the bundle keeps their training count,
    # which the grown dataset's training split exceeds
    assert bundle.meta.training_rows <= len(split_validation(examples, 0.2, 0)[0])
