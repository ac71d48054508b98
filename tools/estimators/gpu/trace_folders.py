"""Where GPU step traces persist across processes, as the caller's settings say.

Light (no torch): the estimator chain holds one per process and hands it to
``workload_trace.memory_peak`` and ``workload_trace.kernels_at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["SHIPPED_TRACES", "TraceFolders"]

# The traces of the README's example (examples/resnet50.yaml), shipped so that a first
# ``rightsize plan`` reads them instead of tracing ResNet-50 (~10 s of CPU); see
# data/gpu_traces/README.md.
SHIPPED_TRACES = Path(__file__).resolve().parents[3] / "data" / "gpu_traces"


@dataclass(frozen=True, slots=True)
class TraceFolders:
    """``folder``: where traces are written and read first (None: this process only);
    ``shipped``: whether the shipped traces are read after it. The default keeps nothing
    on disk."""

    folder: Path | None = None
    shipped: bool = False

    @classmethod
    def from_setting(cls, home: Path, setting: str | Path | None) -> TraceFolders:
        """The settings' ``gpu_traces``: ``off`` (nothing on disk), a folder (read alone),
        or unset (``home/gpu_traces``, then the shipped traces)."""
        text = str(setting) if setting is not None else ""
        if text.lower() == "off":
            return cls()
        if text:
            return cls(Path(text).expanduser())
        return cls(home.expanduser() / "gpu_traces", shipped=True)

    def readable(self, path: Path | None) -> list[Path]:
        """Where a trace named like ``path`` may be read: the folder, then the shipped."""
        if path is None:
            return []
        return [path, SHIPPED_TRACES / path.name] if self.shipped else [path]
