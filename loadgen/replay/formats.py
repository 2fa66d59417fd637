"""Trace files in, `TraceRecord`s out: the formats `--replay` reads. Pure parsing, no I/O.

Each format keeps what a replay needs of a request: when it arrived, how long its prompt was,
how many tokens it generated, and where known its model and which parts of its prompt it
shared with earlier requests. Sources (docs/loadgen/replay.md has the details):

azure     Azure LLM inference traces (Azure/AzurePublicDataset, AzureLLMInferenceDataset2023
          and 2024): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`; TIMESTAMP is wall-clock,
          `2023-11-16 18:15:46.6805900` (2023, 100 ns ticks, no zone: UTC) or
          `2024-05-10 00:00:00.009930+00:00` (2024, microseconds, a zone).
mooncake  Mooncake's traces (kvcache-ai/Mooncake, FAST '25): JSON lines `{"timestamp": ms
          since the first request, "input_length", "output_length", "hash_ids": [...]}`, one
          hash id per block of the prompt (512 tokens in the published traces); with
          AIPerf's `session_id` and `delay`, its sessions' turns (turns.py).
requests  loadgen's own requests.jsonl: the measured requests of the run's first target.
otlp      GenAI spans as OTLP JSON (a collector's file exporter): each model call, its session
          (gen_ai.conversation.id, else its trace) and the call it waited for (otlp.py).
proxy     latency_proxy's `request` log lines (JSON, as on stdout or exported from Loki):
          `arrived_at`, `model`, `input_tokens`, `output_tokens` and, captured with
          `--content-capture hash`, `prefix_hashes` (one per message, each covering the
          conversation up to and including that message); of a chat call, its session,
          the call it continues (`parent`) and the gap since, and `prefix_blocks` (keyed
          hashes of 1,024-character blocks, preferred to prefix_hashes).
aiperf    AIPerf's multi_turn datasets: a session's turns a line (aiperf.py).
inference-perf  inference-perf's OTel trace files: a session's flat GenAI spans, its calls'
          predecessors inferred as inference-perf infers them (inference_perf.py).

Traces that are recordings (azure, mooncake) must be in time order (a session's later turns
are placed after the turn they wait for); every format's records are put in arrival order.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from latency_proxy.base.semconv import OTHER_MODEL
from loadgen.inputs import jsonl
from loadgen.inputs.bounds import MAX_TOKENS
from loadgen.replay import aiperf, inference_perf, otlp
from loadgen.replay.rows import (
    DAY_S,
    BadRow,
    Row,
    TraceRecord,
    count,
    gap,
    json_rows,
    seconds,
)
from loadgen.replay.turns import Sessions

FORMATS = ("azure", "mooncake", "requests", "proxy", "otlp", "aiperf", "inference-perf")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
ACCESS_LOGGER = "latency_proxy.access"


@dataclass(frozen=True, slots=True)
class Parsed:
    """A file's records in arrival order, with what could not be replayed.

    bad: rows that are wrong (kept only with --skip-bad-rows); unreplayable: requests the
    file records but that carry no lengths to replay (failed requests of a log).
    """

    format: str
    records: tuple[TraceRecord, ...]
    bad: tuple[BadRow, ...] = ()
    unreplayable: int = 0


def detect(text: str) -> str:
    """The format of a file's content, from its first non-empty line."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        raise BadRow(1, "the file is empty")
    if first.lstrip().startswith("{"):
        try:
            item = orjson.loads(first)
        except orjson.JSONDecodeError:
            item = _document(text)  # one object over many lines: an inference-perf trace file
        if isinstance(item, dict):
            if "input_length" in item or "hash_ids" in item:
                return "mooncake"
            if "intended_at" in item and "request_id" in item:
                return "requests"
            if "logger" in item or "msg" in item:
                return "proxy"
            if "resourceSpans" in item:
                return "otlp"
            if "turns" in item:
                return "aiperf"
            if "spans" in item:
                return "inference-perf"
        raise BadRow(1, f"a JSON object of no known trace format (one of {', '.join(FORMATS)})")
    columns = [c.strip() for c in first.split(",")]
    if all(c in columns for c in AZURE_COLUMNS):
        return "azure"
    raise BadRow(1, f"no known trace format (one of {', '.join(FORMATS)})")


