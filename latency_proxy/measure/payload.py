"""What one event's JSON says: its kind (content, usage-only, other), its ids, finish
reasons, error type and generated text. Pure, no I/O; the meter reads every event with it."""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

_ANSWER_DELTA_KEYS = ("content", "tool_calls")  # _reasoning_only reads them inline
_REASONING_DELTA_KEYS = ("reasoning", "reasoning_content")  # vLLM 0.32, and before it
_CONTENT_DELTA_KEYS = _ANSWER_DELTA_KEYS + _REASONING_DELTA_KEYS


class EventKind(Enum):
    CONTENT = "content"  # carries generated output
    USAGE_ONLY = "usage_only"  # choices empty, usage present: the final usage chunk
    OTHER = "other"  # role-only, empty delta, finish-only, error object, comment
    DONE = "done"  # data: [DONE]
    INVALID = "invalid"  # data that is not JSON


def classify(payload: Any) -> EventKind:
    """Content, usage-only or other, as docs/reference/timing.md defines a content event."""
    if not isinstance(payload, dict):
        return EventKind.OTHER
    choices = payload.get("choices")
    if choices:
        if not isinstance(choices, list):
            return EventKind.OTHER  # a string's characters, a dict's keys: no choice objects
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if choice.get("text"):
                return EventKind.CONTENT
            delta = choice.get("delta")
            if isinstance(delta, dict):
                for key in _CONTENT_DELTA_KEYS:
                    if delta.get(key):
                        return EventKind.CONTENT
        return EventKind.OTHER
    if payload.get("usage"):
        return EventKind.USAGE_ONLY
    return EventKind.OTHER


class Reading(NamedTuple):
    """What one event's payload says, apart from its usage and its text."""

    kind: EventKind
    response_id: str | None = None
    response_model: str | None = None
    error_type: str | None = None  # type/code of an error object; never its message
    finish_reasons: tuple[str, ...] = ()
    reasoning: bool = False  # a content event with reasoning and no answer in it


def _reasoning_only(choices: list[Any]) -> bool:
    """Whether content choices carry reasoning and nothing of the answer."""
    reasoning = False
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return False
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if delta.get("content") or delta.get("tool_calls"):  # the answer's keys
                return False
            reasoning = reasoning or bool(delta.get("reasoning") or delta.get("reasoning_content"))
    return reasoning


def read(payload: Any) -> Reading:
    """The Reading of a parsed payload (any JSON value)."""
    kind = classify(payload)
    if not isinstance(payload, dict):
        return Reading(kind)
    response_id = payload.get("id")
    model = payload.get("model")
    error = payload.get("error")
    error_type = None
    if isinstance(error, dict):
        # only the type: an error message may quote the prompt
        error_type = str(error.get("type") or error.get("code") or "error")[:64]
    choices = payload.get("choices")
    reasons: tuple[str, ...] = ()
    if choices and isinstance(choices, list):
        reasons = tuple(
            c["finish_reason"]
            for c in choices
            if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)
        )
    return Reading(
        kind,
        response_id if isinstance(response_id, str) else None,
        model if isinstance(model, str) else None,
        error_type,
        reasons,
        kind is EventKind.CONTENT and isinstance(choices, list) and _reasoning_only(choices),
    )


def texts(payload: dict[str, Any], key: str) -> list[str]:
    """Generated text of each choice: `text`, or `<key>.content` / reasoning (chat)."""
    out: list[str] = []
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return out  # a string's characters, a dict's keys: no choice objects
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            out.append(choice["text"])
        part = choice.get(key)
        if isinstance(part, dict):
            for field_name in ("reasoning_content", "reasoning", "content"):
                if isinstance(part.get(field_name), str):
                    out.append(part[field_name])
    return out
