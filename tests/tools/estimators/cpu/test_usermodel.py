"""A user's model file: loading, its batch, its graph, and every way it can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_base.errors import InvalidInputError
from tools.estimators.model_file import load_user_model

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "models" / "small_cnn.py"


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "model.py"
    path.write_text(text)
    return path


def test_the_example_file_loads_batches_and_traces() -> None:
    user = load_user_model(EXAMPLE, "SmallCNN")
    inputs, targets, loss = user.batch(4)
    assert inputs[0].shape == (4, 3, 32, 32) and targets.shape == (4,) and loss is None
    graph = user.graph(4)
    assert graph.parameters > 0 and graph.flops > 0


def test_input_shape_and_classes_describe_a_classifier_without_example_batch(
    tmp_path: Path,
) -> None:
    path = _file(
        tmp_path,
        "from torch import nn\nclass Net(nn.Sequential):\n"
        "    def __init__(self):\n        super().__init__(nn.Flatten(), nn.Linear(12, 5))\n",
    )
    user = load_user_model(path, "Net", input_shape=[3, 2, 2], num_classes=5)
    inputs, targets, _ = user.batch(6)
    assert inputs[0].shape == (6, 3, 2, 2) and int(targets.max()) < 5
    with pytest.raises(InvalidInputError, match="--input-shape"):
        load_user_model(path, "Net").batch(2)


def test_example_batch_may_bring_its_own_loss(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "import torch\nfrom torch import nn\n"
        "class Reg(nn.Linear):\n    def __init__(self):\n        super().__init__(4, 1)\n"
        "def example_batch(n):\n"
        "    return torch.randn(n, 4), torch.randn(n, 1), nn.functional.mse_loss\n",
    )
    user = load_user_model(path, "Reg")
    assert user.batch(3)[2] is not None
    assert user.graph(3).flops > 0


@pytest.mark.parametrize(
    ("text", "class_name", "field", "words"),
    [
        ("import nonexistent_module_xyz\n", "Net", "--model-file", "does not import"),
        ("x = (\n", "Net", "--model-file", "does not import"),
        ("from torch import nn\n", "Net", "--model-class", "defines no 'Net'"),
        ("class Net:\n    pass\n", "Net", "--model-class", "not an nn.Module"),
    ],
)
def test_a_bad_file_or_class_names_the_field_and_the_problem(
    tmp_path: Path, text: str, class_name: str, field: str, words: str
) -> None:
    with pytest.raises(InvalidInputError, match=words) as error:
        load_user_model(_file(tmp_path, text), class_name)
    assert error.value.field == field


def test_a_model_with_data_dependent_control_flow_cannot_be_traced(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "import torch\nfrom torch import nn\nclass Net(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.a = nn.Linear(4, 2)\n"
        "    def forward(self, x):\n        return self.a(x) if x.sum() > 0 else -self.a(x)\n",
    )
    user = load_user_model(path, "Net", input_shape=[4], num_classes=2)
    with pytest.raises(InvalidInputError, match="could not be traced") as error:
        user.graph(2)
    assert error.value.field == "--model-class"


def test_a_missing_file_is_named() -> None:
    with pytest.raises(InvalidInputError, match="no such file"):
        load_user_model(Path("/nonexistent/model.py"), "Net")


def test_example_batch_may_be_a_static_method_of_the_class(tmp_path: Path) -> None:
    path = tmp_path / "audio.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n\n"
        "class Audio(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.conv = nn.Conv1d(1, 4, 9, stride=4)\n"
        "        self.head = nn.Linear(4, 3)\n\n"
        "    def forward(self, x):\n"
        "        return self.head(self.conv(x).mean(-1))\n\n"
        "    @staticmethod\n"
        "    def example_batch(batch_size):\n"
        "        return torch.randn(batch_size, 1, 400), torch.randint(0, 3, (batch_size,))\n"
    )
    user = load_user_model(path, "Audio")
    (inputs,), targets, loss = user.batch(5)
    assert inputs.shape == (5, 1, 400) and targets.shape == (5,) and loss is None