def _document(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadRow(1, "starts like JSON but is not JSON") from None


def parse(text: str, fmt: str | None = None, skip_bad: bool = False) -> Parsed:
    """Every record of a file's text; raises BadRow for the first bad row unless skip_bad."""
    fmt = fmt or detect(text)
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}: use one of {', '.join(FORMATS)}")
    records: list[TraceRecord] = []
    bad: list[BadRow] = []
    unreplayable = 0
    previous: TraceRecord | None = None  # the latest record that waits for no other
    for row in _ROWS[fmt](text):
        if row is None:
            unreplayable += 1
            continue
        try:
            if isinstance(row, BadRow):
                raise row
            if (
                fmt in ("azure", "mooncake")
                and row.parent is None  # a later turn is placed after the one it waits for
                and previous is not None
                and row.at < previous.at
            ):
                raise BadRow(row.line, f"timestamp goes back in time (before line {previous.line})")
        except BadRow as exc:
            if not skip_bad:
                raise
            bad.append(exc)
            continue
        records.append(row)
        previous = previous if row.parent is not None else row
    records.sort(key=lambda r: (r.at, r.line))  # logs, and sessions' later turns
    return Parsed(fmt, tuple(records), tuple(bad), unreplayable)


def _azure(text: str) -> Iterator[Row]:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    for number, cells in enumerate(reader, 1):
        if not cells or not "".join(cells).strip():
            continue
        if header is None:
            header = [c.strip() for c in cells]
            missing = [c for c in AZURE_COLUMNS if c not in header]
            if missing:
                raise BadRow(number, f"the header lacks {', '.join(missing)}")
            where = [header.index(c) for c in AZURE_COLUMNS]
            continue
        try:
            if len(cells) != len(header):
                raise BadRow(number, f"{len(cells)} columns, the header has {len(header)}")
            stamp, context, generated = (cells[i].strip() for i in where)
            yield TraceRecord(
                line=number,
                at=_azure_time(stamp, number),
                input_tokens=count(context, number, "ContextTokens"),
                output_tokens=count(generated, number, "GeneratedTokens"),
            )
        except BadRow as exc:
            yield exc


