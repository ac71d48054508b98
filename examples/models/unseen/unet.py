"""Held out (issue 40): a small U-Net for per-pixel segmentation.

Three levels down (two 3x3 convolutions, batch norm, ReLU, max pooling), a bottleneck,
and back up with transposed convolutions and skip connections concatenated; a per-pixel
cross-entropy over 4 classes on 64x64 images. The zoo has no encoder-decoder, no
transposed convolution, no concatenation of skips.
"""

import torch
from torch import Tensor, nn

CLASSES, SIDE = 4, 64


def _double(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, base: int = 16) -> None:
        super().__init__()
        widths = [base, 2 * base, 4 * base]
        self.downs = nn.ModuleList()
        cin = 3
        for w in widths:
            self.downs.append(_double(cin, w))
            cin = w
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = _double(widths[-1], 2 * widths[-1])
        self.ups = nn.ModuleList()
        self.merges = nn.ModuleList()
        cin = 2 * widths[-1]
        for w in reversed(widths):
            self.ups.append(nn.ConvTranspose2d(cin, w, 2, stride=2))
            self.merges.append(_double(2 * w, w))
            cin = w
        self.head = nn.Conv2d(widths[0], CLASSES, 1)

    def forward(self, x: Tensor) -> Tensor:
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = self.pool(x)
        x = self.bottleneck(x)
        for up, merge, skip in zip(self.ups, self.merges, reversed(skips), strict=True):
            x = merge(torch.cat([up(x), skip], dim=1))
        return self.head(x)


def example_batch(batch_size: int) -> tuple[Tensor, Tensor]:
    images = torch.randn(batch_size, 3, SIDE, SIDE)
    return images, torch.randint(0, CLASSES, (batch_size, SIDE, SIDE))
