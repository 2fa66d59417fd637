"""What a chat conversation is, without its text: keyed hashes of its messages, of its answer
and of fixed-size blocks of its prompt. Pure, no I/O.

A call that continues an earlier one sends the earlier call's messages again, then the
answer it got (an assistant message), then what came of it (tool results, a user's turn).
So a call's parent is found by two hashes: the chained hash of every message before its
last assistant message (the parent's prompt), and the hash of that assistant message (the
parent's answer). The proxy hashes the answer it relays as it streams (`AnswerDigest`, one
keyed update per content event), and the request's messages when the call is recorded.

Every hash is keyed (blake2b with the deployment's session key), so a hash in a log line
cannot be checked against a guessed text without the key. No text is kept: a digest object
holds the hash state, the tool call ids the server minted, and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

KEY_BYTES = 32  # a random session key's length (blake2b takes up to 64)
BLOCK_CHARS = 1024  # characters per prefix block: about 256 tokens of English
BLOCK_HASH_BYTES = 8  # a block hash in the log line: 16 hex digits, as Mooncake's ids are ints
_DIGEST = 16


def _framed(text: str) -> bytes:
    """A piece with its length before it, so the boundaries between pieces are unambiguous."""
    data = text.encode("utf-8", "surrogatepass")
    return len(data).to_bytes(8, "big") + data


class AnswerDigest:
    """The keyed hash of an assistant answer: its content text, as one string however it was
    cut into deltas, then the ids of the tool calls it asked for, in order. Reasoning text
    is left out (clients do not send it back). The same digest is made of an assistant
    message in a later request (`message_answer`), so the two meet exactly when the client
    sent back the answer it was streamed."""

    __slots__ = ("_content", "tool_ids")

    def __init__(self, key: bytes) -> None:
        self._content = blake2b(key=key, digest_size=_DIGEST, person=b"answer")
        self.tool_ids: list[str] = []

    def text(self, text: str) -> None:
        """Content text as it streams (a delta), or whole (a message)."""
        self._content.update(text.encode("utf-8", "surrogatepass"))

    def delta(self, payload: Any) -> None:
        """A streamed chunk's first choice: its content, and any tool call id it opens."""
        delta = _first_choice(payload, "delta")
        if delta is None:
            return
        content = delta.get("content")
        if isinstance(content, str):
            self.text(content)
        self._tool_calls(delta.get("tool_calls"))

    def message(self, payload: Any) -> None:
        """A whole (non-streamed) response's first choice."""
        message = _first_choice(payload, "message")
        if message is not None:
            self.assistant(message)

    def assistant(self, message: dict[str, Any]) -> None:
        """An assistant message, as a client sends it back."""
        content = message.get("content")
        if isinstance(content, str):
            self.text(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    self.text(part["text"])
        self._tool_calls(message.get("tool_calls"))

    def _tool_calls(self, calls: Any) -> None:
        if not isinstance(calls, list):
            return
        for call in calls:
            if isinstance(call, dict) and isinstance(call.get("id"), str) and call["id"]:
                self.tool_ids.append(call["id"])

    def digest(self) -> bytes:
        final = self._content.copy()
        for call_id in self.tool_ids:
            final.update(b"\x00tool" + _framed(call_id))
        return final.digest()


def _first_choice(payload: Any, key: str) -> dict[str, Any] | None:
    if not isinstance(payload, dict):
        return None
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            part = choice.get(key)
            return part if isinstance(part, dict) else None
    return None


@dataclass(frozen=True, slots=True)
class PromptShape:
    """A chat request's messages as keyed hashes.

    `prompt` is the chained hash of all its messages (what a call that continues this one
    will have sent before this one's answer); `continues` is, for its last assistant
    message, the chained hash of the messages before it and the message's answer digest
    (None: no assistant message, a conversation's first call); `tools_answered` counts the
    tool results after that message; `blocks` hash the prompt's text in BLOCK_CHARS
    blocks, each chained to the one before (Mooncake's hash_ids), the last one partial."""

    prompt: bytes
    continues: tuple[bytes, bytes] | None
    tools_answered: int
    blocks: tuple[str, ...]
    chars: int


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _tool_text(message: dict[str, Any]) -> str:
    """What the model reads of a message's tool calls (name, arguments) and a tool result's
    call id: part of the prompt's blocks, as a chat template renders them."""
    out = []
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                out += [str(function.get("name", "")), str(function.get("arguments", ""))]
    call_id = message.get("tool_call_id")
    if isinstance(call_id, str):
        out.append(call_id)
    return "\x1f".join(out)


def prompt_shape(payload: Any, key: str | bytes) -> PromptShape | None:
    """The hashes of a chat request body's messages; None for a body without a list of them."""
    messages = payload.get("messages") if isinstance(payload, dict) else None
    if not isinstance(messages, list):
        return None
    key = key.encode() if isinstance(key, str) else key
    chain = blake2b(key=key, digest_size=_DIGEST, person=b"prompt")
    continues: tuple[bytes, bytes] | None = None
    tools_answered = 0
    rendered: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", ""))
        if role == "assistant":
            answer = AnswerDigest(key)
            answer.assistant(message)
            continues, tools_answered = (chain.digest(), answer.digest()), 0
        elif role == "tool":
            tools_answered += 1
        content, tools = _text(message.get("content")), _tool_text(message)
        chain.update(_framed(role) + _framed(content) + _framed(tools))
        rendered.append(f"\x1e{role}\x1f{content}{tools}")
    text = "".join(rendered)
    blocks = block_hashes(text, key)
    return PromptShape(chain.digest(), continues, tools_answered, blocks, len(text))


def block_hashes(text: str, key: bytes, size: int = BLOCK_CHARS) -> tuple[str, ...]:
    """Each `size`-character block of `text` hashed with the hash of the block before: two
    prompts share their first k hashes exactly when their first k blocks are the same."""
    out = []
    parent = b""
    for start in range(0, len(text), size):
        block = text[start : start + size].encode("utf-8", "surrogatepass")
        parent = blake2b(parent + block, key=key, digest_size=BLOCK_HASH_BYTES).digest()
        out.append(parent.hex())
    return tuple(out)
