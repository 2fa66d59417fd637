"""What the proxy reads from (and adds to) an OpenAI-style request body.

The body is parsed once, to route and label the request. It is re-serialised only when the
proxy must ask for usage itself; otherwise the client's bytes go upstream untouched. A body
the proxy cannot write back (orjson writes 255 levels of nesting, reads 1024) goes upstream
as sent, without the usage request: its stream is then metered from its events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from latency_proxy.base import semconv as sc

MEASURED_PATHS = {
    "/v1/chat/completions": sc.OPERATION_CHAT,
    "/v1/completions": sc.OPERATION_TEXT_COMPLETION,
}
# vLLM validates bodies with pydantic in lax mode: these strings (any case) mean true
_LAX_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_LAX_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


@dataclass(slots=True)
class ModelCall:
    operation: str | None  # chat | text_completion; None on other paths
    body: bytes  # what goes upstream
    model: str | None = None
    stream: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    injected_usage: bool = False  # we added include_usage: strip the usage-only chunk
    injected_continuous_usage: bool = (
        False  # we added continuous_usage_stats: strip per-chunk usage
    )


def model_of(body: bytes) -> str | None:
    """The `model` a JSON body names, if any (for routing pass-through paths)."""
    try:
        payload = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return None
    model = payload.get("model") if isinstance(payload, dict) else None
    return model if isinstance(model, str) else None


def lax_bool(value: Any) -> bool | None:
    """A boolean field as vLLM's pydantic models read it (lax mode): `"yes"` or `1` is true
    as `true` is, `"off"` or `0` false; None for what vLLM refuses (`"x"`, `2`, a list)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return True if value == 1 else False if value == 0 else None
    if isinstance(value, str):
        lowered = value.lower()
        return True if lowered in _LAX_TRUE else False if lowered in _LAX_FALSE else None
    return None


def lax_true(value: Any) -> bool:
    """A boolean field that vLLM reads as true."""
    return lax_bool(value) is True


def inspect(path: str, body: bytes, continuous_usage: bool) -> ModelCall:
    """Parse a measured request; ask for usage when the client did not."""
    call = ModelCall(operation=MEASURED_PATHS.get(path), body=body)
    try:
        payload: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return call  # forwarded as is: the upstream's 400 reaches the client
    if not isinstance(payload, dict):
        return call
    model = payload.get("model")
    call.model = model if isinstance(model, str) else None
    call.stream = lax_true(payload.get("stream"))
    max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool):
        call.max_tokens = max_tokens
    temperature = payload.get("temperature")
    if isinstance(temperature, int | float) and not isinstance(temperature, bool):
        call.temperature = float(temperature)
    if not call.stream:
        return call
    options = payload.get("stream_options")
    if options is None:
        options = {}
    elif not isinstance(options, dict):
        return call  # invalid: leave it to the upstream to reject
    flags = ("include_usage", "continuous_usage_stats")
    if any(k in options and options[k] is not None and lax_bool(options[k]) is None for k in flags):
        return call  # vLLM refuses the body: the client must see vLLM's own error
    injected_usage = injected_continuous = False
    if not lax_true(options.get("include_usage")):
        options["include_usage"] = True
        injected_usage = True
        # usage on every chunk, asked for but inert without include_usage: not the client's
        injected_continuous = lax_true(options.get("continuous_usage_stats"))
    if continuous_usage and not lax_true(options.get("continuous_usage_stats")):
        options["continuous_usage_stats"] = True
        injected_continuous = True
    if injected_usage or injected_continuous:
        payload["stream_options"] = options
        try:
            call.body = orjson.dumps(payload)
        except orjson.JSONEncodeError:
            return call  # too deep to write back: the client's bytes, metered from events
        call.injected_usage = injected_usage
        call.injected_continuous_usage = injected_continuous
    return call
