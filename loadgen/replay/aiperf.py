"""AIPerf's multi_turn datasets (`--custom-dataset-type multi_turn`): JSON lines of
`{"session_id", "turns": [{"text" | "texts", "timestamp" | "delay", "output_length",
"role"}, ...]}`, as AIPerf's MultiTurn and SingleTurn models define them (times in
milliseconds). Pure, no I/O.

Each turn is one call of its line's session (turns.py: a later turn waits for the turn
before it). A turn's lengths: its `output_length`, and its text's tokens at four characters
a token (a replay sends words, not the file's text); images, audio and video are not sent.
A leading system turn is hoisted as AIPerf hoists it: its text opens the first turn's
prompt, so every later turn repeats it. The first turn's text is cut into the proxy's
prefix blocks, so sessions that open alike (one system prompt) share those blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from latency_proxy.measure.conversation import block_hashes
from loadgen.inputs import jsonl
from loadgen.replay.rows import BadRow, Row, TraceRecord, count, gap, seconds, text_tokens
from loadgen.replay.turns import Sessions


def rows(text: str) -> Iterator[Row]:
    """Every turn of every line, in order; a record's number is its place among the file's
    turns, a bad turn is its line's bad row."""
    sessions = Sessions()
    placed = 0
    for number, item in jsonl.objects(text):
        if isinstance(item, str):
            yield BadRow(number, item)
            continue
        try:
            session = _session(item, number)
            turns = _turns(item, number)
            system = _hoisted(turns, session, sessions, number)
        except BadRow as exc:
            yield exc
            continue
        for k, turn in enumerate(turns[1:] if system else turns, 2 if system else 1):
            placed += 1
            try:
                yield _place(turn, number, placed, session, system, sessions)
            except BadRow as exc:
                yield BadRow(number, f"turn {k}: {exc.reason}")


def _session(item: dict[str, Any], line: int) -> str:
    """The line's session_id; a line without one is a session of its own (AIPerf names it)."""
    session = item.get("session_id")
    if session is None:
        return f"line {line}"
    if not isinstance(session, str) or not session:
        raise BadRow(line, "session_id must be a non-empty string")
    return session


def _turns(item: dict[str, Any], line: int) -> list[dict[str, Any]]:
    turns = item.get("turns")
    if not isinstance(turns, list) or not turns:
        raise BadRow(line, "turns must be a non-empty list")
    if not all(isinstance(t, dict) for t in turns):
        raise BadRow(line, "each turn must be an object")
    return turns


def _hoisted(turns: list[dict[str, Any]], session: str, sessions: Sessions, line: int) -> str:
    """The text of a leading system turn AIPerf makes the conversation's system message (its
    session's first, text only, no timing, followed by a turn that is not one); else ""."""
    first = turns[0]
    if (
        first.get("role") != "system"
        or sessions.seen(session)
        or len(turns) < 2
        or turns[1].get("role") == "system"
        or any(first.get(k) is not None for k in ("timestamp", "delay", "output_length"))
    ):
        return ""
    return _text(first, line)


def _place(
    turn: dict[str, Any],
    line: int,
    placed: int,
    session: str,
    system: str,
    sessions: Sessions,
) -> TraceRecord:
    text = _text(turn, line)
    if "output_length" not in turn:
        raise BadRow(line, "no output_length: a replay sends each turn's own output length")
    opening = text if sessions.seen(session) else system + text
    stamp, delay = turn.get("timestamp"), turn.get("delay")
    record = TraceRecord(
        line=placed,
        at=0.0 if stamp is None else seconds(stamp, line, "timestamp", scale=1e-3),
        input_tokens=count(text_tokens(len(opening)), line, "its text's tokens"),
        output_tokens=count(turn["output_length"], line, "output_length"),
        prefix=block_hashes(opening, b""),
        prefix_unit="chars",
        prompt_chars=max(1, len(opening)),
        session=session,
    )
    waited = None if delay is None else gap(delay, line, "delay", scale=1e-3)
    return sessions.place(record, line, stamp is not None, waited)


def _text(turn: dict[str, Any], line: int) -> str:
    """A turn's text: `text`, or its `texts` (strings, or AIPerf's named fields of
    `contents`) joined. The reason for a wrong one never quotes it: it is prompt text."""
    text, texts = turn.get("text"), turn.get("texts")
    if text is not None:
        if not isinstance(text, str):
            raise BadRow(line, "text must be a string")
        return text
    if texts is None:
        return ""
    if not isinstance(texts, list):
        raise BadRow(line, "texts must be a list")
    out: list[str] = []
    for entry in texts:
        contents = entry.get("contents") if isinstance(entry, dict) else [entry]
        if not isinstance(contents, list) or not all(isinstance(c, str) for c in contents):
            raise BadRow(line, "texts must be strings, or objects whose contents are strings")
        out += contents
    return "\n".join(out)
