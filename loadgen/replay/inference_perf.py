"""inference-perf's OTel trace files (its `otel_trace_replay` data): a JSON object whose
`spans` are flat, not OTLP: `span_id`, `trace_id`, `name`, `start_time` and `end_time` (ISO
8601) and `attributes`, a plain object of GenAI keys. Pure, no I/O.

A file is one session (its `session_id`, else its `trace_id`, else its own), pretty-printed
or not; a file of JSON lines holds one such object a line (a row of its Hugging Face
layout). A span is a model call as inference-perf says (`is_llm_span`): its
`gen_ai.operation.name` is `chat` or its name starts with `chat `, and it has
`gen_ai.input.messages`. Identical spans (same times and attributes) count once.

Its predecessors are inference-perf's: each earlier call whose output is an assistant message
of its input (the same text, or the tool calls its `tool` messages answer), and the latest
call to start of those that had ended when it started. inference-perf waits for them all,
then the recorded wait after the last to end; a replay waits for that one (its parent) and
the same gap. Lengths: `gen_ai.usage.prompt_tokens` (or `input_tokens`) and
`completion_tokens` (or `output_tokens`), else its messages' text at four characters a
token per message, as inference-perf estimates them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from loadgen.inputs import jsonl
from loadgen.inputs.bounds import MAX_TOKENS
from loadgen.replay.rows import DAY_S, BadRow, Row, TraceRecord, count, text_tokens

CHAT = "chat"


@dataclass(frozen=True, slots=True)
class Call:
    span: str
    start_s: float
    end_s: float
    input_tokens: int | None
    output_tokens: int | None
    model: str | None
    said: frozenset[str]  # its input's assistant texts, and the tool calls it answers
    answer: frozenset[str]  # its output's text and tool call ids


def documents(text: str) -> Iterator[tuple[int, dict[str, Any] | str]]:
    """Each session object and its line: one a line, or the whole text as one."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        orjson.loads(first)
    except orjson.JSONDecodeError:
        try:
            whole = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            yield 1, f"not JSON ({exc})"
            return
        yield 1, whole if isinstance(whole, dict) else "not a JSON object"
        return
    yield from jsonl.objects(text)


def rows(text: str) -> Iterator[Row]:
    """Every model call of every session, numbered by its place among the file's calls; its
    turn is one more than its parent's."""
    placed = 0
    for number, item in documents(text):
        if isinstance(item, str):
            yield BadRow(number, item)
            continue
        try:
            session, found = _calls(item, number)
        except BadRow as exc:
            yield exc
            continue
        waits = parents(found)
        names: dict[str, tuple[str, int]] = {}  # a span's call and turn
        for call in found:
            placed += 1
            parent, gap = waits.get(call.span, (None, None))
            before = None if parent is None else names[parent]
            names[call.span] = (str(placed), 1 if before is None else before[1] + 1)
            if call.input_tokens is None or call.output_tokens is None:
                yield None  # no usage and no text to size it by
                continue
            yield TraceRecord(
                line=placed,
                at=call.start_s,
                input_tokens=call.input_tokens,
                output_tokens=call.output_tokens,
                model=call.model,
                call=str(placed),
                session=session,
                parent=None if before is None else before[0],
                gap_s=None if gap is None else min(gap, DAY_S),
                turn=names[call.span][1],
            )


def parents(found: list[Call]) -> dict[str, tuple[str, float]]:
    """Each call's predecessor that ended last (inference-perf's, in start order) and the
    gap from its end; `found` is in start order. Earlier answers are looked up by what a
    call repeats and ends kept in a heap, not scanned, so a long session reads in time
    near its size."""
    out: dict[str, tuple[str, float]] = {}
    answered: dict[str, list[Call]] = {}  # an answer's text or tool call id: its calls
    running: list[tuple[float, int]] = []  # (end, place) of the calls not yet ended
    latest = -1  # the latest to start of the calls that had ended (starts only grow)
    for i, call in enumerate(found):
        while running and running[0][0] <= call.start_s:
            latest = max(latest, heapq.heappop(running)[1])
        causal = [c for key in call.said for c in answered.get(key, ()) if c.end_s <= call.start_s]
        predecessors = causal + found[latest : latest + 1] if latest >= 0 else causal
        if predecessors:
            last = max(predecessors, key=lambda c: c.end_s)
            out[call.span] = (last.span, call.start_s - last.end_s)
        heapq.heappush(running, (call.end_s, i))
        for key in call.answer:
            answered.setdefault(key, []).append(call)
    return out


