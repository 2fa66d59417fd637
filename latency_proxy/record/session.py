"""Where a chat call stands in its agent's work: its session, the call it continues, and its
prompt's prefix blocks, all from keyed hashes (measure/conversation.py), never from text."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.trace import SpanContext


@dataclass(frozen=True, slots=True)
class Placement:
    session: str  # 16 hex digits: a keyed hash, of the root call's id or the caller's key
    joined_by: str  # parent | header | trace | new: what put the call in its session
    turn: int  # 1 for a session's first call; its parent's turn + 1
    parent: str | None = None  # the request id of the call whose prompt and answer it extends
    parent_gap_s: float | None = None  # the parent's last byte to this call's arrival
    parent_span: SpanContext | None = None  # linked from this call's spans
    tools_asked: int = 0  # tool calls in this call's answer
    tools_answered: int = 0  # tool results sent after the answer this call extends
    prefix_blocks: tuple[str, ...] = ()  # the prompt's block hashes (conversation.BLOCK_CHARS)
    prompt_chars: int = 0  # the length of the text the blocks cut
