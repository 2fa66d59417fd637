"""A virtual: target runs the workload on the simulator's twin and writes a real run's
directory, its figures marked as predicted; they are the twin's own for the same arrivals,
a second replica lowers a saturated TTFT, and a bad virtual: name is one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.commands.cli import main
from loadgen.engine import virtual
from loadgen.sim import twin
from loadgen.sim.model import presets

PRESET = "llama-70b-bf16-tp4-a100"
TARGET = f"virtual:{PRESET}"
CONFIG = Path(__file__).parents[2] / "sim" / "model" / "configs" / "llama-3-8b.json"


def virtual_run(out: Path, *flags: str) -> dict:
    code = main(["--target", TARGET, "--out", str(out), "--no-progress", *flags])
    assert code == 0
    return json.loads((out / "summary.json").read_text())


def test_a_virtual_run_writes_the_run_directory_marked_predicted(tmp_path: Path, capsys):
    out = tmp_path / "run"
    virtual_run(out, "--rate", "4", "--duration", "10s", "--warmup", "1s")
    for name in ("requests.jsonl", "run.json", "summary.json", "report.md", "report.html"):
        assert (out / name).is_file(), name
    assert json.loads((out / "run.json").read_text())["meta"]["virtual"] is True
    opening = "How far to trust them: from a bundled preset; not fitted to your server."
    assert opening in (out / "report.md").read_text()
    assert opening in capsys.readouterr().out
    lines = (out / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["excluded"] for r in records} == {None, "warmup"}


def test_a_rebuilt_virtual_run_still_says_what_it_rests_on(tmp_path: Path):
    out = tmp_path / "run"
    first = virtual_run(out, "--rate", "4", "--duration", "5s", "--warmup", "0s")
    assert main(["report", str(out)]) == 0
    rebuilt = json.loads((out / "summary.json").read_text())
    assert rebuilt["virtual"] == first["virtual"] and rebuilt["virtual"]["bundled"] is True
    assert "not fitted to your server" in (out / "report.md").read_text()


def test_its_figures_are_the_twins_for_the_same_arrivals(tmp_path: Path):
    out = tmp_path / "run"
    args = ("--rate", "6", "--duration", "20s", "--warmup", "0s", "--input-tokens", "200-2000")
    summary = virtual_run(out, *args)
    start = json.loads((out / "run.json").read_text())["phases"][0]["start_at"]
    lines = (out / "requests.jsonl").read_text().splitlines()
    records = sorted((json.loads(line) for line in lines), key=lambda r: r["intended_at"])
    assert len(records) > 80
    requests = [
        twin.Request(r["intended_at"] - start, r["input_tokens"], r["output_tokens"])
        for r in records
    ]
    timings = twin.run(presets.load(PRESET), requests).timings
    ttft = [t.ttft for t in timings]
    tpot = [t.tpot for t in timings]
    assert [r["ttft_s"] for r in records] == pytest.approx(ttft, rel=1e-4)
    assert [r["tpot_s"] for r in records] == pytest.approx(tpot, rel=1e-4)
    metrics = summary["targets"][TARGET]["metrics"]
    assert metrics["ttft_s"]["p50"] == pytest.approx(float(np.median(ttft)), rel=0.05)
    assert metrics["tpot_s"]["p50"] == pytest.approx(float(np.median(tpot)), rel=0.05)


def test_more_replicas_lower_a_saturated_ttft(tmp_path: Path):
    load = ("--rate", "30", "--duration", "8s", "--warmup", "0s", "--drain", "600s")
    one = virtual_run(tmp_path / "one", *load)
    three = virtual_run(tmp_path / "three", *load, "--virtual-replicas", "3")
    ttft = [s["targets"][TARGET]["metrics"]["ttft_s"]["p50"] for s in (one, three)]
    assert ttft[1] < ttft[0] / 2
    (served,) = three["virtual"]["requests_per_replica"]
    assert len(served) == 3 and min(served) > 0
    assert sum(served) == three["targets"][TARGET]["requests"]["ok"]


def test_virtual_args_change_the_engine(tmp_path: Path):
    load = ("--concurrency", "32", "--requests", "64", "--warmup", "0s")
    full = virtual_run(tmp_path / "full", *load)
    small = virtual_run(tmp_path / "small", *load, "--virtual-args", "--max-num-seqs 4")
    ttft = [s["targets"][TARGET]["metrics"]["ttft_s"]["p50"] for s in (full, small)]
    assert ttft[1] > ttft[0] * 2  # 28 of 32 streams wait for a seat
    assert small["targets"][TARGET]["requests"]["ok"] == 64


def test_a_bare_virtual_target_runs_the_catalogues_gpu_and_model(tmp_path: Path, capsys):
    load = ["--concurrency", "8", "--requests", "32", "--warmup", "0s", "--no-progress"]
    tpot = {}
    for gpu in ("a100-sxm-80gb", "h100-sxm"):
        out = tmp_path / gpu
        args = f"--gpu {gpu} --model-config {CONFIG} --dtype bf16 -tp 2"
        code = main(["--target", "virtual:", "--virtual-args", args, "--out", str(out), *load])
        assert code == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["virtual"]["preset"] == f"llama-3-8b-bf16-tp2-{gpu}"
        (metrics,) = [t["metrics"] for t in summary["targets"].values()]
        tpot[gpu] = metrics["tpot_s"]["p50"]
    assert tpot["h100-sxm"] < tpot["a100-sxm-80gb"] / 1.3  # 3.35 against 2.04 TB/s
    assert "from an uncalibrated preset; not fitted to your server" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "args", "says"),
    [
        ("virtual:no-such-preset", "", "unknown preset 'no-such-preset'"),
        ("virtual:", "", "--target virtual:: name a preset"),
        ("virtual:", "--gpu h100-sxm", "--virtual-args: --gpu and --model-config go together"),
        ("virtual:", f"--gpu v100 --model-config {CONFIG}", "--gpu v100: not in the catalogue"),
        (TARGET, f"--gpu h100-sxm --model-config {CONFIG}", "a preset or the catalogue, not both"),
        ("virtual:/nowhere/fitted.toml", "", "no such preset file"),
        (TARGET, "--max-num-seqs many", "--virtual-args"),
        (TARGET, "--no-such-flag 1", "cannot honour --no-such-flag"),
        (TARGET, "--stream-interval 0", "--stream-interval: 0: must be at least 1"),
        (TARGET, "--max-num-seqs -3", "--max-num-seqs: -3: must be at least 1"),
    ],
)
def test_a_bad_virtual_target_is_one_line_and_exit_2(
    tmp_path: Path, capsys, target: str, args: str, says: str
):
    out = tmp_path / "run"
    code = main(["--target", target, "--virtual-args", args, "--rate", "1", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert not out.exists()


def test_a_replay_keeps_the_traces_arrivals_at_its_speed(tmp_path: Path):
    virtual_run(tmp_path / "capture", "--rate", "4", "--duration", "5s", "--warmup", "0s")
    trace = tmp_path / "capture" / "requests.jsonl"
    captured = [json.loads(line) for line in trace.read_text().splitlines()]
    virtual_run(tmp_path / "replay", "--replay", str(trace), "--replay-speed", "2")
    lines = (tmp_path / "replay" / "requests.jsonl").read_text().splitlines()
    replayed = [json.loads(line) for line in lines]
    assert [r["replay_index"] for r in replayed] == list(range(1, len(captured) + 1))
    gaps = np.diff([r["intended_at"] for r in captured])
    assert np.diff([r["intended_at"] for r in replayed]) == pytest.approx(gaps / 2, abs=1e-5)
    meta = json.loads((tmp_path / "replay" / "run.json").read_text())["meta"]
    assert meta["virtual"] is True and meta["replay"]["speed"] == 2


def test_a_fitted_presets_run_opens_with_its_held_out_error():
    from loadgen.reports.run import predicted

    twin_run = {"preset": "fitted", "replicas": 2, "args": "--max-num-seqs 8", "bundled": False}
    twin_run["what_if"] = twin_run["args"]
    said = predicted(twin_run | {"fit": {"error": 0.071}})
    assert said.endswith("trust them: held-out error 7.1%, fitted without --max-num-seqs 8.")
    assert "2 replicas of preset fitted" in said
    assert "records no held-out error" in predicted(twin_run | {"fit": None})


@pytest.mark.parametrize(
    ("args", "what_if"),
    [
        ("--max-num-seqs 1024", ""),
        ("--max-num-seqs=1024 --stream-interval 2 --max-num-batched-tokens 8192", ""),
        ("--max-num-seqs 1024 --max-num-batched-tokens 4096", "--max-num-batched-tokens 4096"),
        ("-tp 8 --max-num-seqs 512", "-tp 8 --max-num-seqs 512"),
    ],
)
def test_only_flags_that_change_the_fitted_preset_are_a_what_if(
    tmp_path: Path, capsys, args: str, what_if: str
):
    """A fitted preset holds the engine flags it was fitted with: repeating them in
    --virtual-args asks nothing its held-out error does not cover."""
    base = presets.load(PRESET)
    engine = dataclasses.replace(base.engine, max_num_seqs=1024, max_num_batched_tokens=8192)
    fitted = tmp_path / "fitted.toml"
    fitted.write_text(presets.dump(dataclasses.replace(base, engine=engine, fit={"error": 0.05})))
    out = tmp_path / "run"
    load = ["--rate", "2", "--duration", "3s", "--warmup", "0s", "--no-progress"]
    code = main(["--target", f"virtual:{fitted}", "--virtual-args", args, "--out", str(out), *load])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["virtual"]["args"] == args and summary["virtual"]["what_if"] == what_if
    said = capsys.readouterr().out
    if what_if:
        assert f"held-out error 5%, fitted without {what_if}." in said
    else:
        assert "held-out error 5%." in said and "fitted without" not in said


def test_a_run_past_its_budget_is_refused_before_it_starts(tmp_path: Path, capsys) -> None:
    """--rate 500 for an hour is 1.8 million requests: about two hours to simulate. It is
    refused in one line with the estimate, where it used to run on with memory rising."""
    out = tmp_path / "run"
    argv = ["--target", TARGET, "--rate", "500", "--duration", "1h", "--out", str(out)]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "a virtual run of ~1,8" in line and "past --virtual-budget 5.0 min" in line, line
    assert not out.exists()


def test_the_estimate_counts_the_windows_requests_and_their_memory() -> None:
    window = virtual.Window(10.0, 100.0, None)
    assert virtual.expected_requests("rate", [2.0, 4.0], window) == 660
    assert virtual.expected_requests("rate", [2.0], window, turns=3) == 660
    assert virtual.expected_requests("concurrency", [8], virtual.Window(0, None, 500)) == 500
    assert virtual.expected_requests("concurrency", [8], window) is None  # the twin's to tell
    assert virtual.cost_fault(10_000, budget_s=300, available=8 << 30) is None
    assert "past --virtual-budget 5.0 min" in virtual.cost_fault(100_000, 300, 8 << 30)
    assert "GB of records" in virtual.cost_fault(10_000, 300, available=100 << 20)


def test_two_virtual_targets_run_the_same_arrivals_into_one_report(tmp_path: Path) -> None:
    """Two presets compared as two servers are: one run, the same arrivals and lengths into
    each, both in summary.json and a comparison in the report."""
    other = "virtual:qwen-72b-gptq-tp4-a100"
    out = tmp_path / "run"
    argv = ["--target", "virtual:llama-70b-awq-tp4-a100", "--target", other, "--rate", "2"]
    argv += ["--duration", "10s", "--warmup", "0s", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["targets"]) == ["virtual:llama-70b-awq-tp4-a100", other]
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    by = {t: [r for r in records if r["target"] == t] for t in summary["targets"]}
    first, second = by.values()
    assert len(first) == len(second) > 10
    assert [r["intended_at"] for r in first] == [r["intended_at"] for r in second]
    assert [r["input_tokens"] for r in first] == [r["input_tokens"] for r in second]
    assert set(summary["virtual"]["by_target"]) == set(summary["targets"])
    report = (out / "report.md").read_text()
    assert "loadgen comparison" in report
    assert "(preset llama-70b-awq-tp4-a100; preset qwen-72b-gptq-tp4-a100)" in report
