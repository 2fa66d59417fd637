"""`python -m loadgen` end to end against the scripted upstream: run directories, workers,
shards and merge, compare; prompt calibration against the scripted upstream and loadgen.sim."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.commands.cli import main
from loadgen.inputs.bounds import shard
from loadgen.inputs.prompt_text import WORDS
from loadgen.runs import rundir
from tests.support import ROOT
from tests.support.scripted_upstream import control, running
from tests.support.timing import on_time, wall_clock

QUICK = ["--output-tokens", "3", "--input-tokens", "32", "--warmup", "0.2s", "--no-progress"]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with running(0.05, 0.01, {"tokenizer": "subwords", "prompt_tokens": 7}) as url:
        yield url


def test_run_directory_contract(upstream: str, tmp_path: Path, capsys) -> None:
    localhost = upstream.replace("127.0.0.1", "localhost")
    out = tmp_path / "run"
    argv = [
        "--target",
        upstream,
        "--target",
        localhost,
        "--requests",
        "12",
        "--concurrency",
        "3",
        "--blocks",
        "2",
        "--slo",
        "ttft=40ms",
        "--out",
        str(out),
        *QUICK,
    ]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    names = [upstream.split("//")[1], localhost.split("//")[1]]
    assert list(summary["targets"]) == names
    for name in names:
        t = summary["targets"][name]
        for metric in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
            assert {"p50", "p90", "p99", "p999", "mean", "count"} <= set(t["metrics"][metric])
            assert {"p50", "p99"} <= set(t["metrics"][metric]["ci95"])
        assert set(t["throughput"]) >= {"requests_per_s", "output_tokens_per_s"}
        assert t["requests"]["ok"] == 12 and t["requests"]["failed"] == 0
        assert set(t["goodput"]) >= {"requests_per_s", "fraction"}
        assert t["goodput"]["fraction"] == 0  # TTFT ≈ 50 ms never meets 40 ms
        assert t["valid"] is True and t["invalid_reasons"] == []
    lines = (out / "requests.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert sum(not r["excluded"] for r in records) == 24
    assert {
        "request_id",
        "target",
        "intended_at",
        "sent_at",
        "ttft_s",
        "tpot_s",
        "itl_s",
        "input_tokens",
        "output_tokens",
        "status",
        "error",
    } <= set(records[0])
    report = (out / "report.md").read_text()
    assert "## " + names[0] in report and "latency_cdf.png" in report
    assert f"### Differences against {names[0]}" in report  # two targets: compared in place
    assert (out / "timeline.png").exists()
    printed = capsys.readouterr().out
    assert "TTFT P50" in printed and str(out) in printed


def test_sweep_writes_a_throughput_latency_curve(upstream: str, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    argv = [
        "--target",
        upstream,
        "--concurrency",
        "1,4",
        "--requests",
        "8",
        "--out",
        str(out),
        *QUICK,
    ]
    assert main(argv) == 0
    summary = rundir.read_summary(out)
    assert [p["level"] for p in summary["sweep"]["points"]] == [1, 4]
    assert (out / "throughput_latency.png").stat().st_size > 1000


def test_shards_merge_exactly(upstream: str, tmp_path: Path, monkeypatch) -> None:
    shards = []
    for index in range(2):
        shards.append(tmp_path / f"s{index}")
        argv = [
            "--target",
            upstream,
            "--requests",
            "9",
            "--concurrency",
            "3",
            "--shard",
            f"{index}/2",
            "--out",
            str(shards[-1]),
            *QUICK,
        ]
        assert main(argv) == 0
    counts = [rundir.read_summary(s)["targets"] for s in shards]
    name = next(iter(counts[0]))
    assert [c[name]["requests"]["ok"] for c in counts] == [5, 4]
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, shards), "--out", str(merged)]) == 0
    summary = rundir.read_summary(merged)
    assert summary["targets"][name]["requests"]["ok"] == 9
    assert summary["targets"][name]["metrics"]["ttft_s"]["count"] == 9
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert shard("4") == (3, 4)
    assert shard("1/2") == (1, 2)


@wall_clock
def test_workers_run_as_processes_with_one_result(upstream: str, tmp_path: Path) -> None:
    out = tmp_path / "workers"
    argv = [
        sys.executable,
        "-m",
        "loadgen",
        "--target",
        upstream,
        "--workers",
        "2",
        "--requests",
        "10",
        "--concurrency",
        "4",
        "--out",
        str(out),
        *QUICK,
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    summary = rundir.read_summary(out)
    target = next(iter(summary["targets"].values()))
    assert target["requests"]["ok"] == 10
    assert {r.shard for r in rundir.read(out).records} == {0, 1}
    assert (out / "shards" / "shard-1" / "summary.json").exists()
    # the workers waited for each other and began their first block at one moment
    shards = [rundir.read(out / "shards" / f"shard-{i}") for i in (0, 1)]
    assert shards[0].meta["synced_start_at"] == shards[1].meta["synced_start_at"]
    first_blocks = [s.phases[0].start_at - s.meta["synced_start_at"] for s in shards]
    assert all(on_time(at, 0.2) for at in first_blocks)  # after the 0.2 s warmup


def test_compare_two_runs(upstream: str, tmp_path: Path, capsys) -> None:
    for name in ("a", "b"):
        assert (
            main(
                [
                    "--target",
                    upstream,
                    "--requests",
                    "6",
                    "--concurrency",
                    "2",
                    "--out",
                    str(tmp_path / name),
                    *QUICK,
                ]
            )
            == 0
        )
    capsys.readouterr()
    assert (
        main(
            ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp.md")]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "## Differences against a/" in text
    assert "- both meet TTFT ≤ 800 ms at P50" in text  # 6 requests support no more than a P50
    assert (tmp_path / "cmp.md").read_text() == text
    runs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert main(["compare", *runs, "--slo-percentile", "p99", "--slo", "ttft=1ms"]) == 0
    text = capsys.readouterr().out
    assert "- TTFT ≤ 1 ms at P99: too few samples to tell" in text


def calibrated_run(target: str, out: Path, *flags: str, tokens: int = 37) -> rundir.RunData:
    """A short run with fixed prompt lengths; its run directory."""
    argv = ["--target", target, "--requests", "4", "--concurrency", "2", "--out", str(out)]
    assert main([*argv, *QUICK, "--input-tokens", str(tokens), *flags]) == 0
    return rundir.read(out)


def prompt_lengths(data: rundir.RunData) -> set[int]:
    return {r.input_tokens for r in data.records if not r.excluded}


@pytest.mark.parametrize(("endpoint", "overhead"), [("chat", 6), ("completions", 2)])
def test_prompts_hit_the_length_the_upstream_counts(
    upstream: str, tmp_path: Path, endpoint: str, overhead: int
) -> None:
    """The scripted upstream counts words of 5+ letters as two tokens and has a chat template;
    every prompt still comes out at exactly --input-tokens, as its usage reports."""
    control(upstream, prompt_tokens=None)  # usage counts the prompt
    data = calibrated_run(upstream, tmp_path / "run", "--endpoint", endpoint)
    assert prompt_lengths(data) == {37}
    short_words = sum(len(w) <= 4 for w in WORDS)
    assert data.meta["prompt_sizing"] == {
        "source": "tokenize",
        "overhead": overhead,
        "words": short_words,
    }


def test_prompts_sized_by_a_local_tokenizer(upstream: str, tmp_path: Path) -> None:
    """A BPE tokenizer.json with the upstream's rule: words of up to four letters are one
    token, longer ones several; a BOS token. Completions come out exact without /tokenize's
    help; chat is sized without the template (a tokenizer file has none)."""
    tokenizers = pytest.importorskip("tokenizers")
    letters = sorted(set("".join(WORDS)))
    vocab = {token: i for i, token in enumerate(["<s>", "<unk>", *letters])}
    merges = []
    for word in (w for w in WORDS if len(w) <= 4):
        for i in range(1, len(word)):
            if word[: i + 1] not in vocab:
                vocab[word[: i + 1]] = len(vocab)
                merges.append((word[:i], word[i]))
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, merges, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.post_processor = tokenizers.processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", 0)]
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    control(upstream, prompt_tokens=None)  # usage counts the prompt
    local = ("--tokenizer", str(tmp_path / "tokenizer.json"))
    data = calibrated_run(upstream, tmp_path / "completions", *local, "--endpoint", "completions")
    assert prompt_lengths(data) == {37}
    assert data.meta["prompt_sizing"]["source"] == "tokenizer"
    chat = calibrated_run(upstream, tmp_path / "chat", *local, "--endpoint", "chat")
    assert prompt_lengths(chat) == {37 - 1 + 3 + 2}  # no BOS in chat; role and generation


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    """loadgen.sim in fixed timing: its /tokenize counts whitespace runs plus a chat template."""
    with running(0.005, 0.001) as url:
        yield url


@pytest.mark.parametrize(("endpoint", "overhead"), [("chat", 3), ("completions", 1)])
def test_prompts_hit_the_length_the_simulator_counts(
    sim: str, tmp_path: Path, endpoint: str, overhead: int
) -> None:
    data = calibrated_run(sim, tmp_path / "run", "--endpoint", endpoint, tokens=100)
    assert prompt_lengths(data) == {100}
    sizing = data.meta["prompt_sizing"]
    assert sizing == {"source": "tokenize", "overhead": overhead, "words": len(WORDS)}


def test_bad_input_is_a_clean_error(tmp_path: Path, capsys) -> None:
    assert main(["--target", "nowhere", "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "unknown target" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--concurrency", "4", "--rate", "2"])


@wall_clock
def test_the_stall_threshold_decides_which_gaps_are_stalls(tmp_path: Path) -> None:
    """A 0.4 s pause after the second token: a stall under --stall-threshold 300ms, none
    under the default 1 s; the largest gap is the pause either way."""
    with running(0.02, 0.01, {"hang_after": 2, "hang_s": 0.4}) as url:
        runs = {}
        for threshold in ("300ms", None):
            out = tmp_path / (threshold or "default")
            flags = ["--stall-threshold", threshold] if threshold else []
            argv = ["--target", url, "--requests", "3", "--concurrency", "1", "--out", str(out)]
            assert main([*argv, *QUICK, "--output-tokens", "6", *flags]) == 0
            runs[threshold] = [r for r in rundir.read(out).records if not r.excluded]
    assert [r.stalls for r in runs["300ms"]] == [1, 1, 1]
    assert [r.stalls for r in runs[None]] == [0, 0, 0]
    for records in runs.values():
        assert all(on_time(r.max_itl_s, 0.4) for r in records)


def test_the_progress_line_counts_requests_as_they_finish(upstream: str, tmp_path: Path) -> None:
    argv = ["--target", upstream, "--requests", "6", "--concurrency", "2", "--progress"]
    argv += [a for a in QUICK if a != "--no-progress"] + ["--out", str(tmp_path / "run")]
    command = [sys.executable, "-m", "loadgen", *argv]
    done = subprocess.run(command, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    last = done.stderr.decode().split("\r\x1b[2K")[-1].splitlines()[0]
    assert int(last.split(" ok")[0].split()[-1]) >= 6, last
