"""An example model file for ``rightsize estimate``.

    rightsize estimate --model-file examples/models/small_cnn.py --model-class SmallCNN \\
        --batch-size 32 64 --epochs 50 --samples 20000

The file defines an ``nn.Module`` subclass that builds with no arguments and, optionally,
``example_batch(batch_size)`` returning ``(inputs, targets)`` - or ``(inputs, targets,
loss_fn)`` when the loss is not cross-entropy. Without ``example_batch``, pass
``--input-shape 3,32,32 --num-classes 10`` instead.
"""

import torch
from torch import nn


class SmallCNN(nn.Module):
    """A CIFAR-sized convolutional classifier: three conv blocks and a linear head."""

    def __init__(self, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        layers = []
        channels = 3
        for stage in range(3):
            out = width * 2**stage
            layers += [
                nn.Conv2d(channels, out, 3, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x).mean(dim=(2, 3))
        return self.head(x)


def example_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of 32x32 RGB images and their class labels (10 classes)."""
    return torch.randn(batch_size, 3, 32, 32), torch.randint(0, 10, (batch_size,))
