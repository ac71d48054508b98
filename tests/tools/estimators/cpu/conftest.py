"""Fixtures of the DNN estimator tests: one thread, a slice of the committed dataset,
its op graphs, and a bundle trained on it in seconds (accuracy is not the point here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tools.estimators.cpu.bundle import EstimatorBundle, train_bundle
from tools.estimators.cpu.dataset import Example, GraphStore, load_examples


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> None:
    torch.set_num_threads(1)


REPO = Path(__file__).resolve().parents[4]
DATASET = REPO / "data" / "dnn_profiles" / "cpu_sweep.jsonl"
SMALL_FAMILIES = ("mlp", "dlrm", "lstm")


@pytest.fixture(scope="session")
def graph_store(tmp_path_factory: pytest.TempPathFactory) -> GraphStore:
    return GraphStore(tmp_path_factory.mktemp("graphs"))


@pytest.fixture(scope="session")
def small_examples(graph_store: GraphStore) -> list[Example]:
    """A slice of the committed dataset: the families whose graphs trace fastest."""
    examples = [e for e in load_examples(DATASET) if e.family in SMALL_FAMILIES]
    chosen: list[Example] = []
    for name in SMALL_FAMILIES:
        chosen += [e for e in examples if e.family == name][:9]
    graph_store.build(chosen)
    return chosen


@pytest.fixture(scope="session")
def tiny_bundle(small_examples: list[Example], graph_store: GraphStore) -> EstimatorBundle:
    return train_bundle(small_examples, graph_store, gnn_epochs=2, xgb_rounds=15)
