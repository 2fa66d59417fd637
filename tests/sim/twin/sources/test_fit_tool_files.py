"""`python -m loadgen.sim fit` on other tools' files, end to end from the files the tools
wrote: the fit says per source how it was fitted and how well it predicts that source; a
file it cannot use is one line naming the file, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.sim.cli import main
from tests.sim.twin.sources.test_tool_files import (
    AIPERF,
    GUIDELLM,
    INFERENCE_PERF,
    VLLM_OLD,
    VLLM_R4,
    VLLM_R10,
)

BASE = "llama-3-8b-awq-a100"  # the preset the simulator served the tools from


def fit(tmp_path: Path, *sources: Path) -> dict:
    main(["fit", *map(str, sources), "--preset", BASE, "--out", str(tmp_path / "fitted.toml")])
    assert (tmp_path / "fitted.toml").read_text().strip()
    return json.loads((tmp_path / "fit.json").read_text())


@pytest.mark.parametrize(
    ("source", "tool"),
    [
        (AIPERF, "AIPerf"),
        (GUIDELLM, "GuideLLM"),
        (INFERENCE_PERF, "inference-perf"),
        (VLLM_R10, "vLLM bench serve"),
    ],
    ids=["aiperf", "guidellm", "inference-perf", "vllm-bench"],
)
def test_each_tools_file_is_fitted_request_by_request(
    tmp_path: Path, source: Path, tool: str
) -> None:
    report = fit(tmp_path, source)
    (read,) = report["sources"]
    assert (read["path"], read["format"], read["fitted"]) == (str(source), tool, "per request")
    assert read["requests"] == report["requests"]["replayed"]
    assert set(read["held_out"]) == {"ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"}
    assert read["held_out_error"] == pytest.approx(report["held_out_error"])


def test_a_vllm_run_without_send_times_is_fitted_on_rebuilt_arrivals(tmp_path: Path) -> None:
    report = fit(tmp_path, VLLM_OLD)
    (read,) = report["sources"]
    assert read["fitted"] == "rebuilt from settings"
    assert read["rebuilt_from"] == [
        {"request_rate": 6.0, "burstiness": 0.7, "seed": 0, "requests": 60}
    ]
    assert 0 <= read["held_out_error"] < 1.0


def test_two_runs_are_judged_each_on_its_own(tmp_path: Path) -> None:
    report = fit(tmp_path, VLLM_R4, VLLM_R10)
    first, second = report["sources"]
    assert first["requests"] == second["requests"] == 60
    # each source holds out its own last share, so each has its own error
    assert report["requests"]["held_out"] == 2 * round(60 * 0.3)
    for source in (first, second):
        assert 0 <= source["held_out_error"] < 1.0
    assert first["held_out"]["ttft_p50"]["measured"] != second["held_out"]["ttft_p50"]["measured"]


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], source: Path) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["fit", str(source), "--preset", BASE, "--out", str(tmp_path / "fitted.toml")])
    assert exit_.value.code == 2
    assert not (tmp_path / "fitted.toml").exists() and not (tmp_path / "fit.json").exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(source) in err
    return err


def test_an_empty_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "profile_export.jsonl"
    empty.write_text("\n")
    assert "empty" in refused(tmp_path, capsys, empty)


def test_a_json_document_of_another_kind_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "benchmarks.json"
    other.write_text(json.dumps({"results": [1, 2, 3]}))
    assert "format the fit reads" in refused(tmp_path, capsys, other)


def test_an_aiperf_record_without_its_ttft_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file of another AIPerf version, whose records name their metrics differently."""
    lines = AIPERF.read_text().splitlines()
    record = json.loads(lines[3])
    record["metrics"]["ttft"] = record["metrics"].pop("time_to_first_token")
    lines[3] = json.dumps(record)
    old = tmp_path / "profile_export.jsonl"
    old.write_text("\n".join(lines) + "\n")
    assert f"{old}:4: metrics: no time_to_first_token object" in refused(tmp_path, capsys, old)


def test_a_vllm_result_saved_without_its_details_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(VLLM_R4.read_text())
    for key in ("ttfts", "itls", "generated_texts", "errors"):  # what vLLM leaves out then
        document.pop(key)
    summary = tmp_path / "vllm.json"
    summary.write_text(json.dumps(document))
    assert "--save-detailed" in refused(tmp_path, capsys, summary)


def test_an_inference_perf_stage_report_points_to_the_per_request_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stage = INFERENCE_PERF.parent / "stage_0_lifecycle_metrics.json"
    assert "per_request: true" in refused(tmp_path, capsys, stage)
