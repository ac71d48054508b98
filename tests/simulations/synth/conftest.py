"""Slices of SDSC-SP2 and generators fitted on them, shared by the synth tests.

Fitting is the slow part, so models are fitted once per session on the first few
thousand jobs, the TVAE for 40 epochs (a few seconds): enough to exercise every code
path and to learn per-user structure, not to reach the benchmark's fidelity.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import pytest

from simulations.synth.columns import Trace, read_trace
from simulations.synth.copula import CopulaModel
from simulations.synth.sequence import SequenceModel
from simulations.synth.tvae import TVAEModel
from tools.traces.swf import SWFReader, write_swf

SLICE_JOBS = 6000


@pytest.fixture(scope="session")
def sdsc_slice(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 6,000 lines of SDSC-SP2 as an SWF file, its header kept."""
    source = shared_data / "traces" / "SDSC-SP2-1998-4.2-cln.swf.gz"
    out = tmp_path_factory.mktemp("sdsc") / "sdsc-slice.swf"
    with SWFReader(source) as reader:
        write_swf(out, reader.header, islice(reader, SLICE_JOBS))
    return out


@pytest.fixture(scope="session")
def sdsc_trace(sdsc_slice: Path) -> Trace:
    return read_trace(sdsc_slice)


@pytest.fixture(scope="session")
def copula(sdsc_trace: Trace) -> CopulaModel:
    return CopulaModel.fit(sdsc_trace, seed=0)


@pytest.fixture(scope="session")
def tvae(sdsc_trace: Trace) -> TVAEModel:
    return TVAEModel.fit(sdsc_trace, seed=0, epochs=40)


@pytest.fixture(scope="session")
def sequence(sdsc_trace: Trace) -> SequenceModel:
    return SequenceModel.fit(sdsc_trace, seed=0, epochs=12)