def _azure_time(stamp: str, line: int) -> float:
    """Epoch seconds of an Azure TIMESTAMP; more than 6 fractional digits are truncated."""
    head, dot, rest = stamp.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        rest = rest[: min(digits, 6)] + rest[digits:]
    try:
        when = datetime.fromisoformat(head + dot + rest if dot else head)
    except ValueError:
        raise BadRow(line, f"TIMESTAMP is not a date and time: {stamp[:40]!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _mooncake(text: str) -> Iterator[Row]:
    """Mooncake's lines; lines with a `session_id` (AIPerf's mooncake_trace) are its
    sessions' turns, each after the one before it (turns.py)."""
    sessions = Sessions()

    def rows(number: int, item: dict[str, Any]) -> Iterator[Row]:
        ids = item.get("hash_ids") or []
        if not isinstance(ids, list) or not all(type(i) is int for i in ids):
            raise BadRow(number, "hash_ids must be a list of integers")
        session, stamp, delay = item.get("session_id"), item.get("timestamp"), item.get("delay")
        if session is not None and (not isinstance(session, str) or not session):
            raise BadRow(number, "session_id must be a non-empty string")
        record = TraceRecord(
            line=number,
            at=0.0
            if stamp is None and session is not None
            else seconds(stamp, number, "timestamp", scale=1e-3),
            input_tokens=count(item.get("input_length"), number, "input_length"),
            output_tokens=count(item.get("output_length"), number, "output_length"),
            prefix=tuple(str(i) for i in ids),
            session=session,
        )
        waited = None if delay is None else gap(delay, number, "delay", scale=1e-3)
        yield sessions.place(record, number, stamp is not None, waited)

    return json_rows(text, rows)


def _requests(text: str) -> Iterator[Row]:
    first_target: str | None = None

    def rows(number: int, item: dict[str, Any]) -> Iterator[Row]:
        nonlocal first_target
        first_target = first_target or item.get("target")
        if item.get("target") != first_target or item.get("excluded"):
            return  # another target's replay of the same load, or not measured
        if not item.get("ok") or not item.get("output_tokens") or not item.get("input_tokens"):
            yield None
            return
        yield TraceRecord(
            line=number,
            at=seconds(item.get("intended_at"), number, "intended_at"),
            input_tokens=count(item["input_tokens"], number, "input_tokens"),
            output_tokens=count(item["output_tokens"], number, "output_tokens"),
        )

    return json_rows(text, rows)


def _proxy(text: str) -> Iterator[Row]:
    return json_rows(text, _proxy_rows)


def _proxy_rows(number: int, item: dict[str, Any]) -> Iterator[Row]:
    if item.get("logger") != ACCESS_LOGGER or item.get("msg") != "request":
        return  # the proxy's other lines, and anything else in the stream
    if not item.get("operation"):
        return  # not a generation (a /v1/models call, a health check)
    if not item.get("output_tokens") or not item.get("input_tokens"):
        yield None
        return
    blocks = _strings(item, "prefix_blocks", number)
    model = item.get("model")
    yield TraceRecord(
        line=number,
        at=_proxy_arrival(item, number),
        input_tokens=count(item["input_tokens"], number, "input_tokens"),
        output_tokens=count(item["output_tokens"], number, "output_tokens"),
        # "other": a name the upstreams did not list, withheld from the log
        model=model if isinstance(model, str) and model != OTHER_MODEL else None,
        prefix=blocks or _strings(item, "prefix_hashes", number),
        prefix_unit="chars" if blocks else "message",
        prompt_chars=count(item.get("prompt_chars"), number, "prompt_chars") if blocks else None,
        call=_name(item, "request_id", number),
        session=_name(item, "session", number),
        parent=_name(item, "parent", number),
        gap_s=None
        if item.get("parent_gap_s") is None
        else gap(item["parent_gap_s"], number, "parent_gap_s"),
        turn=None if item.get("turn") is None else count(item["turn"], number, "turn"),
        tools_answered=_whole(item.get("tools_answered", 0), number, "tools_answered"),
    )


def _strings(item: dict[str, Any], key: str, line: int) -> tuple[str, ...]:
    values = item.get(key) or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise BadRow(line, f"{key} must be a list of strings")
    return tuple(values)


def _name(item: dict[str, Any], key: str, line: int) -> str | None:
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRow(line, f"{key} must be a string, not {str(value)[:40]!r}")
    return value


def _whole(value: object, line: int, name: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_TOKENS:
        raise BadRow(line, f"{name} must be a whole number from 0, not {str(value)[:40]!r}")
    return value


def _otlp(text: str) -> Iterator[Row]:
    """Agents' model calls from GenAI spans (otlp.py): a span's record is numbered by its
    place among the file's model calls; a bad span is its line's bad row."""
    found: list[otlp.Call] = []
    for number, item in jsonl.objects(text):
        try:
            if isinstance(item, str):
                raise BadRow(number, item)
            found += otlp.calls(number, item)
        except otlp.BadSpan as exc:
            yield BadRow(number, str(exc))
        except BadRow as exc:
            yield exc
    waits = otlp.parents(found)
    for n, call in enumerate(found, 1):
        if call.input_tokens is None or call.output_tokens is None:
            yield None  # a call without its usage: nothing to replay
            continue
        parent, waited = waits.get(call.span_id, (None, None))
        yield TraceRecord(
            line=n,
            at=call.start_s,
            input_tokens=min(call.input_tokens, MAX_TOKENS),
            output_tokens=min(call.output_tokens, MAX_TOKENS),
            model=call.model,
            call=call.span_id,
            session=call.session,
            parent=parent,
            gap_s=None if waited is None else min(waited, DAY_S),
        )


def _proxy_arrival(item: dict, line: int) -> float:
    """`arrived_at` (epoch seconds); lines from before it existed: `ts` minus `e2e_s`."""
    if "arrived_at" in item:
        return seconds(item["arrived_at"], line, "arrived_at")
    stamp, e2e = item.get("ts"), item.get("e2e_s")
    if not isinstance(stamp, str) or isinstance(e2e, bool) or not isinstance(e2e, int | float):
        raise BadRow(line, "no arrived_at, nor ts and e2e_s to place the request in time")
    try:
        logged = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise BadRow(line, f"ts is not a date and time: {stamp[:40]!r}") from None
    return logged - seconds(e2e, line, "e2e_s")


_ROWS: dict[str, Callable[[str], Iterator[Row]]] = {
    "azure": _azure,
    "mooncake": _mooncake,
    "requests": _requests,
    "proxy": _proxy,
    "otlp": _otlp,
    "aiperf": aiperf.rows,
    "inference-perf": inference_perf.rows,
}
