"""The private parts of uvicorn the proxy relies on (latency_proxy/server/uvicorn_internals.py),
checked on the installed uvicorn: a release that renames or reshapes one fails here, by
name, rather than somewhere in the relay."""

from __future__ import annotations

import asyncio
import inspect
import socket
from pathlib import Path

import pytest
import uvicorn
from uvicorn.server import ServerState

from latency_proxy.server import uvicorn_internals as internals
from latency_proxy.server.http10 import Http10Cycle

PACKAGE = Path(internals.__file__).parents[1]


@pytest.mark.parametrize("name", sorted(internals.PROTOCOL_METHODS))
def test_protocol_method(name: str) -> None:
    method = getattr(internals.HttpToolsProtocol, name, None)
    assert callable(method), f"HttpToolsProtocol.{name} is gone"
    expected = internals.PROTOCOL_METHODS[name]
    assert tuple(inspect.signature(method).parameters) == expected


@pytest.mark.parametrize(
    ("owner", "name", "expected"),
    [
        pytest.param(owner, name, parameters, id=f"{owner.__name__}.{name}")
        for owner, methods in (
            (internals.RequestResponseCycle, internals.CYCLE_METHODS),
            (internals.FlowControl, internals.FLOW_METHODS),
        )
        for name, parameters in methods.items()
    ],
)
def test_coroutine_method(owner: type, name: str, expected: tuple[str, ...]) -> None:
    method = getattr(owner, name, None)
    assert inspect.iscoroutinefunction(method), f"{owner.__name__}.{name} is gone"
    assert tuple(inspect.signature(method).parameters) == expected


async def _started_request() -> tuple[internals.HttpToolsProtocol, object, dict]:
    """A real protocol on a socket pair, a request head fed in, the app's response
    started (without a length): the protocol, its cycle, and the cycle's fields then."""
    started = asyncio.Event()

    async def app(scope, receive, send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        started.set()
        await asyncio.sleep(3600)

    config = uvicorn.Config(app, lifespan="off", log_config=None)
    config.load()
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    protocol = internals.HttpToolsProtocol(config, ServerState(), {}, loop)
    await loop.connect_accepted_socket(lambda: protocol, ours)
    protocol.data_received(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\nx")
    cycle = protocol.cycle
    before = {name: getattr(cycle, name, AttributeError) for name in internals.CYCLE_FIELDS}
    await asyncio.wait_for(started.wait(), 5)
    protocol.transport.close()
    theirs.close()
    for task in list(protocol.tasks):
        task.cancel()
    return protocol, cycle, before


@pytest.fixture(scope="module")
def started() -> tuple[internals.HttpToolsProtocol, object, dict]:
    return asyncio.run(_started_request())


@pytest.mark.parametrize("name", internals.PROTOCOL_FIELDS)
def test_protocol_field(started, name: str) -> None:
    protocol, _, _ = started
    assert hasattr(protocol, name), f"HttpToolsProtocol has no {name}"


@pytest.mark.parametrize("name", internals.CYCLE_FIELDS)
def test_cycle_field(started, name: str) -> None:
    before = started[2]
    assert before[name] is not AttributeError, f"RequestResponseCycle has no {name}"


@pytest.mark.parametrize("name", internals.FLOW_FIELDS)
def test_flow_field(started, name: str) -> None:
    _, cycle, _ = started
    assert isinstance(cycle.flow, internals.FlowControl)
    assert hasattr(cycle.flow, name), f"FlowControl has no {name}"


def test_cycle_fields_mean_what_the_writer_reads(started) -> None:
    protocol, cycle, before = started
    assert cycle.scope is protocol.scope and cycle.transport is protocol.transport
    assert before["chunked_encoding"] is None and before["response_started"] is False
    assert before["keep_alive"] is True and before["disconnected"] is False
    assert isinstance(before["message_event"], asyncio.Event)
    # the body came whole with the head: receive() would hand it over at once
    assert before["more_body"] is False and before["waiting_for_100_continue"] is False
    assert isinstance(before["body"], bytearray) and bytes(before["body"]) == b"x"
    # the head went out without a length: uvicorn chunks the body
    assert cycle.response_started is True and cycle.chunked_encoding is True
    assert cycle.flow.write_paused is False


def test_the_http_1_0_cycle_can_take_a_cycles_place(started) -> None:
    _, cycle, _ = started
    cycle.__class__ = Http10Cycle  # what the protocol does to a 1.0 request's cycle
    assert isinstance(cycle, internals.RequestResponseCycle)


def test_only_one_module_imports_uvicorns_protocols() -> None:
    importers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "uvicorn.protocols" in path.read_text()
    )
    assert importers == ["server/uvicorn_internals.py"]
