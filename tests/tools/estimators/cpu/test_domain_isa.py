"""The DNN estimators speak for a host only where its CPU's vector ISA is the one they
were trained on: the zoo was profiled on an AVX-512 host and this VM's "AMD EPYC" later
lost AVX-512, the same CPU model name. Time is refused there (analytic answer, flagged);
memory, which the ISA does not change, keeps the bundle's answer, flagged too.
"""

from __future__ import annotations

import json
from typing import Any

from tools.estimators.cpu.answer import (
    HardwareOption,
    _opcost_answer,
    estimate,
    hardware_options,
)
from tools.estimators.cpu.bundle import BundleMeta, EstimatorBundle
from tools.estimators.cpu.dataset import Example, GraphData
from tools.estimators.cpu.opcost import default_model_dir
from tools.estimators.cpu.paths import default_dataset_path
from tools.profiling.analytic import cpu_spec
from tools.profiling.profiler import hardware_descriptors

from .test_opcost import _graph, _with_heldout, model  # noqa: F401  (the fixture)


def _option(cpu_model: str, cpu_isa: str, threads: int = 1) -> HardwareOption:
    return HardwareOption(
        name="local",
        spec=cpu_spec(cpu_model, threads),
        cpu_model=cpu_model,
        cpu_isa=cpu_isa,
        local=True,
    )


def _common(bundle: EstimatorBundle, option: HardwareOption) -> dict[str, Any]:
    return {"epochs": 1, "samples": 80, "optimizer": "sgd", "options": [option], "bundle": bundle}


def test_the_domain_records_the_profiling_hosts_isa(
    small_examples: list[Example], tiny_bundle: EstimatorBundle
) -> None:
    isas = {e.cpu_isa for e in small_examples}
    assert isas and "" not in isas  # every sweep row says which ISA it ran on
    assert tiny_bundle.meta.domain is not None
    assert tiny_bundle.meta.domain.cpu_isas == sorted(isas)


def test_the_shipped_bundle_says_it_was_trained_on_avx512() -> None:
    shipped = default_dataset_path().parent / "models" / "bundle.json"
    meta = BundleMeta.model_validate_json(shipped.read_text())
    assert meta.domain is not None and meta.domain.cpu_isas == ["avx512"]


def test_another_isa_of_the_same_cpu_model_is_not_this_machine_kind(
    tiny_bundle: EstimatorBundle,
) -> None:
    assert tiny_bundle.meta.domain is not None
    cpu = tiny_bundle.meta.domain.cpu_models[0]
    trained = tiny_bundle.meta.domain.cpu_isas[0]
    other = "avx2" if trained != "avx2" else "avx512"
    graphs: dict[int, GraphData] = {8: _graph()}
    same = estimate(graphs, **_common(tiny_bundle, _option(cpu, trained)))[0]
    changed = estimate(graphs, **_common(tiny_bundle, _option(cpu, other)))[0]
    assert same.note == "trained on this machine kind"
    assert "trained on this machine kind" not in changed.note
    assert other in changed.note and trained in changed.note
    assert changed.estimator.startswith("analytic")
    assert changed.validation_mape is None
    assert changed.iteration_time_s != same.iteration_time_s
    assert changed.peak_memory_mb == same.peak_memory_mb  # memory: the bundle's, flagged
    # an option whose ISA is not known is judged by its CPU model, as before
    unknown = estimate(graphs, **_common(tiny_bundle, _option(cpu, "")))[0]
    assert unknown.note == "trained on this machine kind"


def test_the_per_operator_model_does_not_answer_for_another_isa(model: Any) -> None:  # noqa: F811
    better = _with_heldout(model, True)
    better.meta["provenance"] = {"cpu_model": "AMD EPYC", "cpu_isa": "avx2"}
    graph = _graph()
    assert _opcost_answer(better, _option("AMD EPYC", "avx2"), graph, "sgd") is not None
    assert _opcost_answer(better, _option("AMD EPYC", "avx512"), graph, "sgd") is None


def test_the_local_option_carries_this_hosts_isa() -> None:
    (local,) = hardware_options(["local"], None, 1)
    assert local.cpu_isa == hardware_descriptors(1)["cpu_isa"]
    assert local.cpu_isa in {"avx512", "avx2", "sse", "unknown"}


def test_the_shipped_per_operator_model_names_the_isa_it_was_timed_on() -> None:
    body = json.loads((default_model_dir() / "opcost.json").read_text())
    assert body["meta"]["provenance"].get("cpu_isa") in {"avx512", "avx2", "sse"}