def _calls(item: dict[str, Any], line: int) -> tuple[str, list[Call]]:
    spans = item.get("spans")
    if not isinstance(spans, list):
        raise BadRow(line, "spans must be a list")
    session = item.get("session_id") or item.get("trace_id") or f"line {line}"
    if not isinstance(session, str):
        raise BadRow(line, "session_id and trace_id must be strings")
    seen: set[bytes] = set()
    found = []
    for k, span in enumerate(spans, 1):
        if not isinstance(span, dict) or not isinstance(span.get("attributes") or {}, dict):
            raise BadRow(line, f"span {k}: not an object with an object of attributes")
        attributes = span.get("attributes") or {}
        chat = attributes.get("gen_ai.operation.name") == CHAT or str(
            span.get("name") or ""
        ).startswith(CHAT + " ")
        if not chat or not attributes.get("gen_ai.input.messages"):
            continue
        same = orjson.dumps(
            [span.get("start_time"), span.get("end_time"), attributes],
            option=orjson.OPT_SORT_KEYS,
        )
        if same in seen:
            continue  # a span exported twice
        seen.add(same)
        try:
            found.append(_call(span, attributes))
        except (BadRow, ValueError, TypeError) as exc:
            reason = exc.reason if isinstance(exc, BadRow) else "not a GenAI chat span"
            raise BadRow(line, f"span {k}: {reason}") from None
    found.sort(key=lambda c: (c.start_s, c.span))
    return session, found


def _call(span: dict[str, Any], attributes: dict[str, Any]) -> Call:
    start = _when(span.get("start_time"), "start_time")
    end = _when(span["end_time"], "end_time") if span.get("end_time") else start
    messages = _messages(attributes.get("gen_ai.input.messages"))
    output = _output(attributes)
    said: set[str] = set()
    for message in messages:
        if message.get("role") == "assistant":
            said.add(_text(message))
        if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
            said.add(message["tool_call_id"])
    answer = {_text(output), *_tool_ids(output)} if output else set()
    prompt = _usage(attributes, "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens")
    done = _usage(attributes, "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens")
    model = attributes.get("gen_ai.request.model")
    return Call(
        span=str(span.get("span_id") or id(span)),
        start_s=start,
        end_s=max(start, end),
        input_tokens=prompt or min(MAX_TOKENS, sum(text_tokens(len(_text(m))) for m in messages)),
        output_tokens=done
        or (min(MAX_TOKENS, text_tokens(len(_text(output)))) if output else None),
        model=model if isinstance(model, str) and model else None,
        said=frozenset(said - {""}),
        answer=frozenset(answer - {""}),
    )


def _when(value: Any, name: str) -> float:
    if not isinstance(value, str):
        raise BadRow(0, f"{name} is not an ISO 8601 time")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadRow(0, f"{name} is not an ISO 8601 time: {value[:40]!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _usage(attributes: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        if attributes.get(key) is not None:
            return count(attributes[key], 0, key)
    return None


def _messages(raw: Any) -> list[dict[str, Any]]:
    """gen_ai.input.messages: a list of messages, or that list as a JSON string."""
    if isinstance(raw, str):
        raw = orjson.loads(raw)
    if not isinstance(raw, list) or not all(isinstance(m, dict) for m in raw):
        raise BadRow(0, "gen_ai.input.messages is not a list of messages")
    return raw


def _output(attributes: dict[str, Any]) -> dict[str, Any] | None:
    """The call's answer as a message: an output text, or gen_ai.output.messages' one."""
    for key in ("gen_ai.output.text", "gen_ai.completion", "gen_ai.output"):
        if isinstance(attributes.get(key), str):
            return {"role": "assistant", "content": attributes[key]}
    raw = attributes.get("gen_ai.output.messages")
    if raw is None:
        return None
    messages = _messages(raw)
    return messages[0] if messages else None


def _text(message: dict[str, Any]) -> str:
    """A message's text: its content, or its text parts (OpenAI's or GenAI's) joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else message.get("parts")
    if not isinstance(parts, list):
        return ""
    texts = [p.get("content") or p.get("text") for p in parts if isinstance(p, dict)]
    return "".join(t for t in texts if isinstance(t, str))


def _tool_ids(message: dict[str, Any]) -> list[str]:
    """The ids of the tool calls a message makes (OpenAI's tool_calls, or GenAI's parts)."""
    calls = (message.get("tool_calls") or []) + [
        p
        for p in message.get("parts") or []
        if isinstance(p, dict) and p.get("type") == "tool_call"
    ]
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
