"""Model files: what is saved loads back the same; anything else is a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from knowledge_base.errors import InvalidInputError
from simulations.synth.copula import CopulaModel
from simulations.synth.generator import TraceModel, generate
from simulations.synth.model_files import FORMAT_VERSION, load_model, save_model
from simulations.synth.tvae import TVAEModel


@pytest.fixture(params=["copula", "tvae"])
def model(request: pytest.FixtureRequest, copula: CopulaModel, tvae: TVAEModel) -> TraceModel:
    return copula if request.param == "copula" else tvae


def test_a_saved_model_loads_back_and_samples_the_same(model: TraceModel, tmp_path: Path) -> None:
    path = save_model(model, tmp_path / "model.pt")
    loaded = load_model(path)
    assert loaded.metadata == model.metadata
    a, b = generate(model, 1000, seed=9), generate(loaded, 1000, seed=9)
    for name in ("interarrival_s", "procs", "requested_time_s", "run_s", "status", "user"):
        np.testing.assert_array_equal(a.table.column(name), b.table.column(name))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="model file not found") as caught:
        load_model(tmp_path / "nope.pt")
    assert caught.value.field == "model"


def test_random_bytes_are_not_a_model(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pt"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(InvalidInputError, match="not a rightsize synth model file"):
        load_model(path)


def test_a_truncated_model_file_is_refused(copula: CopulaModel, tmp_path: Path) -> None:
    path = save_model(copula, tmp_path / "model.pt")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(InvalidInputError, match="not a rightsize synth model file"):
        load_model(path)


def test_a_foreign_torch_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(3)}, path)
    with pytest.raises(InvalidInputError, match="expected format") as caught:
        load_model(path)
    assert caught.value.field == "format"


def test_a_newer_format_version_is_refused(copula: CopulaModel, tmp_path: Path) -> None:
    path = save_model(copula, tmp_path / "model.pt")
    payload = torch.load(path, weights_only=True)
    payload["format_version"] = FORMAT_VERSION + 1
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="unsupported model file version") as caught:
        load_model(path)
    assert caught.value.field == "format_version"


def test_invalid_metadata_names_the_field(copula: CopulaModel, tmp_path: Path) -> None:
    path = save_model(copula, tmp_path / "model.pt")
    payload = torch.load(path, weights_only=True)
    payload["metadata"]["machine_procs"] = 0
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="metadata is invalid") as caught:
        load_model(path)
    assert caught.value.field == "metadata.machine_procs"


def test_a_network_that_does_not_fit_its_metadata_is_refused(
    tvae: TVAEModel, tmp_path: Path
) -> None:
    path = save_model(tvae, tmp_path / "model.pt")
    payload = torch.load(path, weights_only=True)
    payload["state"]["network"]["mu.weight"] = torch.zeros(3, 3)
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="does not match its metadata") as caught:
        load_model(path)
    assert caught.value.field == "state"
    # The file and the field once, as every error says them (it said "state: state:").
    assert str(caught.value).startswith(f"{path}: state: the ")
    assert "state: state:" not in str(caught.value)


def test_a_copula_with_missing_classes_is_refused(copula: CopulaModel, tmp_path: Path) -> None:
    path = save_model(copula, tmp_path / "model.pt")
    payload = torch.load(path, weights_only=True)
    payload["state"]["correlations"] = payload["state"]["correlations"][:-1]
    torch.save(payload, path)
    with pytest.raises(InvalidInputError, match="number of classes"):
        load_model(path)
