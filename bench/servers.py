"""How the benchmarks serve what they measure against: loadgen.sim in fixed timing as a
child process, with its stream's flags, and a raw asyncio protocol on a loopback port in
this process (the upstream and relay floors, no framework in the way). Imported by the
scripts beside it, which are run as `python bench/NAME.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Callable

from loadgen.stack.processes import simulator

MODEL = "scripted"  # the name the simulator serves, and the loads ask for


def add_stream_flags(parser: argparse.ArgumentParser, ttft: float, itl: float, tokens: int) -> None:
    """The simulated stream: --ttft and --itl in seconds, --tokens per answer; the defaults
    are each benchmark's own."""
    parser.add_argument("--ttft", type=float, default=ttft, help="seconds to the first token")
    parser.add_argument("--itl", type=float, default=itl, help="seconds between tokens")
    parser.add_argument("--tokens", type=int, default=tokens, help="tokens per answer")


def fixed_simulator(ttft: float, itl: float) -> contextlib.AbstractContextManager[str]:
    """loadgen.sim in fixed timing as a child process; yields its base URL."""
    return simulator("--ttft", str(ttft), "--itl", str(itl), "--served-model-name", MODEL)


def add_address_flags(parser: argparse.ArgumentParser, port: int) -> None:
    """--host (loopback) and --port to serve on."""
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)


async def serve(protocol: Callable[[], asyncio.Protocol], host: str, port: int) -> None:
    """A new `protocol()` per connection on host:port until cancelled; the deep backlog
    takes a benchmark's burst of connects."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(protocol, host, port, backlog=4096)
    async with server:
        await server.serve_forever()
