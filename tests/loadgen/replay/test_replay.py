"""`python -m loadgen --replay` against loadgen.sim: each record at its own offset (within the
client's send-lag budget), with its own lengths, at any speed, over shards; bad traces stop
before any load; time slices; Mooncake's hash_ids as prefix-cache hits."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadgen.commands.cli import main
from loadgen.runs import rundir
from loadgen.stack.processes import simulator
from tests.loadgen.engine.test_prompt_cache import hits

QUICK = ["--no-progress", "--seed", "3"]
SEND_LAG_BUDGET_S = 0.025  # --max-send-lag's default, a budget for the run's P99
WORST_LAG_S = 0.1  # any one request, on a machine shared with other jobs


def on_schedule(records: list) -> None:
    """Sent when due: the run within its send-lag budget (as its validity judges it, at
    P90 here for a small sample), no single request far off."""
    lags = sorted(r.send_lag_s for r in records)
    assert lags[int(0.9 * (len(lags) - 1))] <= SEND_LAG_BUDGET_S
    assert lags[-1] <= WORST_LAG_S


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    with simulator("--preset", "llama-70b-bf16-tp4-a100") as url:
        yield url


def served(url: str) -> float:
    total = 0.0
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            total += float(line.rpartition(" ")[2])
    return total


def mooncake_trace(path: Path, n: int = 16, gap_ms: int = 120) -> list[dict]:
    rows = [
        {
            "timestamp": i * gap_ms + (40 if i % 3 == 0 else 0),
            "input_length": 60 + 7 * i,
            "output_length": 2 + i % 4,
            "hash_ids": [0, 100 + i],
        }
        for i in range(n)
    ]
    rows.sort(key=lambda r: r["timestamp"])
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def replay(url: str, trace: Path, out: Path, *flags: str) -> rundir.RunData:
    assert main(["--target", url, "--replay", str(trace), "--out", str(out), *QUICK, *flags]) == 0
    return rundir.read(out)


def offsets(data: rundir.RunData) -> dict[int, float]:
    first = min(r.intended_at for r in data.records)
    return {r.replay_index: r.intended_at - first for r in data.records}


def test_each_record_goes_at_its_offset_with_its_lengths(sim: str, tmp_path: Path) -> None:
    rows = mooncake_trace(tmp_path / "trace.jsonl")
    data = replay(sim, tmp_path / "trace.jsonl", tmp_path / "run")
    assert len(data.records) == len(rows) and all(r.ok for r in data.records)
    for record in data.records:
        row = rows[record.replay_index - 1]
        assert record.input_tokens == row["input_length"]  # sized exactly
        assert record.output_tokens == row["output_length"]  # ignore_eos + max_tokens
        assert record.excluded is None
    on_schedule(data.records)
    found = offsets(data)
    for index, offset in found.items():
        expected = (rows[index - 1]["timestamp"] - rows[0]["timestamp"]) / 1000
        assert offset == pytest.approx(expected, abs=1e-6)
    meta = data.meta["replay"]
    assert meta["format"] == "mooncake" and meta["speed"] == 1.0
    assert meta["window"]["records"] == len(rows) and len(meta["sha256"]) == 64
    assert data.meta["sweep"] == "replay"
    report = (tmp_path / "run" / "report.md").read_text()
    assert "Replay of `trace.jsonl` (mooncake" in report


def test_speed_2_halves_the_offsets_and_a_window_takes_part(sim: str, tmp_path: Path) -> None:
    rows = mooncake_trace(tmp_path / "trace.jsonl")
    data = replay(
        sim,
        tmp_path / "trace.jsonl",
        tmp_path / "run",
        "--replay-speed",
        "2",
        "--replay-start",
        "0.5s",
        "--duration",
        "1s",
    )
    chosen = [r for r in rows if 500 <= r["timestamp"] < 1500]
    assert sorted(r.replay_index for r in data.records) == [rows.index(r) + 1 for r in chosen]
    base = chosen[0]["timestamp"]
    for index, offset in offsets(data).items():
        assert offset == pytest.approx((rows[index - 1]["timestamp"] - base) / 2000, abs=1e-6)
    assert data.meta["replay"]["window"] | {"span_s": None} == {
        "start_s": 0.5,
        "duration_s": 1.0,
        "requests": None,
        "records": len(chosen),
        "first_line": rows.index(chosen[0]) + 1,
        "last_line": rows.index(chosen[-1]) + 1,
        "span_s": None,
    }


def test_a_past_run_replays_to_the_same_arrivals_and_lengths(sim: str, tmp_path: Path) -> None:
    first = replay(
        sim, mooncake_trace(tmp_path / "t.jsonl") and tmp_path / "t.jsonl", tmp_path / "a"
    )
    again = replay(sim, tmp_path / "a" / "requests.jsonl", tmp_path / "b")
    assert again.meta["replay"]["format"] == "requests"
    by_first = {r.replay_index: r for r in first.records}
    before = offsets(first)
    after = offsets(again)
    for record in again.records:
        # the past run's record on that line of its requests.jsonl
        line = json.loads(
            (tmp_path / "a" / "requests.jsonl").read_text().splitlines()[record.replay_index - 1]
        )
        original = by_first[line["replay_index"]]
        assert (record.input_tokens, record.output_tokens) == (
            original.input_tokens,
            original.output_tokens,
        )
        assert after[record.replay_index] == pytest.approx(before[original.replay_index], abs=1e-6)


def test_workers_together_send_what_one_client_does(sim: str, tmp_path: Path) -> None:
    mooncake_trace(tmp_path / "trace.jsonl", n=12)
    single = replay(sim, tmp_path / "trace.jsonl", tmp_path / "one")
    merged = replay(sim, tmp_path / "trace.jsonl", tmp_path / "two", "--workers", "2")
    assert sorted({r.shard for r in merged.records}) == [0, 1]
    one, two = offsets(single), offsets(merged)
    assert one.keys() == two.keys()
    for index in one:
        # one shared start: shards differ only by their start barrier's skew
        assert two[index] == pytest.approx(one[index], abs=0.02)


@pytest.mark.parametrize(
    ("content", "flags", "message"),
    [
        ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{bad\n', [], ":2: not JSON"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,-4,1\n", [], ":2: Context"),
        ("what,is,this\n", [], ":1: no known trace format"),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
            '{"timestamp": 9, "input_length": 9000, "output_length": 4}\n',
            [],
            ":2: 9000 + 4 tokens is more than the model's context (8192)",
        ),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n',
            ["--replay-start", "5s"],
            "holds no records",
        ),
    ],
)
def test_a_bad_trace_exits_2_naming_file_and_line_before_any_load(
    sim: str, tmp_path: Path, capsys, content: str, flags: list[str], message: str
) -> None:
    trace = tmp_path / "bad.trace"
    trace.write_text(content)
    before = served(sim)
    argv = ["--target", sim, "--replay", str(trace), "--out", str(tmp_path / "run"), *QUICK]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err
    assert f"{trace}" in err and message in err
    assert served(sim) == before and not (tmp_path / "run").exists()


def test_skipped_rows_are_counted_in_run_json_and_the_report(sim: str, tmp_path: Path) -> None:
    trace = tmp_path / "dirty.jsonl"
    mooncake_trace(trace, n=6)
    lines = trace.read_text().splitlines()
    lines.insert(2, '{"timestamp": 130, "input_length": "many", "output_length": 3}')
    trace.write_text("\n".join(lines) + "\n")
    data = replay(sim, trace, tmp_path / "run", "--skip-bad-rows")
    assert data.meta["replay"]["bad_rows"]["skipped"] == 1
    assert data.meta["replay"]["bad_rows"]["first"][0]["line"] == 3
    assert len(data.records) == 6
    assert "**1 bad rows skipped**" in (tmp_path / "run" / "report.md").read_text()


def test_a_record_over_the_context_can_be_skipped(sim: str, tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    mooncake_trace(trace, n=4)
    trace.write_text(
        trace.read_text() + '{"timestamp": 900, "input_length": 8190, "output_length": 3}\n'
    )
    data = replay(sim, trace, tmp_path / "run", "--skip-bad-rows")
    assert len(data.records) == 4 and 5 not in {r.replay_index for r in data.records}
    bad = data.meta["replay"]["bad_rows"]
    assert bad["skipped"] == 1 and bad["first"][0]["line"] == 5
    assert data.meta["replay"]["window"]["records"] == 4


def test_slices_name_a_burst_the_server_catches_up_with(sim: str, tmp_path: Path) -> None:
    calm = [(i * 200, 100) for i in range(10)]
    burst = [(2000 + i * 50, 1200) for i in range(16)]  # ~5 s of prefill arriving in 0.8 s
    trace = tmp_path / "burst.jsonl"
    rows = [{"timestamp": t, "input_length": n, "output_length": 4} for t, n in calm + burst]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    replay(sim, trace, tmp_path / "run", "--slice", "1s")
    summary = rundir.read_summary(tmp_path / "run")
    target = next(iter(summary["targets"].values()))
    found = {s["start_s"]: s for s in target["slices"]}
    assert [found[0.0]["sent"], found[1.0]["sent"], found[2.0]["sent"]] == [5, 5, 16]
    assert found[0.0]["backlog"] == found[1.0]["backlog"] == 0
    assert found[2.0]["backlog"] >= 10  # the burst is still queued when its slice ends
    assert found[1.0]["ttft_s"]["p90"] < 0.5 < found[2.0]["ttft_s"]["p90"]
    assert sum(s["sent"] for s in found.values()) == len(rows)
    # a burst at the window's end is no saturation: the server caught up within the drain
    # (a replay it cannot keep up with: tests/loadgen/replay/test_replay_steady.py)
    state = target["steady_state"]
    assert state["steady"] is True and state["unfinished"] == 0 and state["in_flight_end"] >= 10
    report = (tmp_path / "run" / "report.md").read_text()
    assert "worst slice 0:02–0:03" in report and "slices.png" in report
    assert (tmp_path / "run" / "slices.png").stat().st_size > 0


# A Mooncake replay hits the prefix cache exactly where the trace's hash_ids say it should: a
# request's hit is the longest run of leading ids some earlier request had as its own leading
# ids, in blocks of --replay-block-tokens, capped (as vLLM caps it) at the prompt's length less
# one token, in the server's 16-token blocks. Completions requests, so no chat template shifts
# the blocks' boundaries.
BLOCK = 32  # trace tokens per hash id
SERVER_BLOCK = 16  # the simulator's KV block (vLLM's default)
TRACE = [  # (hash_ids, input tokens)
    ([0, 1, 2], 96),
    ([0, 1, 3], 96),  # shares blocks 0 and 1
    ([0, 4], 64),  # shares block 0
    ([5, 1, 2], 96),  # id 1 again, but after another root: a different prefix, no hit
    ([0, 1, 2, 6], 128),  # shares the first request's three blocks
    ([0, 1, 2], 96),  # all of it seen: capped at 95 tokens, 5 server blocks
    ([0, 1, 2, 6, 7], 150),  # a partial last block of its own
]


def expected_hits() -> list[int]:
    seen: set[tuple[int, ...]] = set()
    out = []
    for ids, tokens in TRACE:
        shared = max((k for k in range(len(ids) + 1) if tuple(ids[:k]) in seen), default=0)
        cached = min(shared * BLOCK, tokens - 1)
        out.append(cached // SERVER_BLOCK * SERVER_BLOCK)
        seen.update(tuple(ids[:k]) for k in range(1, len(ids) + 1))
    return out


@pytest.mark.slow
def test_a_mooncake_replay_hits_block_for_block(sim: str, tmp_path: Path) -> None:
    trace = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": i * 700, "input_length": n, "output_length": 2, "hash_ids": ids}
        for i, (ids, n) in enumerate(TRACE)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    steps: list[float] = []  # each rise of the hit counter, in order
    done = threading.Event()

    def watch() -> None:
        last = hits(sim)
        while not done.is_set():
            now = float(hits(sim))
            if now != last:
                steps.append(now - last)
                last = now
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    before = hits(sim)
    watcher.start()
    try:
        argv = ["--target", sim, "--replay", str(trace), "--endpoint", "completions"]
        argv += ["--replay-block-tokens", str(BLOCK), "--out", str(tmp_path / "run")]
        assert main([*argv, "--no-progress"]) == 0
        time.sleep(0.1)
    finally:
        done.set()
        watcher.join()
    want = expected_hits()
    assert want == [0, 64, 32, 0, 96, 80, 128]
    assert hits(sim) - before == sum(want)
    assert steps == [n for n in want if n]  # request by request, 0.7 s apart
    records = [
        json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    ]
    assert [r["input_tokens"] for r in sorted(records, key=lambda r: r["replay_index"])] == [
        n for _, n in TRACE
    ]
