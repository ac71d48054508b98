"""The per-operator CPU model calibrated on another host: the step law refitted on steps
timed there, used there only, written whole.

The steps are the synthetic ones of ``test_opcost`` (a known cost law); "another host" runs
every step twice as slow, which the calibrated step law must carry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_base.errors import InvalidInputError
from tools.estimators.cpu import opcost as oc
from tools.estimators.cpu.answer import HardwareOption, _opcost_for, estimate
from tools.estimators.cpu.dataset import GraphData
from tools.estimators.cpu.host_calibration import (
    MIN_STEPS,
    calibrate,
    calibrated_dir,
    host_key,
    load_calibrated,
    save_calibrated,
)
from tools.profiling.analytic import cpu_spec

from .test_opcost import _graph, _items, model  # noqa: F401  (the fixture)

HOST = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_isa": "avx512", "cpu_cores": 2}


def _zoo() -> list[dict[str, Any]]:
    zoo = [dict(i) for i in _items() if i["kind"] == "zoo"]
    for k, item in enumerate(zoo):
        item["id"] = f"zoo-{item['family']}-{k}-t{item['threads']}"
    return zoo


def _timed(zoo: list[dict[str, Any]], factor: float) -> dict[str, dict[str, Any]]:
    """Each zoo step timed on "this host": ``factor`` x its time on the model's host."""
    return {
        i["id"]: {
            "id": i["id"],
            "step_s": factor * i["measured_step_s"],
            "least_s": factor * i["measured_step_s"],
        }
        for i in zoo
    }


def _predictions(fitted: oc.OpCostModel, zoo: list[dict[str, Any]]) -> np.ndarray:
    steps = oc.step_items(zoo)
    return np.array(
        [
            fitted.predict_s(
                s.x, s.counts, threads=s.threads, optimizer=s.optimizer, parameters=s.parameters
            )[1]
            for s in steps
        ]
    )


def test_a_host_twice_as_slow_gets_a_step_law_twice_as_slow(model: oc.OpCostModel) -> None:  # noqa: F811
    zoo = _zoo()
    calibrated = calibrate(model, zoo, _timed(zoo, 2.0), None, HOST)
    ratio = _predictions(calibrated, zoo) / _predictions(model, zoo)
    # the step law scales; the update lines are the model's, a small part of each step
    assert np.median(ratio) == pytest.approx(2.0, rel=0.1)
    assert calibrated.meta["provenance"] == HOST
    record = calibrated.meta["host_calibration"]
    assert record["steps"] == {"t1": 20, "t2": 20}
    assert record["from"] == model.estimator_id
    assert record["shipped_step"] == model.step
    assert 0.0 <= record["zoo_family_out_mape"] < 0.2
    assert "heldout" not in calibrated.meta  # the held-out files were the other host's
    assert calibrated.log_q10 <= model.log_q10 and calibrated.log_q90 >= model.log_q90
    # the same host as the model's: the law barely moves
    same = calibrate(model, zoo, _timed(zoo, 1.0), None, HOST)
    assert np.median(_predictions(same, zoo) / _predictions(model, zoo)) == pytest.approx(
        1.0, rel=0.1
    )


def test_too_few_steps_are_refused_by_name(model: oc.OpCostModel) -> None:  # noqa: F811
    zoo = _zoo()
    few = dict(list(_timed(zoo, 2.0).items())[: MIN_STEPS - 1])
    with pytest.raises(InvalidInputError, match="fewer than") as info:
        calibrate(model, zoo, few, None, HOST)
    assert "steps" in str(info.value)


def test_the_calibrated_model_is_written_whole_and_read_for_its_host_only(
    model: oc.OpCostModel,  # noqa: F811
    tmp_path: Path,
) -> None:
    zoo = _zoo()
    folder = calibrated_dir(tmp_path, HOST["cpu_model"], HOST["cpu_isa"])
    assert folder.name == host_key(HOST["cpu_model"], HOST["cpu_isa"])
    assert folder.name == "intel-r-xeon-r-processor-avx512"
    folder.mkdir(parents=True)
    (folder / "steps.jsonl").write_text('{"id": "x"}\n')
    calibrated = calibrate(model, zoo, _timed(zoo, 2.0), None, HOST)
    save_calibrated(calibrated, folder)
    again = load_calibrated(tmp_path, HOST["cpu_model"], HOST["cpu_isa"])
    assert again is not None and again.step == calibrated.step
    assert (folder / "steps.jsonl").read_text() == '{"id": "x"}\n'  # the timings kept
    assert load_calibrated(tmp_path, HOST["cpu_model"], "avx2") is None
    assert load_calibrated(tmp_path, "AMD EPYC", "avx512") is None
    # A save that fails leaves the model there as it was, and no stray folder.
    broken = oc.OpCostModel(None, {}, {}, 0.0, 0.0, {})  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        save_calibrated(broken, folder)
    kept = load_calibrated(tmp_path, HOST["cpu_model"], HOST["cpu_isa"])
    assert kept is not None and kept.step == calibrated.step
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]
    with pytest.raises(InvalidInputError, match="CPU model"):
        host_key("", "")


def _option(cpu_model: str, cpu_isa: str) -> HardwareOption:
    return HardwareOption(
        name="local", spec=cpu_spec(cpu_model, 1), cpu_model=cpu_model, cpu_isa=cpu_isa, local=True
    )


def test_this_hosts_calibrated_model_answers_where_no_bundle_covers_it(
    model: oc.OpCostModel,  # noqa: F811
) -> None:
    zoo = _zoo()
    calibrated = calibrate(model, zoo, _timed(zoo, 2.0), None, HOST)
    here = _option(HOST["cpu_model"], HOST["cpu_isa"])
    elsewhere = _option(HOST["cpu_model"], "avx2")
    assert _opcost_for(here, model, calibrated) is calibrated
    assert _opcost_for(elsewhere, model, calibrated) is model
    graphs: dict[int, GraphData] = {8: _graph()}
    common: dict[str, Any] = {"epochs": 1, "samples": 80, "optimizer": "sgd", "bundle": None}
    (answered,) = estimate(graphs, options=[here], opcost=model, host_opcost=calibrated, **common)
    assert answered.estimator.startswith(calibrated.estimator_id)
    assert (
        "calibrated on this host (40 zoo steps timed here, 20 at 1 thread, 20 at 2 threads"
        in answered.note
    )
    assert "memory: analytic" in answered.note
    assert answered.validation_mape == calibrated.meta["host_calibration"]["zoo_family_out_mape"]
    (plain,) = estimate(graphs, options=[here], opcost=model, **common)
    assert plain.estimator == "analytic-opgraph"
    assert "rightsize profile calibrate" in plain.note
    assert plain.iteration_time_s != answered.iteration_time_s


def test_a_broken_calibrated_model_is_named_not_a_traceback(
    model: oc.OpCostModel,  # noqa: F811
    tmp_path: Path,
) -> None:
    zoo = _zoo()
    folder = calibrated_dir(tmp_path, HOST["cpu_model"], HOST["cpu_isa"])
    save_calibrated(calibrate(model, zoo, _timed(zoo, 2.0), None, HOST), folder)
    (folder / "opcost.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match="calibrate again") as info:
        load_calibrated(tmp_path, HOST["cpu_model"], HOST["cpu_isa"])
    assert str(folder) in str(info.value)
