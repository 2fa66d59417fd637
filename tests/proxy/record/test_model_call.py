"""What the proxy reads from a body, and when it may add its usage request."""

from __future__ import annotations

import orjson
import pytest

from latency_proxy.record.model_call import inspect, lax_bool


@pytest.mark.parametrize(
    ("value", "read"),
    [(True, True), ("YES", True), ("on", True), (1, True), (1.0, True), (False, False),
     ("off", False), ("0", False), (0, False), ("x", None), (2, None), ([], None)],
)  # fmt: skip
def test_booleans_read_as_vllms_pydantic_reads_them(value: object, read: bool | None) -> None:
    assert lax_bool(value) is read


def chat(**stream_options: object) -> bytes:
    return orjson.dumps({"model": "m", "stream": True, "stream_options": stream_options})


@pytest.mark.parametrize("flag", ["include_usage", "continuous_usage_stats"])
def test_a_body_vllm_refuses_goes_up_unchanged(flag: str) -> None:
    """vLLM answers `"include_usage": "x"` with a 400: the client must get that 400, not an
    answer to a body the proxy repaired by asking for usage itself."""
    body = chat(**{flag: "x"})
    call = inspect("/v1/chat/completions", body, continuous_usage=True)
    assert call.body == body and not call.injected_usage and not call.injected_continuous_usage


def test_a_usage_request_read_as_false_is_asked_for_and_stripped() -> None:
    call = inspect("/v1/chat/completions", chat(include_usage="false"), continuous_usage=False)
    assert call.injected_usage
    assert orjson.loads(call.body)["stream_options"] == {"include_usage": True}
