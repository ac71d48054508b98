"""Training a bundle on a slice of the committed dataset, saving it, registering it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from knowledge_base.records import EstimatorStatus
from knowledge_base.store import KnowledgeBase
from tools.estimators.dnn.bundle import (
    KINDS,
    TARGETS,
    EstimatorBundle,
    example_inputs,
    family_folds,
)
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
    assert meta.domain is not None and set(meta.domain.families) == {"mlp", "dlrm", "lstm"}
    # Headline: new families (each family predicted by kinds refitted without it).
    assert sorted(f for fold in meta.validation_folds for f in fold) == ["dlrm", "lstm", "mlp"]
    assert meta.validation_method.startswith("new families")
    assert meta.validation_rows == 27  # every training row, out of its family's fold
    # In family: a random 20% of the configurations, for rows of the trained families.
    assert meta.in_family is not None and set(meta.in_family.selected) == set(TARGETS)
    assert 0 < meta.in_family.rows < meta.training_rows
    for target in TARGETS:
        assert tiny_bundle.selected_kind(target, "mlp") == meta.in_family.selected[target]
        assert tiny_bundle.selected_kind(target, None) == meta.selected[target]
        assert tiny_bundle.selected_kind(target, "vgg") == meta.selected[target]


def test_rows_are_calibrated_by_their_regime(
    tiny_bundle: EstimatorBundle, small_examples: list[Example], graph_store: GraphStore
) -> None:
    example = small_examples[0]
    items = example_inputs([example], graph_store)
    graph = [graph_store.get(example.key)]
    seen = tiny_bundle.predict(items, graph)
    items[0].family = None  # the same configuration, as a user's own model
    new = tiny_bundle.predict(items, graph)
    meta = tiny_bundle.meta
    assert meta.in_family is not None
    for target in TARGETS:
        for kind in ("whitebox", "hybrid"):  # the black-box's inputs include the family
            s, n = seen[target][kind].quantiles[0], new[target][kind].quantiles[0]
            assert s[1] == pytest.approx(n[1])  # the p50 is the model's, not the regime's
            widen_new = meta.calibration[target][kind].widen_log
            widen_seen = meta.in_family.calibration[target][kind].widen_log
            if widen_new != widen_seen:
                assert not np.allclose(s, n)


def test_family_folds_keep_linked_families_together_and_balance_rows(
    small_examples: list[Example],
) -> None:
    rows = [
        dataclasses.replace(small_examples[0], family=name)
        for name, count in (
            ("resnet", 5),
            ("resnet_bottleneck", 5),
            ("vit", 4),
            ("transformer", 4),
            ("mlp", 6),
            ("lstm", 3),
        )
        for _ in range(count)
    ]
    folds = family_folds(rows, 3)
    assert len(folds) == 3 and sorted(f for fold in folds for f in fold) == sorted(
        {e.family for e in rows}
    )
    for linked in (("resnet", "resnet_bottleneck"), ("transformer", "vit")):
        assert any(set(linked) <= set(fold) for fold in folds)
    assert family_folds([e for e in rows if e.family in ("resnet", "resnet_bottleneck")]) == []
    assert len(family_folds(rows, 2)) == 2


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
