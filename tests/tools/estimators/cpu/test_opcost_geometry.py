"""The per-operator CPU model with operator geometry (feature version 2) and the guard
on model files: a file of another feature or geometry version is refused, not misread.

Synthetic timings with a known law in which a 1-D convolution costs twice a 2-D one of
the same FLOPs and bytes: only the geometry columns can tell them apart.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_base.errors import InvalidInputError
from tools.estimators.cpu.opcost import (
    FEATURE_SETS,
    OpCostModel,
    fit_opcost,
    item_geometry,
    node_rows,
)
from tools.profiling.opgraph import GEOMETRY_FIELDS, GEOMETRY_VERSION


def _geometry(rank: int, channels: float) -> list[float]:
    # spatial_rank, kernel, stride, groups, channels in/out, out positions, rank, inner,
    # random numbers drawn, view operators
    return [float(rank), 9.0, 1.0, 1.0, channels, channels, 64.0, 2.0 + rank, 64.0, 0.0, 0.0]


def _conv_ops(rng: random.Random, n: int) -> tuple[list[list[Any]], list[list[float]]]:
    ops, geometry = [], []
    for _ in range(n):
        rank = rng.choice((1, 2))
        flops = 10 ** rng.uniform(6, 9)
        moved = 10 ** rng.uniform(4, 6)
        t = (flops / 2e10 + moved / 5e9) * (2.0 if rank == 1 else 1.0) + 3e-6
        ops.append(["convolution", "conv", False, flops, moved, moved, 0.0, 1, t, t, t, t])
        geometry.append(_geometry(rank, rng.choice((8.0, 32.0))))
    return ops, geometry


def _items(seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    lines: dict[str, dict[str, Any]] = {}
    for fam in ("resnet", "vgg", "lstm", "mlp", "dlrm"):
        for k in range(8):
            ops, geometry = _conv_ops(rng, rng.randrange(10, 40))
            item_id = f"zoo-{fam}-{k}"
            step = 1.2 * sum(o[8] for o in ops) + 1e-5 * len(ops)
            items.append(
                {
                    "id": item_id,
                    "kind": "zoo",
                    "family": fam,
                    "threads": 1 + k % 2,
                    "optimizer": "sgd",
                    "parameters": 1000,
                    "measured_step_s": step * math.exp(rng.gauss(0, 0.02)),
                    "ops": ops,
                }
            )
            lines[item_id] = {"geometry_version": GEOMETRY_VERSION, "geometry": geometry}
    return items, lines


@pytest.fixture(scope="module")
def fitted() -> tuple[OpCostModel, OpCostModel]:
    items, lines = _items()
    flat = fit_opcost(items, rounds=60)
    shaped = fit_opcost(items, rounds=60, geometry=lines)
    return flat, shaped


def _step(rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ops = [["convolution", "conv", False, 4e8, 2e5, 2e5, 0.0, 1, 0, 0, 0, 0]] * 6
    x, counts = node_rows(ops)
    return x, counts, np.array([_geometry(rank, 32.0)] * 6)


def test_a_1d_and_a_2d_convolution_of_equal_flops_get_different_times_with_geometry(
    fitted: tuple[OpCostModel, OpCostModel],
) -> None:
    flat, shaped = fitted
    assert (flat.feature_version, shaped.feature_version) == (1, 2)
    assert shaped.meta["features"] == list(FEATURE_SETS[2])
    kw: dict[str, Any] = {"threads": 1, "optimizer": "sgd", "parameters": 1000}
    x1, c1, g1 = _step(1)
    x2, c2, g2 = _step(2)
    one, two = (
        shaped.predict_s(x, c, **kw, geometry=g)[1] for x, c, g in ((x1, c1, g1), (x2, c2, g2))
    )
    assert one / two == pytest.approx(2.0, rel=0.25)
    # without geometry the two are the same operators
    assert flat.predict_s(x1, c1, **kw)[1] == pytest.approx(flat.predict_s(x2, c2, **kw)[1])
    assert shaped.meta["validation"]["all"]["mape"] < flat.meta["validation"]["all"]["mape"]


def test_a_geometry_model_refuses_operators_without_geometry(
    fitted: tuple[OpCostModel, OpCostModel],
) -> None:
    x, counts, _ = _step(1)
    with pytest.raises(InvalidInputError, match="geometry") as caught:
        fitted[1].predict_s(x, counts, threads=1, optimizer="sgd", parameters=1)
    assert caught.value.field == "geometry"


def _saved(model: OpCostModel, folder: Path, **changes: Any) -> Path:
    model.save(folder)
    body = json.loads((folder / "opcost.json").read_text())
    body["meta"].update(changes)
    (folder / "opcost.json").write_text(json.dumps(body))
    return folder


def test_a_model_file_of_another_feature_version_is_refused(
    fitted: tuple[OpCostModel, OpCostModel], tmp_path: Path
) -> None:
    folder = _saved(fitted[1], tmp_path, feature_version=3)
    with pytest.raises(InvalidInputError, match="feature version 3") as caught:
        OpCostModel.load(folder)
    assert caught.value.field == "feature_version"


def test_a_model_file_whose_columns_are_not_its_versions_is_refused(
    fitted: tuple[OpCostModel, OpCostModel], tmp_path: Path
) -> None:
    columns = [*FEATURE_SETS[1][:-1], "log_kernel", "threads"]
    with pytest.raises(InvalidInputError, match="feature columns") as caught:
        OpCostModel.load(_saved(fitted[0], tmp_path, features=columns))
    assert caught.value.field == "features"


def test_a_model_fitted_on_another_geometry_version_is_refused(
    fitted: tuple[OpCostModel, OpCostModel], tmp_path: Path
) -> None:
    folder = _saved(fitted[1], tmp_path, geometry_version=GEOMETRY_VERSION + 1)
    with pytest.raises(InvalidInputError, match="geometry version") as caught:
        OpCostModel.load(folder)
    assert caught.value.field == "geometry_version"


def test_a_file_written_before_versions_reads_as_version_1_and_predicts_the_same(
    fitted: tuple[OpCostModel, OpCostModel], tmp_path: Path
) -> None:
    flat = fitted[0]
    flat.save(tmp_path)
    body = json.loads((tmp_path / "opcost.json").read_text())
    del body["meta"]["feature_version"]
    (tmp_path / "opcost.json").write_text(json.dumps(body))
    again = OpCostModel.load(tmp_path)
    x, counts, _ = _step(2)
    kw: dict[str, Any] = {"threads": 2, "optimizer": "sgd", "parameters": 10}
    assert again.feature_version == 1
    assert again.predict_s(x, counts, **kw) == pytest.approx(flat.predict_s(x, counts, **kw))


def test_geometry_rows_of_another_version_or_length_are_refused() -> None:
    item = {"id": "zoo-a", "ops": [["mm"] * 12]}
    row = [0.0] * len(GEOMETRY_FIELDS)
    old = {"zoo-a": {"geometry_version": GEOMETRY_VERSION - 1, "geometry": [row]}}
    with pytest.raises(InvalidInputError, match="version"):
        item_geometry(old, item)
    short = {"zoo-a": {"geometry_version": GEOMETRY_VERSION, "geometry": []}}
    with pytest.raises(InvalidInputError, match="0 geometry rows"):
        item_geometry(short, item)
    with pytest.raises(InvalidInputError, match="opsweep --geometry"):
        item_geometry({}, item)
