"""Training a bundle on a slice of the committed dataset, saving it, registering it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from knowledge_base.records import EstimatorStatus
from knowledge_base.store import KnowledgeBase
from tools.estimators.dnn.bundle import KINDS, TARGETS, EstimatorBundle, example_inputs
from tools.estimators.dnn.dataset import Example, GraphStore, noise_floor
from tools.estimators.dnn.service import TARGET_IDS, register


def test_every_kind_predicts_ordered_quantiles_for_both_targets(
    tiny_bundle: EstimatorBundle, small_examples: list[Example], graph_store: GraphStore
) -> None:
    items = example_inputs(small_examples[:6], graph_store)
    graphs = [graph_store.get(e.key) for e in small_examples[:6]]
    predicted = tiny_bundle.predict(items, graphs)
    for target in TARGETS:
        assert set(predicted[target]) == set(KINDS)
        for prediction in predicted[target].values():
            q = prediction.quantiles
            assert q.shape == (6, 3) and np.all(q > 0)
            assert np.all(q[:, 0] <= q[:, 1]) and np.all(q[:, 1] <= q[:, 2])


def test_validation_selects_one_kind_per_target_and_records_the_domain(
    tiny_bundle: EstimatorBundle,
) -> None:
    meta = tiny_bundle.meta
    assert set(meta.selected) == set(TARGETS)
    assert all(meta.selected[t] == meta.ranking[t][0].name for t in TARGETS)
    assert meta.validation_rows > 0 and meta.training_rows > meta.validation_rows
    assert meta.domain is not None and set(meta.domain.families) == {"mlp", "dlrm", "lstm"}


def test_a_saved_bundle_predicts_the_same(
    tiny_bundle: EstimatorBundle,
    small_examples: list[Example],
    graph_store: GraphStore,
    tmp_path: Path,
) -> None:
    tiny_bundle.save(tmp_path)
    loaded = EstimatorBundle.load(tmp_path)
    items = example_inputs(small_examples[:3], graph_store)
    graphs = [graph_store.get(e.key) for e in small_examples[:3]]
    before, after = tiny_bundle.predict(items, graphs), loaded.predict(items, graphs)
    for target in TARGETS:
        for kind in KINDS:
            np.testing.assert_allclose(
                after[target][kind].quantiles, before[target][kind].quantiles, rtol=1e-5
            )


async def test_registering_records_metrics_and_promotes_the_selected(
    tiny_bundle: EstimatorBundle, kb: KnowledgeBase, tmp_path: Path
) -> None:
    tiny_bundle.save(tmp_path)
    ids = await register(kb, tiny_bundle, tmp_path)
    assert len(ids) == len(KINDS) * len(TARGETS)
    for target, kind in tiny_bundle.meta.selected.items():
        promoted = await kb.promoted_estimator(TARGET_IDS[target])
        assert promoted is not None and f"-{kind}-" in promoted.id
        assert {"mape", "under_rate", "safety_factor"} <= set(promoted.validation)
    again = await register(kb, tiny_bundle, tmp_path)
    assert again == ids
    every = await kb.list_estimators()
    assert len(every) == len(ids) + 1  # and the planner's GPU roofline
    assert sum(r.status is EstimatorStatus.PROMOTED for r in every) == len(TARGETS) + 1


def test_the_noise_floor_compares_repeats_of_one_configuration(
    small_examples: list[Example],
) -> None:
    first = small_examples[0]
    again = dataclasses.replace(first, repeat=1, iteration_s=first.iteration_s * 1.1)
    floor = noise_floor([first, again])
    assert floor["repeated_configs"] == 1
    assert 4 < floor["time_mape_pct"] < 6
