"""The memory hybrid: its base's live term is the live peak keeping the gradients or the
activations' alone, its state weight held at 1; it takes no GNN inputs, so it is
refitted and validated alone."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tools.estimators.cpu.bundle import (
    GNN_COLUMNS,
    MEMORY_STATE_WEIGHT,
    TARGETS,
    EstimatorBundle,
    example_inputs,
    fit_linear_base,
    split_validation,
)
from tools.estimators.cpu.dataset import GRAPH_FORMAT, Example, GraphStore
from tools.estimators.cpu.features import FeatureInput, analytic_terms, memory_terms
from tools.estimators.cpu.memory_refit import fit_memory_hybrid, refit_memory
from tools.profiling.analytic import cpu_spec

_MIB = 2.0**20


def _item(**summary: float) -> FeatureInput:
    return FeatureInput(
        family=None,
        params={},
        batch_size=8,
        optimizer="sgd",
        hardware=cpu_spec("AMD EPYC", 2),
        summary=summary,
    )


def test_the_memory_base_takes_the_live_peak_with_or_without_the_kept_gradients() -> None:
    item = _item(
        parameter_bytes=64 * _MIB, peak_live_bytes=65 * _MIB, peak_activation_bytes=9 * _MIB
    )
    assert memory_terms(item, "activations")["live"] == pytest.approx(9.0)
    assert memory_terms(item, "live")["live"] == pytest.approx(65.0)
    both = memory_terms(item, "both")
    assert (both["live"], both["activations"]) == (pytest.approx(65.0), pytest.approx(9.0))
    # the state holds the gradients once: weights, gradients, momentum
    assert memory_terms(item)["state"] == pytest.approx(3 * 64)
    assert analytic_terms(item, "activations")["peak_memory_mb"][-1] == pytest.approx(9.0)
    assert analytic_terms(item)["peak_memory_mb"][-1] == pytest.approx(memory_terms(item)["live"])


def test_the_memory_base_holds_the_state_at_one_and_fits_the_rest(
    small_examples: list[Example], graph_store: GraphStore
) -> None:
    items = example_inputs(small_examples, graph_store)
    weights = fit_linear_base(small_examples, items)
    assert MEMORY_STATE_WEIGHT is not None
    assert weights["peak_memory_mb"][1] == MEMORY_STATE_WEIGHT
    assert weights["peak_memory_mb"][0] > 0  # the process baseline, fitted
    assert all(w >= 0 for w in weights["peak_memory_mb"])


def test_stored_graphs_are_named_by_their_format(graph_store: GraphStore) -> None:
    assert graph_store.path("mlp-0123").name == f"mlp-0123.g{GRAPH_FORMAT}.npz"


def test_the_memory_hybrid_takes_no_gnn_inputs_where_the_time_hybrid_does(
    tiny_bundle: EstimatorBundle, small_examples: list[Example], graph_store: GraphStore
) -> None:
    time_inputs = tiny_bundle.meta.hybrid_inputs("iteration_s")
    memory_inputs = tiny_bundle.meta.hybrid_inputs("peak_memory_mb")
    assert tuple(time_inputs[-2:]) == GNN_COLUMNS
    assert not set(GNN_COLUMNS) & set(memory_inputs)
    assert "g_peak_activation_bytes" in memory_inputs
    assert tiny_bundle.hybrid["peak_memory_mb"].names == memory_inputs
    items = example_inputs(small_examples[:4], graph_store)
    graphs = [graph_store.get(e.key) for e in small_examples[:4]]
    q = tiny_bundle.predict(items, graphs, kinds=("hybrid",))["peak_memory_mb"]["hybrid"]
    assert q.quantiles.shape == (4, 3) and np.all(np.diff(q.quantiles, axis=1) >= 0)


def test_refitting_memory_changes_the_memory_hybrid_and_nothing_of_time(
    tiny_bundle: EstimatorBundle, small_examples: list[Example], graph_store: GraphStore
) -> None:
    bundle = copy.deepcopy(tiny_bundle)
    bundle.hybrid["peak_memory_mb"] = fit_memory_hybrid(
        small_examples[:10], graph_store, xgb_rounds=3
    ).model  # a poor memory hybrid the refit must replace
    items = example_inputs(small_examples, graph_store)
    graphs = [graph_store.get(e.key) for e in small_examples]
    before = bundle.predict(items, graphs)
    old_blackbox = bundle.meta.validation["peak_memory_mb"]["blackbox"]
    figures = refit_memory(bundle, small_examples, graph_store, xgb_rounds=15)
    after = bundle.predict(items, graphs)
    for kind in ("blackbox", "whitebox", "hybrid"):
        np.testing.assert_array_equal(
            after["iteration_s"][kind].quantiles, before["iteration_s"][kind].quantiles
        )
    assert not np.allclose(
        after["peak_memory_mb"]["hybrid"].quantiles, before["peak_memory_mb"]["hybrid"].quantiles
    )
    # validated on every new-family fold and on the in-family split, as train_bundle does
    held = sum(1 for e in small_examples for f in bundle.meta.validation_folds if e.family in f)
    scores = bundle.meta.validation["peak_memory_mb"]["hybrid"]
    assert scores.rows == held and figures["new_family_mape"] == pytest.approx(scores.mape)
    _, validation = split_validation(small_examples, 0.2, 0)
    assert bundle.meta.in_family is not None
    assert bundle.meta.in_family.validation["peak_memory_mb"]["hybrid"].rows == len(validation)
    assert bundle.meta.validation["peak_memory_mb"]["blackbox"] == old_blackbox
    assert {r.name for r in bundle.meta.ranking["peak_memory_mb"]} == {
        "blackbox",
        "whitebox",
        "hybrid",
    }
    assert bundle.meta.selected["peak_memory_mb"] == bundle.meta.ranking["peak_memory_mb"][0].name
    assert set(bundle.meta.hybrid_base) == set(TARGETS)


def test_refitting_memory_on_other_data_than_the_bundle_saw_is_refused(
    tiny_bundle: EstimatorBundle, small_examples: list[Example], graph_store: GraphStore
) -> None:
    bundle = copy.deepcopy(tiny_bundle)
    with pytest.raises(ValueError, match="not the data it was trained on"):
        refit_memory(bundle, small_examples[:-3], graph_store, xgb_rounds=5)


def test_a_grown_dataset_is_refitted_only_when_asked_and_its_new_families_held_out(
    tiny_bundle: EstimatorBundle, small_examples: list[Example], graph_store: GraphStore
) -> None:
    # as if the bundle had been trained before the "lstm" rows were appended
    bundle = copy.deepcopy(tiny_bundle)
    older = [e for e in small_examples if e.family != "lstm"]
    bundle.meta.training_rows = len(split_validation(older, 0.2, 0)[0])
    bundle.meta.validation_folds = [f for f in bundle.meta.validation_folds if "lstm" not in f]
    kept_folds = list(bundle.meta.validation_folds)
    with pytest.raises(ValueError, match="grown=True"):
        refit_memory(copy.deepcopy(bundle), small_examples, graph_store, xgb_rounds=5)
    figures = refit_memory(bundle, small_examples, graph_store, xgb_rounds=5, grown=True)
    assert bundle.meta.validation_folds == [*kept_folds, ["lstm"]]
    assert bundle.meta.training_rows == len(split_validation(older, 0.2, 0)[0])  # time's
    last = len(bundle.meta.validation_folds) - 1
    lstm = [e for e in small_examples if e.family == "lstm"]
    assert figures[f"fold_{last}"] > 0
    assert bundle.meta.validation["peak_memory_mb"]["hybrid"].rows == sum(
        1 for e in small_examples for f in bundle.meta.validation_folds if e.family in f
    )
    assert len(lstm) <= bundle.meta.validation["peak_memory_mb"]["hybrid"].rows
    # a dataset that lost rows is never "grown"
    shrunk = copy.deepcopy(tiny_bundle)
    with pytest.raises(ValueError, match="not the data it was trained on"):
        refit_memory(shrunk, small_examples[:-3], graph_store, xgb_rounds=5, grown=True)
