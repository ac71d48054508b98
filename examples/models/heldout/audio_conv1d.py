"""Held-out family (not in the zoo): a 1-D convolutional audio classifier on raw waveforms.

M5-style (Dai et al. 2017): a wide strided first convolution, then 1-D conv / batch
norm / ReLU / max-pool blocks, global average pooling, a linear head. The zoo's
convolutions are all 2-D. Used by ``benchmarks/cpu_opcost.py``.

    rightsize estimate --model-file examples/models/heldout/audio_conv1d.py \\
        --model-class AudioConv1d --batch-size 16 --epochs 1 --samples 1000
"""

import torch
from torch import nn

SAMPLES, CLASSES = 8000, 35


class AudioConv1d(nn.Module):
    def __init__(self, width: int = 48) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv1d(1, width, 80, stride=4),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.MaxPool1d(4),
        ]
        channels = width
        for out in (width, 2 * width, 2 * width):
            layers += [
                nn.Conv1d(channels, out, 3, padding=1),
                nn.BatchNorm1d(out),
                nn.ReLU(),
                nn.MaxPool1d(4 if out == width else 2),
            ]
            channels = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, CLASSES)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(wave).mean(dim=2))


def example_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch_size, 1, SAMPLES), torch.randint(0, CLASSES, (batch_size,))
