"""``rightsize synth`` end to end: fit, sample, evaluate; bad models and options exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rightsize.cli import app
from simulations.synth.constraints import check_trace

runner = CliRunner()


def test_fit_sample_evaluate_round_trip(sdsc_slice: Path, tmp_path: Path) -> None:
    model = tmp_path / "copula.pt"
    fitted = runner.invoke(
        app,
        ["synth", "fit", "--trace", str(sdsc_slice), "--model", "copula", "--out", str(model),
         "--json"],
    )  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    summary = json.loads(fitted.stdout)
    assert summary["kind"] == "copula"
    assert summary["classes"] > 10
    assert model.is_file()

    synthetic = tmp_path / "synthetic.swf"
    sampled = runner.invoke(
        app,
        ["synth", "sample", str(model), "--jobs", "3000", "--out", str(synthetic), "--seed", "4",
         "--json"],
    )  # fmt: skip
    assert sampled.exit_code == 0, sampled.output
    assert json.loads(sampled.stdout)["jobs"] == 3000
    assert check_trace(synthetic).passed

    evaluated = runner.invoke(
        app,
        ["synth", "evaluate", "--real", str(sdsc_slice), "--synthetic", str(synthetic), "--json",
         "--report", str(tmp_path / "report")],
    )  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads(evaluated.stdout)
    for key in ("columns", "correlation", "scheduling", "constraints", "checks", "passed"):
        assert key in report
    assert {c["column"] for c in report["columns"]} >= {"procs", "run_s", "interarrival_s"}
    for c in report["columns"]:
        assert {"ks", "wasserstein"} <= c.keys()
    easy = report["scheduling"]
    assert easy["real"]["mean_bsld"] >= 1 and easy["synthetic"]["mean_bsld"] >= 1
    assert (tmp_path / "report" / "correlation.png").is_file()


def test_tvae_fits_from_the_command_line(sdsc_slice: Path, tmp_path: Path) -> None:
    model = tmp_path / "tvae.pt"
    result = runner.invoke(
        app,
        ["synth", "fit", "--trace", str(sdsc_slice), "--model", "tvae", "--epochs", "1",
         "--out", str(model)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "tvae model fitted" in result.stdout
    sampled = runner.invoke(
        app, ["synth", "sample", str(model), "--jobs", "200", "--out", str(tmp_path / "t.swf")]
    )
    assert sampled.exit_code == 0, sampled.output


def test_a_broken_model_file_exits_2_with_a_clear_error(tmp_path: Path) -> None:
    model = tmp_path / "broken.pt"
    model.write_bytes(b"not a model at all")
    result = runner.invoke(
        app, ["synth", "sample", str(model), "--jobs", "10", "--out", str(tmp_path / "x.swf")]
    )
    assert result.exit_code == 2
    assert "not a rightsize synth model file" in result.stderr
    assert not (tmp_path / "x.swf").exists()


def test_an_unknown_model_kind_exits_2(sdsc_slice: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["synth", "fit", "--trace", str(sdsc_slice), "--model", "gan", "--out",
         str(tmp_path / "m.pt"), "--json"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert json.loads(result.stdout)["field"] == "--model"


def test_strict_evaluate_exits_1_when_a_target_is_missed(sdsc_slice: Path) -> None:
    # The real slice against itself misses only the constraint check (real jobs ran
    # past their requests), which is enough for --strict to fail.
    result = runner.invoke(
        app,
        ["synth", "evaluate", "--real", str(sdsc_slice), "--synthetic", str(sdsc_slice),
         "--strict"],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "FAIL" in result.stdout
    # The EASY table shows how short-run jobs fare, the same figure on both rows.
    assert "after short end" in result.stdout
    rows = [line.split("│") for line in result.stdout.splitlines() if "real │" in line]
    rows += [line.split("│") for line in result.stdout.splitlines() if "synthetic │" in line]
    assert len(rows) == 2 and rows[0][-3:] == rows[1][-3:]
    assert float(rows[0][-2]) > 0 and float(rows[0][-3]) > 0


def test_the_sequence_model_fits_and_samples_from_the_command_line(
    sdsc_slice: Path, tmp_path: Path
) -> None:
    model = tmp_path / "sequence.pt"
    fitted = runner.invoke(
        app,
        ["synth", "fit", "--trace", str(sdsc_slice), "--model", "sequence", "--epochs", "1",
         "--out", str(model), "--json"],
    )  # fmt: skip
    assert fitted.exit_code == 0, fitted.output
    assert json.loads(fitted.stdout)["options"]["epochs"] == 1
    out = tmp_path / "s.swf"
    sampled = runner.invoke(
        app, ["synth", "sample", str(model), "--jobs", "300", "--out", str(out), "--json"]
    )
    assert sampled.exit_code == 0, sampled.output
    summary = json.loads(sampled.stdout)
    assert summary["jobs"] == 300 and summary["load_factor"] == 1.0
    assert 0 < summary["kept_share"] <= 1
    assert check_trace(out).passed


def test_evaluate_takes_the_machine_size_a_headerless_trace_lacks(
    sdsc_slice: Path, tmp_path: Path
) -> None:
    # The error for a trace without MaxProcs says "pass --procs": evaluate takes it.
    lines = sdsc_slice.read_text().splitlines()
    headerless = tmp_path / "headerless.swf"
    headerless.write_text("\n".join(line for line in lines[:800] if not line.startswith(";")))
    args = ["synth", "evaluate", "--real", str(headerless), "--synthetic", str(headerless)]
    missing = runner.invoke(app, [*args, "--json"])
    assert missing.exit_code == 2
    error = json.loads(missing.stdout)
    assert error["field"] == "MaxProcs" and "pass --procs" in error["error"]
    given = runner.invoke(app, [*args, "--procs", "128", "--json"])
    assert given.exit_code == 0, given.output
    report = json.loads(given.stdout)
    assert report["scheduling"]["real"]["machine_procs"] == 128
    assert report["temporal"]["real_work"] == report["temporal"]["synthetic_work"]
    assert report["temporal"]["real_work"]["arrival_backlog_ratio"] > 0


def test_the_table_over_traces_has_a_row_per_trace_model_and_seed(
    sdsc_slice: Path, tmp_path: Path
) -> None:
    args = ["synth", "table", str(sdsc_slice), "--model", "copula", "--seeds", "2",
            "--max-jobs", "3000"]  # fmt: skip
    result = runner.invoke(app, [*args, "--report", str(tmp_path / "report"), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["trace"], r["model"], r["seed"]) for r in rows] == [
        ("sdsc-slice-first3000.swf", "copula", 0),
        ("sdsc-slice-first3000.swf", "copula", 1),
    ]
    # the replayable jobs of the first 3,000 records
    assert 2_500 < rows[0]["jobs"] == rows[1]["jobs"] <= 3_000
    assert all(0 <= r["ks_max"] <= 1 for r in rows)
    assert all(r["real_bsld"] == rows[0]["real_bsld"] > 0 for r in rows)  # one real slice
    assert rows[0]["bsld"] != rows[1]["bsld"]  # two samples
    # Seed 0's plots and fidelity.json, not seed 1's (one directory per trace and model).
    report = tmp_path / "report" / "sdsc-slice-first3000" / "copula"
    assert (report / "fidelity.json").is_file() and (report / "temporal.png").is_file()
    assert [r["fit_seed"] for r in rows] == [0, 0]
    plain = runner.invoke(app, [*args[:5], "--seeds", "1", "--max-jobs", "3000"])
    assert plain.exit_code == 0, plain.output
    lines = plain.stdout.splitlines()
    assert "found/mean r/s" in lines[1] and lines[2].startswith("sdsc-slice")
    assert lines[2].split()[2] == "0/0"  # fit seed / draw seed


def test_the_table_fits_each_trace_once_per_fit_seed(sdsc_slice: Path) -> None:
    # How much a figure moves from fit to fit (HPC2N's EASY bsld +19% to +58% over three
    # fits of the whole trace): each fit seed fits its own model, each sampled per seed.
    args = ["synth", "table", str(sdsc_slice), "--model", "copula", "--fit-seeds", "2",
            "--max-jobs", "3000", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["fit_seed"], r["seed"]) for r in rows] == [(0, 0), (1, 0)]
    assert rows[0]["bsld"] != rows[1]["bsld"]  # two fits, the same draw seed
    refused = runner.invoke(app, [*args[:5], "--fit-seeds", "0", "--json"])
    assert refused.exit_code == 2


def test_the_table_refuses_an_unknown_generator_or_a_missing_trace(
    sdsc_slice: Path, tmp_path: Path
) -> None:
    gan = runner.invoke(app, ["synth", "table", str(sdsc_slice), "--model", "gan", "--json"])
    assert gan.exit_code == 2 and json.loads(gan.stdout)["field"] == "model"
    missing = runner.invoke(app, ["synth", "table", str(tmp_path / "nope.swf"), "--json"])
    assert missing.exit_code == 2
    assert json.loads(missing.stdout)["field"] == "trace"


def test_schedulers_trained_on_real_and_synthetic_beside_the_heuristics(
    sdsc_slice: Path,
) -> None:
    # Seed 003's experiment, as small as it runs: one held-out sequence, one seed, one
    # PPO epoch, one CEM generation, a one-epoch sequence model.
    result = runner.invoke(
        app,
        ["synth", "schedulers", "--trace", str(sdsc_slice), "--seeds", "1", "--windows", "1",
         "--ppo-epochs", "1", "--trajectories", "2", "--cem-generations", "1",
         "--generator-epochs", "1", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {(r["scheduler"], r["trained_on"]) for r in rows} == {
        ("FCFS", "-"),
        ("SJF", "-"),
        ("F1", "-"),
        ("EASY (engine)", "-"),
        ("EASY++", "-"),
        ("PPO", "real"),
        ("PPO", "synthetic sequence"),
        ("learned priority (CEM)", "real"),
        ("learned priority (CEM)", "synthetic sequence"),
    }
    assert all(r["held_out_bsld"] >= 1 and len(r["per_sequence"]) == 1 for r in rows)
    # The simulators agree: plain EASY in the engine is FCFS with backfilling here.
    by = {(r["scheduler"], r["trained_on"]): r["held_out_bsld"] for r in rows}
    assert by[("EASY (engine)", "-")] == pytest.approx(by[("FCFS", "-")])
    bad = runner.invoke(app, ["synth", "schedulers", "--sources", "gan"])
    assert bad.exit_code == 2 and "--sources" in bad.output
