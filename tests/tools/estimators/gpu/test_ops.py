"""A traced training step as GPU kernels: classes, shapes, phases; Hugging Face models trace."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from knowledge_base.errors import InvalidInputError
from tools.estimators.gpu.ops import GpuKernels, kernels_by_operator, kernels_of
from tools.estimators.gpu.trace import trace_training_step
from tools.profiling.zoo.registry import TrainingTask


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8 * 8 * 8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)).flatten(1)
        return torch.softmax(self.fc(self.norm(h)), dim=-1)


def _task(batch: int = 4) -> TrainingTask:
    with torch.device("meta"):
        model = Tiny()
    x = torch.empty(batch, 3, 8, 8, device="meta")
    y = torch.empty(batch, dtype=torch.long, device="meta")
    return TrainingTask(model, (x,), y)


def test_training_step_has_each_class_with_its_shapes_and_a_backward() -> None:
    kernels = kernels_of(trace_training_step(_task(4)))
    linear = kernels.columns("linear")
    # forward addmm [4, 512] x [512, 10] and the two backward products
    assert (4, 10, 512) in zip(linear["M"], linear["N"], linear["K"], strict=True)
    assert len(linear["M"]) == 3
    conv = kernels.columns("conv")
    assert conv["Cin"][0] == 3 and conv["Cout"][0] == 8 and conv["Input"][0] == 8
    # the convolution's backward computes the weight gradient only (the input needs none)
    assert kernels.factor["conv"] == [1.0, 1.0] and kernels.backward["conv"] == [False, True]
    assert kernels.columns("ln")["H"][0] == 512
    assert len(kernels.factor["softmax"]) >= 2 and any(kernels.backward["elementwise"])


def test_batch_norm_backward_is_two_passes_like_layer_norm() -> None:
    # cuDNN's and PyTorch's own CUDA batch norm backward reduce over the input and the
    # incoming gradient, then read both again to write the input's gradient: twice the
    # forward pass (an H100 profile: 2.0-2.5x over five CNNs).
    with torch.device("meta"):
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten())
    x = torch.empty(4, 3, 8, 8, device="meta")
    task = TrainingTask(model, (x,), torch.empty(4, dtype=torch.long, device="meta"))
    kernels = kernels_of(trace_training_step(task))
    assert kernels.operators["native_batch_norm_backward"] == 1
    columns = kernels.columns("elementwise")
    largest = max(columns["N"])
    phases = zip(kernels.factor["elementwise"], kernels.backward["elementwise"], strict=True)
    factors = [
        (factor, backward)
        for (factor, backward), n in zip(phases, columns["N"], strict=True)
        if n == largest and factor != 1.0
    ]
    assert factors == [(2.0, True)]


def test_a_convolution_bias_gradient_is_a_reduction_of_its_own() -> None:
    # CUDA sums the incoming gradient for a convolution's bias in a kernel of its own
    # (an H100 profile of VGG-11: one aten::sum per layer with a bias).
    def traced(bias: bool) -> GpuKernels:
        with torch.device("meta"):
            model = nn.Sequential(nn.Conv2d(3, 8, 3, bias=bias), nn.Flatten())
        x = torch.empty(4, 3, 8, 8, device="meta")
        task = TrainingTask(model, (x,), torch.empty(4, dtype=torch.long, device="meta"))
        return kernels_of(trace_training_step(task))

    def reductions(kernels: GpuKernels) -> list[tuple[float, float, bool]]:
        columns = kernels.columns("elementwise")
        return [
            (n, inputs, backward)
            for n, inputs, backward in zip(
                columns["N"], columns["Inputs"], kernels.backward["elementwise"], strict=True
            )
            if n == 4 * 8 * 6 * 6  # the convolution's output (and incoming gradient)
        ]

    with_bias, without = reductions(traced(True)), reductions(traced(False))
    assert sorted(with_bias) == sorted([*without, (4 * 8 * 6 * 6, 1.0, True)])


def test_kernels_by_operator_are_the_same_kernels_apart() -> None:
    graph = trace_training_step(_task(4))
    whole = kernels_of(graph)
    apart = kernels_by_operator(graph)
    assert sum(k.count for k in apart.values()) == whole.count
    assert {name: k.operators[name] for name, k in apart.items()} == dict(whole.operators)
    assert apart["convolution"].columns("conv")["Cout"].tolist() == [8.0]
    assert apart["native_layer_norm_backward"].factor["ln"] == [2.0]
    for op_class in ("linear", "conv", "ln", "softmax", "elementwise"):
        assert sorted(f for k in apart.values() for f in k.factor[op_class]) == sorted(
            whole.factor[op_class]
        )


def test_forward_only_has_no_backward_kernels() -> None:
    kernels = kernels_of(trace_training_step(_task(4), backward=False))
    assert not any(flag for flags in kernels.backward.values() for flag in flags)
    assert len(kernels.factor["linear"]) == 1


def test_hugging_face_model_from_a_config_traces_without_memory() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=500,
    )
    with torch.device("meta"):
        model = transformers.BertForMaskedLM(config)
    ids = torch.empty(2, 16, dtype=torch.long, device="meta")

    def loss(output: object, targets: torch.Tensor) -> torch.Tensor:
        logits = output.logits  # type: ignore[attr-defined]
        return nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    kernels = kernels_of(trace_training_step(TrainingTask(model, (ids,), ids, criterion=loss)))
    assert len(kernels.factor["bmm"]) >= 2 * 2  # two attention products per layer
    assert len(kernels.factor["ln"]) > 0 and kernels.operators["embedding"] >= 1


def test_model_that_does_not_trace_is_an_error_naming_it() -> None:
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    task = TrainingTask(
        Broken(),
        (torch.empty(2, 3, device="meta"),),
        torch.empty(2, dtype=torch.long, device="meta"),
    )
    with pytest.raises(InvalidInputError, match="Broken"):
        trace_training_step(task)


def test_a_recurrent_model_counts_no_host_operators() -> None:
    """cuDNN runs a recurrent layer as one call; the trace unrolls it."""
    from torch import nn

    from tools.estimators.gpu.ops import kernels_of
    from tools.estimators.gpu.trace import trace_training_step
    from tools.profiling.zoo.registry import TrainingTask

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 8, batch_first=True)
            self.head = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.gru(x)[0][:, -1])

    recurrent = kernels_of(
        trace_training_step(TrainingTask(Tagger(), (torch.randn(2, 5, 8),), torch.tensor([0, 1])))
    )
    assert recurrent.recurrent and recurrent.count > 0 and recurrent.host_operators == 0
    plain = kernels_of(
        trace_training_step(
            TrainingTask(nn.Linear(8, 3), (torch.randn(2, 8),), torch.tensor([0, 1]))
        )
    )
    assert not plain.recurrent and plain.host_operators == plain.count > 0


def test_dropout_in_training_is_cudas_one_fused_kernel_each_way() -> None:
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.1), nn.Linear(64, 4))
    x = torch.empty(8, 16, device="meta")
    y = torch.empty(8, dtype=torch.long, device="meta")
    kernels = kernels_of(trace_training_step(TrainingTask(model, (x,), y)))
    ops = kernels.operators
    assert ops["native_dropout"] == 1 and ops["native_dropout_backward"] == 1
    assert ops["bernoulli_"] == 0 and ops["bernoulli"] == 0  # the CPU's noise tensor
    forward = kernels_of(trace_training_step(TrainingTask(model, (x,), y), backward=False))
    assert forward.operators["native_dropout"] == 0  # inference: dropout is the identity


@pytest.mark.parametrize(("cell", "gates"), [(nn.LSTM, 4), (nn.GRU, 3)])
def test_a_recurrent_layer_is_traced_as_cudnns_kernels(cell: type[nn.LSTM], gates: int) -> None:
    steps, batch, hidden, layers = 6, 4, 16, 2

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = cell(8, hidden, num_layers=layers, batch_first=True)
            self.out = nn.Linear(hidden, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y: torch.Tensor = self.out(self.rnn(x)[0])
            return y.flatten(0, 1)

    with torch.device("meta"):
        model = Tagger()
    x = torch.empty(batch, steps, 8, device="meta")
    y = torch.empty(batch * steps, dtype=torch.long, device="meta")
    kernels = kernels_of(trace_training_step(TrainingTask(model, (x,), y)))
    linear = kernels.columns("linear")
    per_layer = (1 + steps) + (steps + 3)  # input and per-step products; backward's
    assert len(linear["M"]) == layers * per_layer + 3  # and the head's three
    # the per-step products: batch rows, hidden -> gates x hidden
    assert list(linear["M"]).count(batch) >= 2 * layers * steps  # forward and backward
    assert (batch * steps, gates * hidden, 8) in zip(
        linear["M"], linear["N"], linear["K"], strict=True
    )
    assert kernels.host_operators == 0  # cuDNN launches the steps, not the host
    assert "forward" not in model.rnn.__dict__  # the module is given back unchanged


def test_the_lstm_lms_step_on_an_h100_is_within_a_fifth_of_the_measured_one() -> None:
    # measured on an H100 (data/gpu_measurements, second machine): 47.13 ms at batch 256;
    # priced before as one element-wise kernel a layer: 28.6 ms
    from tools.estimators.gpu.estimator import load_step_model
    from tools.estimators.gpu.specs import datasheet_spec
    from tools.profiling.zoo.registry import named_model

    found = named_model("lstm")
    assert found is not None
    family, params = found
    with torch.device("meta"):
        task = family.task(params, 256)
    kernels = kernels_of(trace_training_step(task))
    parameters = sum(p.numel() for p in task.model.parameters())
    step = load_step_model().estimate(
        kernels, datasheet_spec("NVIDIA H100 80GB HBM3"), parameters=parameters
    )
    assert step.step_s.p50 == pytest.approx(0.04713, rel=0.2)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention_is_priced_as_the_products_it_computes(causal: bool) -> None:
    batch, heads, steps, dim = 2, 4, 32, 16

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(dim * heads, 3 * dim * heads)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).view(batch, steps, 3, heads, dim).permute(2, 0, 3, 1, 4)
            out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return out.mean(dim=(1, 2))

    with torch.device("meta"):
        model = Attention()
    x = torch.empty(batch, steps, dim * heads, device="meta")
    y = torch.empty(batch, dtype=torch.long, device="meta")
    kernels = kernels_of(trace_training_step(TrainingTask(model, (x,), y)))
    bmm = kernels.columns("bmm")
    assert len(bmm["M"]) == 2 + 5  # S and O forward; S again, dV, dP, dQ, dK backward
    assert set(bmm["B"]) == {batch * heads}
    assert (steps, steps, dim) in zip(bmm["M"], bmm["N"], bmm["K"], strict=True)
    assert kernels.backward["bmm"] == [False] * 2 + [True] * 5
    assert set(kernels.factor["bmm"]) == {0.5 if causal else 1.0}


@pytest.mark.parametrize(
    "options",
    [
        {"proj_size": 4},
        {"bidirectional": True},
        {"bias": False},
        {"unbatched": True},
        {"unbatched": True, "batch_first": True},
    ],
)
def test_recurrent_variants_trace_for_time_and_memory(options: dict[str, object]) -> None:
    from tools.estimators.gpu.memory.recorder import record_training_step

    unbatched = bool(options.pop("unbatched", False))
    rnn = nn.LSTM(8, 16, num_layers=2, **options)  # type: ignore[arg-type]
    width = (rnn.proj_size or 16) * (2 if rnn.bidirectional else 1)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.out = rnn, nn.Linear(width, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y: torch.Tensor = self.out(self.rnn(x)[0])
            return y.reshape(-1, 3)

    x = torch.randn(5, 8) if unbatched else torch.randn(5, 2, 8)
    task = TrainingTask(Model(), (x,), torch.randint(0, 3, (5 if unbatched else 10,)))
    kernels = kernels_of(trace_training_step(task))
    per_step = [m for m in kernels.columns("linear")["M"] if m == (1 if unbatched else 2)]
    assert len(per_step) >= 2 * 2 * 5  # a product a step and layer, both ways: 5 steps
    assert record_training_step(task, steps=1)
