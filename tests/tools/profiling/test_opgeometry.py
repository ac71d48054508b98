"""Operator geometry (``opgraph.node_geometry``): what shapes say beyond FLOPs and bytes.

Real fake-tensor traces of small modules: the geometry must tell apart operators that
the FLOP and byte counts make identical (a 1-D and a 2-D convolution of the same
work), and carry kernel, stride, groups, channels and matrix-product sizes.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tools.profiling.opgraph import GEOMETRY_FIELDS, OpNode, op_graph
from tools.profiling.opsweep import geometry_rows
from tools.profiling.zoo.registry import TrainingTask


def _mse(out: Tensor, target: Tensor) -> Tensor:
    return nn.functional.mse_loss(out.flatten(1).mean(1), target)


def _nodes(model: nn.Module, x: Tensor) -> list[OpNode]:
    return op_graph(TrainingTask(model, (x,), torch.randn(x.shape[0]), criterion=_mse)).nodes


def _geo(node: OpNode) -> dict[str, float]:
    return dict(zip(GEOMETRY_FIELDS, node.geometry, strict=True))


def _first(nodes: list[OpNode], op: str, backward: bool = False) -> OpNode:
    return next(n for n in nodes if n.op == op and n.backward == backward)


def test_a_1d_and_a_2d_convolution_of_equal_flops_and_bytes_differ_in_geometry() -> None:
    # 8 -> 16 channels, 9 weights per filter, 64 output positions each: same FLOPs, same
    # input, output and parameter bytes
    one = _first(_nodes(nn.Conv1d(8, 16, 9, padding=4), torch.randn(2, 8, 64)), "convolution")
    two = _first(_nodes(nn.Conv2d(8, 16, 3, padding=1), torch.randn(2, 8, 8, 8)), "convolution")
    same = ("flops", "input_bytes", "output_bytes", "param_bytes", "category", "backward")
    assert all(getattr(one, f) == getattr(two, f) for f in same)
    assert one.geometry != two.geometry
    assert _geo(one)["spatial_rank"] == 1.0 and _geo(two)["spatial_rank"] == 2.0
    assert _geo(one)["kernel"] == _geo(two)["kernel"] == 9.0
    assert _geo(one)["out_spatial"] == _geo(two)["out_spatial"] == 64.0


def test_convolution_geometry_carries_kernel_stride_groups_and_channels_both_ways() -> None:
    nodes = _nodes(nn.Conv1d(4, 4, 80, stride=4, groups=4), torch.randn(2, 4, 8000))
    for backward in (False, True):
        op = "convolution_backward" if backward else "convolution"
        g = _geo(_first(nodes, op, backward))
        assert (g["kernel"], g["stride"], g["groups"]) == (80.0, 4.0, 4.0)
        assert (g["channels_in"], g["channels_out"]) == (4.0, 4.0)
        assert g["out_spatial"] == float((8000 - 80) // 4 + 1)


def test_a_1d_pooling_dispatched_as_2d_has_spatial_rank_one() -> None:
    model = nn.Sequential(nn.Conv1d(2, 6, 3), nn.MaxPool1d(2))
    g = _geo(_first(_nodes(model, torch.randn(2, 2, 100)), "max_pool2d_with_indices"))
    assert (g["spatial_rank"], g["kernel"], g["stride"], g["channels_in"]) == (1.0, 2.0, 2.0, 6.0)
    assert g["out_spatial"] == 49.0


def test_matrix_products_carry_m_k_n() -> None:
    g = _geo(_first(_nodes(nn.Linear(32, 48), torch.randn(5, 7, 32)), "addmm"))
    assert (g["out_spatial"], g["channels_in"], g["channels_out"]) == (35.0, 32.0, 48.0)
    assert g["spatial_rank"] == 0.0 and g["out_inner"] == 48.0


def test_stored_operator_rows_get_their_nodes_geometry_and_unmatched_rows_are_counted() -> None:
    nodes = _nodes(nn.Conv1d(8, 16, 9, padding=4), torch.randn(2, 8, 64))
    conv = _first(nodes, "convolution")
    row = [conv.op, conv.category, conv.backward, conv.flops, conv.input_bytes]
    row += [conv.output_bytes, conv.param_bytes, 1, 1e-4, 1e-4, 1e-4, 1e-4]
    stranger = ["mm", "matmul", False, 1.0, 2.0, 3.0, 0.0, 1, 1e-6, 1e-6, 1e-6, 1e-6]
    rows, unmatched, clashes = geometry_rows([row, stranger], nodes)
    assert rows[0] == list(conv.geometry)
    assert rows[1] == [0.0] * len(GEOMETRY_FIELDS) and unmatched == 1 and clashes == 0
