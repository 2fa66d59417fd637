"""vLLM's wire format as shapes: what a response looks like, with the values left out.

`capture(url, model)` sends a fixed set of requests (chat and completions, streamed and not,
with and without usage, and two kinds of error) and reduces each response to its shape:
status, content type, header names, whether `X-Request-Id` was echoed, and the JSON key
structure with value types (or, for a stream, the sequence of distinct event shapes). Two
servers speak the same format when their captures are equal. Recorded from real vLLM into
`vllm_wire.json`; the simulator is compared against it (tests/test_sim_wire_vllm.py) and,
in the real_vllm tier, the fixture, the simulator and the proxy against live vLLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
from conftest import free_port
from scripted_upstream import ServerThread

from latency_proxy.sse import SSEParser
from loadgen.sim.app import create_app

FIXTURE = Path(__file__).with_name("vllm_wire.json")
REQUEST_ID = "wire-shape-1"
MESSAGES = [{"role": "user", "content": "the quick brown fox"}]
PROMPT = "the quick brown fox"
USAGE = {"include_usage": True}
CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}
# transport headers, set by whichever HTTP server runs the app: not part of the API's format
TRANSPORT_HEADERS = {"date", "server", "content-length", "transfer-encoding", "connection"}


def shape(value: Any) -> Any:
    """The structure of a JSON value: dict keys kept, leaves replaced by their type name,
    a list by the distinct shapes of its items."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        distinct: list[Any] = []
        for item in map(shape, value):
            if item not in distinct:
                distinct.append(item)
        return distinct
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def stream_shape(body: bytes) -> list[Any]:
    """Shapes of a stream's events in order, runs of the same shape collapsed to one."""
    shapes: list[Any] = []
    for event in SSEParser().feed(body):
        if event.data is None:
            continue
        item = "[DONE]" if event.data == b"[DONE]" else shape(orjson.loads(event.data))
        if not shapes or shapes[-1] != item:
            shapes.append(item)
    return shapes


def scenarios(model: str) -> dict[str, tuple[str, bytes]]:
    """name -> (path, raw body). Lengths are fixed (ignore_eos) so every run ends alike."""

    def chat(**extra: Any) -> tuple[str, bytes]:
        body = {"model": model, "messages": MESSAGES, "max_tokens": 4, "ignore_eos": True}
        return "/v1/chat/completions", orjson.dumps({**body, "temperature": 0, **extra})

    def completion(**extra: Any) -> tuple[str, bytes]:
        body = {"model": model, "prompt": PROMPT, "max_tokens": 4, "ignore_eos": True}
        return "/v1/completions", orjson.dumps({**body, "temperature": 0, **extra})

    return {
        "chat": chat(),
        "chat_stream": chat(stream=True),
        "chat_stream_usage": chat(stream=True, stream_options=USAGE),
        "chat_stream_continuous": chat(stream=True, stream_options=CONTINUOUS),
        "completions": completion(),
        "completions_stream": completion(stream=True),
        "completions_stream_usage": completion(stream=True, stream_options=USAGE),
        "completions_stream_continuous": completion(stream=True, stream_options=CONTINUOUS),
        "error_malformed_json": ("/v1/chat/completions", b'{"model": '),
        "error_unknown_model": chat(model="no-such-model"),
    }


def response_shape(response: httpx.Response) -> dict[str, Any]:
    content_type = response.headers.get("content-type", "")
    record: dict[str, Any] = {
        "status": response.status_code,
        "content_type": content_type,
        "request_id_echoed": response.headers.get("x-request-id") == REQUEST_ID,
        "headers": sorted(response.headers.keys() - TRANSPORT_HEADERS),
    }
    if content_type.startswith("text/event-stream"):
        record["events"] = stream_shape(response.content)
        return record
    body = response.json()
    record["body"] = shape(body)
    if response.status_code >= 400:  # error type and code are part of the format
        error = body.get("error", body)
        record["error"] = {"type": error.get("type"), "code": error.get("code")}
    return record


def capture(url: str, model: str) -> dict[str, dict[str, Any]]:
    headers = {"Content-Type": "application/json", "X-Request-Id": REQUEST_ID}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        return {
            name: response_shape(client.post(path, content=body))
            for name, (path, body) in scenarios(model).items()
        }


def capture_sim(model: str) -> dict[str, dict[str, Any]]:
    """The same capture from loadgen.sim (fixed timing, 1 ms per token) serving `model`."""
    port = free_port()
    app = create_app(ttft=0.001, itl=0.001, served_model_name=model)
    with ServerThread(app, port):
        return capture(f"http://127.0.0.1:{port}", model)


def paths(value: Any, prefix: str = "") -> set[str]:
    """A shape flattened to `path: type` lines, so two shapes diff key by key. A stream's
    events keep their position (`.events[2]`), list items share one (`.choices[]`)."""
    if isinstance(value, dict):
        return {line for key, item in value.items() for line in paths(item, f"{prefix}.{key}")}
    if isinstance(value, list) and value:
        positional = prefix.endswith(".events")
        return {
            line
            for i, item in enumerate(value)
            for line in paths(item, f"{prefix}[{i if positional else ''}]")
        }
    return {f"{prefix}: {value}"}


def differences(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """What differs between two captures, one `path: type` line per side."""
    want, got = paths(expected), paths(actual)
    return [f"only vLLM {line}" for line in sorted(want - got)] + [
        f"only other {line}" for line in sorted(got - want)
    ]


def load_fixture() -> dict[str, Any]:
    return orjson.loads(FIXTURE.read_bytes())


def save_fixture(captured: dict[str, Any]) -> None:
    FIXTURE.write_bytes(orjson.dumps(captured, option=orjson.OPT_INDENT_2) + b"\n")
