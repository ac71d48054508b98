"""A zoo image model given a non-square input is traced at a square of the same area."""

from __future__ import annotations

from knowledge_base.workload import DNNTraining
from tools.estimators.gpu.workload_trace import step_key


def _key(shape: list[int]) -> str:
    workload = DNNTraining(
        model="resnet50", input_shape=shape, dataset_samples=1000, epochs=1, batch_sizes=[8]
    )
    return step_key(workload).model


def test_non_square_input_is_traced_at_the_square_of_its_area() -> None:
    # 192 x 300 has the pixels of 240 x 240; before, it was traced at 300 x 300 (x1.56).
    assert "('image_size', 240)" in _key([3, 192, 300])
    assert _key([3, 192, 300]) == _key([3, 240, 240])
    assert _key([3, 300, 192]) == _key([3, 240, 240])


def test_square_input_keeps_its_size() -> None:
    assert "('image_size', 224)" in _key([3, 224, 224])
    assert _key([]) == _key([3, 224, 224])
