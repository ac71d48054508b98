"""The in-house GraphSAGE layer and pools answer as torch-geometric's did, so the shipped
white-box models (trained with ``SAGEConv``) load and predict unchanged without it."""

from __future__ import annotations

import pytest
import torch

from tools.estimators.cpu.gnn import MeanSage, _max_pool, _mean_pool, _sum_pool

geometric = pytest.importorskip("torch_geometric.nn")


def _graph(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(40, 8, generator=generator)
    edges = torch.randint(0, 40, (2, 90), generator=generator)
    batch = torch.sort(torch.randint(0, 3, (40,), generator=generator)).values
    return x, edges, batch


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_sage_matches_sageconv_with_the_same_weights(seed: int) -> None:
    x, edges, _ = _graph(seed)
    reference = geometric.SAGEConv(8, 8)
    ours = MeanSage(8)
    ours.load_state_dict(reference.state_dict())  # the same parameter names

    assert torch.allclose(ours(x, edges), reference(x, edges), atol=1e-5)


def test_a_node_nothing_reaches_keeps_only_its_own_term() -> None:
    ours = MeanSage(4)
    x = torch.randn(3, 4)
    out = ours(x, torch.tensor([[0], [1]]))

    assert torch.allclose(out[2], ours.lin_l(torch.zeros(4)) + ours.lin_r(x[2]))


@pytest.mark.parametrize("seed", [0, 1])
def test_pools_match_torch_geometric(seed: int) -> None:
    x, _, batch = _graph(seed)
    graphs = int(batch.max()) + 1

    assert torch.allclose(_sum_pool(x, batch, graphs), geometric.global_add_pool(x, batch))
    assert torch.allclose(_mean_pool(x, batch, graphs), geometric.global_mean_pool(x, batch))
    assert torch.allclose(_max_pool(x, batch, graphs), geometric.global_max_pool(x, batch))
