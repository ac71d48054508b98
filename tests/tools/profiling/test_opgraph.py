"""The op graph of a training step: FLOPs, bytes, phases, edges, memory totals."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tools.profiling.analytic import (
    analytic_memory_mb,
    analytic_time_s,
    cpu_spec,
    memory_terms_mb,
    time_terms_s,
)
from tools.profiling.opgraph import category_of, op_graph
from tools.profiling.zoo import family
from tools.profiling.zoo.registry import TrainingTask


def _mlp_task(batch: int = 8) -> TrainingTask:
    with torch.device("meta"):
        return family("mlp").task(
            {"depth": 2, "width": 64, "features": 32, "num_classes": 10}, batch
        )


def test_matrix_multiply_flops_of_forward_and_backward_are_exact() -> None:
    graph = op_graph(_mlp_task(8))
    layers = [(32, 64), (64, 64), (64, 10)]
    forward = sum(2 * 8 * i * o for i, o in layers)
    # weight gradients for every layer, input gradients for all but the first
    backward = forward + sum(2 * 8 * i * o for i, o in layers[1:])
    summary = graph.summary()
    assert summary["forward_flops"] == forward
    assert summary["backward_flops"] == backward


def test_sizes_come_from_shapes_and_edges_follow_data_flow() -> None:
    graph = op_graph(_mlp_task(8))
    params = 32 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert graph.parameters == params and graph.parameter_bytes == 4 * params
    assert graph.batch_bytes == 8 * 32 * 4 + 8 * 8  # float inputs, int64 targets
    assert graph.saved_activation_bytes > 0 and graph.peak_live_bytes > 0
    assert all(src < dst for src, dst in graph.edges)
    assert any(node.backward for node in graph.nodes) and not graph.nodes[0].backward


def test_a_depthwise_convolution_backward_costs_twice_its_forward() -> None:
    model = nn.Sequential(
        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Flatten(), nn.Linear(8 * 64, 2)
    )
    task = TrainingTask(model, (torch.randn(2, 8, 8, 8),), torch.randint(0, 2, (2,)))
    graph = op_graph(task)
    conv = [n for n in graph.nodes if n.category == "conv"]
    forward = next(n for n in conv if not n.backward)
    backward = next(n for n in conv if n.backward)
    assert forward.flops == 2 * 2 * 8 * 64 * 9
    assert backward.flops == forward.flops  # the input needs no gradient: weights only


def test_an_lstm_is_one_cpu_kernel_per_layer_with_its_flops() -> None:
    with torch.device("meta"):
        task = family("lstm").task({"depth": 2, "width": 32, "seq_len": 8, "vocab": 100}, 4)
    graph = op_graph(task)
    rnn = [n for n in graph.nodes if n.category == "rnn"]
    assert len(rnn) == 4  # two layers, forward and backward
    assert all(n.flops > 0 for n in rnn)
    assert len(graph.nodes) < 60


def test_categories_group_operators_by_what_they_do() -> None:
    assert category_of("convolution_backward") == "conv"
    assert category_of("addmm") == "matmul"
    assert category_of("native_batch_norm") == "norm"
    assert category_of("threshold_backward") == "activation"


def test_the_analytic_models_grow_with_the_batch_and_the_optimizer() -> None:
    small, large = op_graph(_mlp_task(8)).summary(), op_graph(_mlp_task(64)).summary()
    spec = cpu_spec("AMD EPYC", 1)
    assert analytic_time_s(large, spec, "sgd") > analytic_time_s(small, spec, "sgd")
    assert analytic_memory_mb(small, "adam") > analytic_memory_mb(small, "sgd")
    two = cpu_spec("AMD EPYC", 2)
    assert analytic_time_s(large, two, "sgd") < analytic_time_s(large, spec, "sgd")


def test_the_analytic_estimates_are_the_sums_of_their_terms() -> None:
    summary = op_graph(_mlp_task(32)).summary()
    spec = cpu_spec("AMD EPYC", 2)
    terms = time_terms_s(summary, spec, "adam")
    assert set(terms) == {"compute", "memory", "update", "dispatch"}
    assert all(v > 0 for v in terms.values())
    assert sum(terms.values()) == pytest.approx(analytic_time_s(summary, spec, "adam"))
    memory = memory_terms_mb(summary, "adam")
    assert memory["state"] == pytest.approx(summary["parameter_bytes"] * 4 / 2**20)
    expected = memory["state"] + memory["buffers"] + memory["batch"]
    expected += max(memory["saved"], memory["live"])
    assert analytic_memory_mb(summary, "adam") == pytest.approx(expected)


def _wide_mlp_task(batch: int) -> TrainingTask:
    with torch.device("meta"):
        return family("mlp").task(
            {"depth": 2, "width": 512, "features": 512, "num_classes": 10}, batch
        )


def test_the_activations_live_peak_leaves_out_the_gradients_the_live_peak_keeps() -> None:
    # Large weights, a small batch: the step's gradients outlive every activation.
    small = op_graph(_wide_mlp_task(2))
    assert small.peak_live_bytes >= small.parameter_bytes  # every gradient kept to the end
    # what is left: the activations and one gradient at a time (the largest, 1 MiB)
    assert small.peak_activation_bytes < 0.6 * small.parameter_bytes
    assert small.summary()["peak_activation_bytes"] == small.peak_activation_bytes
    # The activations grow with the batch where the gradients do not.
    large = op_graph(_wide_mlp_task(256))
    growth = large.peak_activation_bytes - small.peak_activation_bytes
    assert growth > large.peak_live_bytes - small.peak_live_bytes > 0
    assert growth > 0.5 * 254 * 4 * (512 + 512 + 10)  # about a sample's layer outputs each
    for graph in (small, large):
        assert 0 < graph.peak_activation_bytes <= graph.peak_live_bytes
