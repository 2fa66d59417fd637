"""The replay's pure core on small traces written here: each format's parsing and detection,
bad rows, windows, speed, shards, blocks, and prompts that share what the trace shared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loadgen.inputs.prompt_text import LEAD, Sizing
from loadgen.replay import ReplaySettings, load
from loadgen.replay.formats import BadRow, TraceRecord, detect, parse
from loadgen.replay.prompts import PromptBook
from loadgen.replay.window import schedule, share, split, window
from tests.support import ROOT

AZURE_2023 = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,2
"""
AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00+00:00,2162,5
2024-05-10 00:00:00.017335+00:00,2399,6
2024-05-10 00:00:01.522314+00:00,76,15
"""


def mooncake(*rows: tuple[int, int, int, list[int]]) -> str:
    return "".join(
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
        for t, i, o, h in rows
    )


def access(arrived: float, inp: int | None, out: int | None, **more: object) -> str:
    line = {
        "ts": "2026-12-01T10:00:00.000Z",
        "level": "info",
        "logger": "latency_proxy.access",
        "msg": "request",
        "operation": "chat",
        "model": "llama",
        "arrived_at": arrived,
        "input_tokens": inp,
        "output_tokens": out,
        "e2e_s": 0.5,
    }
    return json.dumps(line | more) + "\n"


def test_azure_2023_has_100ns_ticks_and_no_zone() -> None:
    parsed = parse(AZURE_2023)
    assert parsed.format == "azure"
    r = parsed.records
    assert [x.line for x in r] == [2, 3, 4]
    assert r[1].at - r[0].at == pytest.approx(4.314579, abs=1e-6)
    assert (r[0].input_tokens, r[0].output_tokens) == (374, 44)
    assert r[0].at == pytest.approx(1700158546.68059, abs=1e-6)  # read as UTC


def test_azure_2024_has_microseconds_and_a_zone_sometimes_without_fraction() -> None:
    r = parse(AZURE_2024).records
    assert [x.at - r[0].at for x in r] == pytest.approx([0.0, 0.017335, 1.522314], abs=1e-6)
    assert [x.output_tokens for x in r] == [5, 6, 15]


def test_azure_columns_in_another_order_and_crlf() -> None:
    text = "GeneratedTokens,TIMESTAMP,ContextTokens\r\n7,2024-05-10 00:00:01+00:00,9\r\n"
    (record,) = parse(text).records
    assert (record.input_tokens, record.output_tokens) == (9, 7)


def test_mooncake_times_are_milliseconds_and_hash_ids_the_prefix() -> None:
    r = parse(mooncake((0, 600, 5, [0, 1]), (0, 700, 6, [0, 2]), (3052, 100, 7, [3]))).records
    assert parse(mooncake((0, 1, 1, []))).format == "mooncake"
    assert [x.at for x in r] == [0.0, 0.0, 3.052]
    assert r[0].prefix == ("0", "1") and r[1].prefix == ("0", "2")
    assert r[0].prefix_unit == "block"


def test_the_proxys_log_skips_other_lines_sorts_by_arrival_and_counts_failures() -> None:
    text = (
        json.dumps({"logger": "latency_proxy", "msg": "started"})
        + "\n"
        + access(10.5, 20, 3, prefix_hashes=["a", "b"])
        + access(10.0, 30, 4)
        + access(11.0, None, None, outcome="upstream_error")
        + access(12.0, None, None, operation=None, path="/v1/models")
    )
    parsed = parse(text)
    assert parsed.format == "proxy"
    assert [(r.line, r.at) for r in parsed.records] == [(3, 10.0), (2, 10.5)]
    assert parsed.records[1].prefix == ("a", "b") and parsed.records[1].prefix_unit == "message"
    assert parsed.records[0].model == "llama"
    (withheld,) = parse(access(1.0, 5, 5, model="other")).records
    assert withheld.model is None  # the proxy withheld an unlisted name: the target's model
    assert parsed.unreplayable == 1


def test_a_proxy_line_from_before_arrived_at_is_placed_by_ts_minus_e2e() -> None:
    line = json.loads(access(0, 5, 5))
    del line["arrived_at"]
    (record,) = parse(json.dumps(line)).records
    assert record.at == pytest.approx(1796119200.0 - 0.5)


def test_requests_jsonl_replays_the_first_targets_measured_requests() -> None:
    def rec(target: str, at: float, excluded: str | None = None, ok: bool = True) -> str:
        item = {
            "request_id": "x",
            "target": target,
            "intended_at": at,
            "ok": ok,
            "excluded": excluded,
            "input_tokens": 11 if ok else None,
            "output_tokens": 4 if ok else None,
        }
        return json.dumps(item) + "\n"

    text = rec("a", 2.0) + rec("b", 1.0) + rec("a", 1.5) + rec("a", 0.1, "warmup")
    text += rec("a", 3.0, ok=False)
    parsed = parse(text)
    assert parsed.format == "requests"
    assert [(r.line, r.at) for r in parsed.records] == [(3, 1.5), (1, 2.0)]
    assert parsed.unreplayable == 1


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        (AZURE_2023.replace("396", "3x6"), 3, "ContextTokens is not a whole number"),
        (AZURE_2023.replace(",109", ",0"), 3, "GeneratedTokens must be a whole number from 1"),
        (AZURE_2023.replace("18:15:50", "18:14:50"), 3, "goes back in time"),
        (AZURE_2023.replace("2023-11-16 18:15:51", "yesterday"), 4, "not a date and time"),
        (AZURE_2023.replace(",2\n", ",2,9\n"), 4, "4 columns, the header has 3"),
        (mooncake((5, 10, 1, [])) + "{oops\n", 2, "not JSON"),
        (mooncake((-5, 10, 1, [])), 1, "timestamp is negative"),
        (mooncake((9, 10, 1, []), (8, 10, 1, [])), 2, "goes back in time"),
        (mooncake((0, 10, 1, ["a"])), 1, "hash_ids must be a list of integers"),
        (mooncake((0, 0, 1, [])), 1, "input_length must be a whole number from 1"),
    ],
)
def test_a_bad_row_is_named_by_line(text: str, line: int, reason: str) -> None:
    with pytest.raises(BadRow) as caught:
        parse(text)
    assert caught.value.line == line and reason in caught.value.reason
    skipped = parse(text, skip_bad=True)
    assert [b.line for b in skipped.bad] == [line]
    assert line not in [r.line for r in skipped.records]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("hello,world\n1,2\n", "no known trace format"),
        ('{"foo": 1}\n', "no known trace format"),
        ("{nope\n", "not JSON"),
    ],
)
def test_unknown_formats_are_errors_on_line_1(text: str, reason: str) -> None:
    with pytest.raises(BadRow) as caught:
        detect(text)
    assert caught.value.line == 1 and reason in caught.value.reason


def test_a_forced_format_wins_over_detection_and_a_bad_header_is_fatal() -> None:
    with pytest.raises(BadRow, match="line 1: not JSON"):
        parse(AZURE_2023, "mooncake")
    with pytest.raises(BadRow, match="header lacks ContextTokens"):
        parse("TIMESTAMP,Tokens\n2024-01-01,3\n", "azure", skip_bad=True)
    with pytest.raises(ValueError, match="unknown trace format"):
        parse(AZURE_2023, "csv")


def records(*ats: float) -> list[TraceRecord]:
    return [
        TraceRecord(line=i + 1, at=at, input_tokens=10, output_tokens=2) for i, at in enumerate(ats)
    ]


def test_the_window_opens_after_start_and_closes_by_duration_or_requests() -> None:
    trace = records(100.0, 100.5, 101.0, 102.0, 104.0)
    assert [r.line for r in window(trace, 0.5)] == [2, 3, 4, 5]
    assert [r.line for r in window(trace, 0.5, duration_s=1.5)] == [2, 3]
    assert [r.line for r in window(trace, 0.0, requests=2)] == [1, 2]
    with pytest.raises(ValueError, match="holds no records: the trace spans 4 s"):
        window(trace, 10.0)
    with pytest.raises(ValueError, match="no records"):
        window([], 0.0)


def test_offsets_count_from_the_windows_first_record_divided_by_speed() -> None:
    chosen = window(records(100.0, 100.5, 101.0, 103.0), 0.25)
    assert [a.offset_s for a in schedule(chosen)] == [0.0, 0.5, 2.5]
    assert [a.offset_s for a in schedule(chosen, 2.0)] == [0.0, 0.25, 1.25]
    with pytest.raises(ValueError, match="positive"):
        schedule(chosen, 0)


def test_shards_together_send_what_one_client_would() -> None:
    arrivals = schedule(records(*[i * 0.1 for i in range(10)]))
    shards = [share(arrivals, i, 3) for i in range(3)]
    merged = sorted((a for s in shards for a in s), key=lambda a: a.offset_s)
    assert merged == arrivals
    assert [len(s) for s in shards] == [4, 3, 3]


def test_blocks_split_the_window_each_from_zero() -> None:
    parts = split(schedule(records(0, 1, 2, 3, 4)), 2)
    assert [[a.record.line for a in p] for p in parts] == [[1, 2, 3], [4, 5]]
    assert [a.offset_s for a in parts[1]] == [0.0, 1.0]


SIZING = Sizing(words=("a", "b", "c", "d", "e", "f", "g", "h"), overhead=3, source="test")


def words(text: str) -> list[str]:
    head, *rest = text.split(" ")
    assert head == LEAD
    return rest


def test_blocks_named_before_come_back_as_the_same_words() -> None:
    book = PromptBook(SIZING, 1, block_tokens=16)
    first = TraceRecord(line=1, at=0, input_tokens=40, output_tokens=1, prefix=("0", "1", "2"))
    second = TraceRecord(line=2, at=0, input_tokens=40, output_tokens=1, prefix=("0", "1", "9"))
    third = TraceRecord(line=3, at=0, input_tokens=40, output_tokens=1, prefix=("5", "1", "2"))
    a, b, c = (words(book.text(r)) for r in (first, second, third))
    assert len(a) == len(b) == len(c) == 40 - SIZING.overhead  # sized as synthetic prompts
    block0 = 16 - SIZING.overhead  # the first block holds the fixed overhead too
    assert a[: block0 + 16] == b[: block0 + 16]  # blocks 0 and 1 shared
    assert a[block0 + 16 :] != b[block0 + 16 :]  # block 2 differs
    assert a[:block0] != c[:block0]


def test_messages_named_before_come_back_and_new_ones_share_what_is_left() -> None:
    book = PromptBook(SIZING, 2)
    turn1 = TraceRecord(1, 0, 43, 1, prefix=("s", "u1"), prefix_unit="message")
    turn2 = TraceRecord(2, 1, 103, 1, prefix=("s", "u1", "a1", "u2"), prefix_unit="message")
    other = TraceRecord(3, 2, 43, 1, prefix=("s", "v1"), prefix_unit="message")
    one, two, three = (words(book.text(r)) for r in (turn1, turn2, other))
    assert len(one) == 40 and len(two) == 100 and len(three) == 40
    assert two[:40] == one  # the whole first turn is the second's prefix
    assert three[:20] == one[:20] and three[20:] != one[20:]  # the system message only


def test_a_record_without_prefix_gets_a_fresh_prompt_of_its_length() -> None:
    book = PromptBook(SIZING, 3)
    texts = [book.text(TraceRecord(i, 0, 200, 1)) for i in range(2)]
    assert len(words(texts[0])) == 197 and texts[0] != texts[1]


def test_shards_write_each_prompt_as_one_client_would() -> None:
    """A shard holds every Nth record; a block it meets first must still be the text a single
    client gave it, or prefix-cache hits across shards are lost (and fresh prompts that a
    shared stream made alike would hit where the trace's did not)."""
    records = [
        TraceRecord(1, 0, 600, 1, prefix=("0", "1")),
        TraceRecord(2, 0, 600, 1),
        TraceRecord(3, 0, 1100, 1, prefix=("0", "1", "2")),
        TraceRecord(4, 0, 600, 1),
        TraceRecord(5, 0, 1100, 1, prefix=("7", "1", "2")),
    ]
    alone = [PromptBook(SIZING, 9, block_tokens=256).text(r) for r in records]
    shards = [PromptBook(SIZING, 9, block_tokens=256) for _ in range(2)]
    sharded = [shards[i % 2].text(r) for i, r in enumerate(records)]
    assert sharded == alone
    assert alone[1] != alone[3]  # fresh prompts are fresh
    assert PromptBook(SIZING, 10, block_tokens=256).text(records[0]) != alone[0]  # the seed counts


def test_load_names_the_file_and_line_and_keeps_its_digest(tmp_path: Path) -> None:
    trace = tmp_path / "day.csv"
    trace.write_text(AZURE_2023.replace("396", "oops"))
    settings = ReplaySettings(file=str(trace))
    with pytest.raises(ValueError, match=rf"{trace}:3: ContextTokens .*--skip-bad-rows"):
        load(settings, None, None)
    skipped = load(ReplaySettings(file=str(trace), skip_bad_rows=True, speed=2.0), None, None)
    meta = skipped.meta
    assert meta["file"] == "day.csv" and len(meta["sha256"]) == 64
    assert meta["bad_rows"]["skipped"] == 1 and meta["bad_rows"]["first"][0]["line"] == 3
    assert meta["window"]["records"] == 2 and meta["speed"] == 2.0
    assert skipped.arrivals[1].offset_s == pytest.approx(4.31941 / 2, abs=1e-6)
    with pytest.raises(ValueError, match=rf"{trace}: the window"):
        load(ReplaySettings(file=str(trace), start_s=60, skip_bad_rows=True), None, None)
    with pytest.raises(ValueError, match="No such file"):
        load(ReplaySettings(file=str(tmp_path / "missing.csv")), None, None)


def test_the_example_trace_is_azure_shaped() -> None:
    script = ROOT / "examples" / "traces" / "azure_like.py"
    text = subprocess.run(
        [sys.executable, str(script), "--minutes", "10"], capture_output=True, text=True, check=True
    ).stdout
    parsed = parse(text)
    assert parsed.format == "azure" and not parsed.bad
    r = parsed.records
    assert 9 * 60 < r[-1].at - r[0].at < 10 * 60
    assert 2.0 * 600 * 0.8 < len(r) < 3.2 * 600 * 1.2  # 2 req/s swelling to 3.2
    assert 800 < float(np.median([x.input_tokens for x in r])) < 1300  # Splitwise's 1,020
    assert 100 < float(np.median([x.output_tokens for x in r])) < 160  # and 129


def test_a_trace_read_again_is_the_file_as_it_is_now(tmp_path: Path) -> None:
    """The parse is kept between loads of one file (a capacity search reads it every probe),
    but a file written since is read anew, and another file is never taken for it."""
    path = tmp_path / "trace.jsonl"
    row = {"timestamp": 0, "input_length": 100, "output_length": 10}
    path.write_text(json.dumps(row) + "\n")
    settings = ReplaySettings(file=str(path))
    assert len(load(settings, None, None).arrivals) == 1
    assert len(load(settings, None, None).arrivals) == 1
    path.write_text("".join(json.dumps(row | {"timestamp": i}) + "\n" for i in range(3)))
    assert len(load(settings, None, None).arrivals) == 3
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(row | {"output_length": 7}) + "\n")
    (arrival,) = load(ReplaySettings(file=str(other)), None, None).arrivals
    assert arrival.record.output_tokens == 7
