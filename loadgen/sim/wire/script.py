"""Scripted mode: fixed timing that plays a script per request, injects faults on demand and
records what it received. For tests; off unless asked for. (middleware.py plays it.)

The proxy's and the load generator's tests need an upstream whose every answer is known in
advance, faults included, and that can say what reached it. Rather than a fake of their own,
they run the simulator in fixed timing with a script (`python -m loadgen.sim --ttft 0 --itl 0
--script '{"tokens": 5}'`, or `create_app(ttft=…, itl=…, script={…})`), so what they test
against speaks vLLM's wire format. Without `--script` none of this exists: no header is
read, nothing is recorded, no extra route answers.

A request's script is the server's (its `--script`, changed by `POST /control`) overlaid
with the request's `x-script` header, a JSON object (as llm-d-inference-sim injects failures
per request). Its fields (`Script`):

    ttft, itl         seconds to the first content chunk, then between chunks (default: the
                      server's --ttft/--itl)
    tokens            output tokens whatever max_tokens asks, finish_reason "length"
    per_chunk         tokens in every chunk, the first included (vLLM's first is one token)
    text              the text of every output token (default: the simulator's words)
    prompt_tokens     the prompt_tokens usage reports (default: as counted)
    reasoning_tokens  how many of the first tokens are reasoning (a server with a
                      --reasoning-parser; default: its own distribution)
    tokenizer         "words" (the simulator's rule) or "subwords" (tokenizer.SUBWORDS)
    and every field of faults.Faults, what can go wrong with a request:
    headers           extra response headers
    headers_delay     seconds before the response starts
    status            answer with this status instead, and `error_body` (JSON text; default
                      a vLLM-shaped error)
    die_after         content chunks before the connection is cut (0: right after the
                      headers), the stream unterminated; `die_reset`: with a TCP reset
    hang_after        content chunks before the stream goes silent: for `hang_s` seconds,
                      or until the client leaves
    malformed_after   content chunks before one event whose data is `malformed`
    restart_s         the engine restarts on this request (faults.py's `restart`)

`POST /control` also takes, for the whole server (`Control`): `stall_at`, `stall_s` (the
stall_at-th generation request, from 1, freezes the whole server for stall_s seconds) and
`fail_every`, `fail_status` (every fail_every-th generation request answers fail_status).
`GET /arrivals` lists the generation requests so far as `{"at": epoch seconds, "id":
X-Request-Id}`; in-process, `Scripting.received` and `.disconnects` hold every request and
every client that went away.

A scripted server answers to any model name, in its answers the request's (a test routes
many names to one upstream); an unknown model is a scripted `status: 404`. It is
reproducible: nothing is random, and `created` is the server's start time, so the same
script gives the same bytes.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from loadgen.sim.model.tokenizer import TOKENIZERS, Tokenizer
from loadgen.sim.wire.errors import ApiError
from loadgen.sim.wire.faults import Faults

SCRIPT_HEADER = "x-script"
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")


@dataclass(frozen=True, slots=True)
class Script(Faults):
    """One request's script: its timing and content, and (Faults) what goes wrong."""

    ttft: float | None = None
    itl: float | None = None
    tokens: int | None = None
    per_chunk: int = 1
    text: str | None = None
    prompt_tokens: int | None = None
    tokenizer: str = "words"
    reasoning_tokens: int | None = None  # of `tokens`, the first; with a reasoning parser

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer must be one of {sorted(TOKENIZERS)}")
        if self.per_chunk < 1:
            raise ValueError("per_chunk must be ≥ 1")

    @property
    def rules(self) -> Tokenizer:
        return TOKENIZERS[self.tokenizer]

    def pace(self) -> tuple[float | None, float | None]:
        """(ttft, itl per token) for fixed timing: `itl` is between chunks, so a chunk of
        `per_chunk` tokens spreads it over its tokens."""
        return self.ttft, None if self.itl is None else self.itl / self.per_chunk


@dataclass(frozen=True, slots=True)
class Control:
    """The whole server's faults, counted over its generation requests."""

    stall_at: int = 0
    stall_s: float = 1.0
    fail_every: int = 0
    fail_status: int = 500


@dataclass(frozen=True, slots=True)
class Received:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    t: float  # time.perf_counter() at arrival
    at: float  # time.time() at arrival


def overlay(base: Any, fields: Any) -> Any:
    """`base` with `fields` (a JSON object) replacing its own; ValueError for anything else."""
    if not isinstance(fields, dict):
        raise ValueError("a script is a JSON object")
    try:
        return dataclasses.replace(base, **fields)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


class Scripting:
    """A scripted server's state: the script, the faults, and what it received."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.script = overlay(Script(), script)
        self.control = Control()
        self.received: list[Received] = []
        self.disconnects: list[tuple[str, float]] = []  # (X-Request-Id, perf_counter time)
        self.generations = 0

    def update(self, fields: dict[str, Any]) -> dict[str, Any]:
        """POST /control: Control's fields for the server, the rest for later scripts."""
        if not isinstance(fields, dict):
            raise ValueError("a script is a JSON object")
        names = {f.name for f in dataclasses.fields(Control)}
        control = overlay(self.control, {k: v for k, v in fields.items() if k in names})
        self.script = overlay(self.script, {k: v for k, v in fields.items() if k not in names})
        self.control = control
        return {**dataclasses.asdict(self.script), **dataclasses.asdict(control)}

    def arrivals(self) -> list[dict[str, Any]]:
        return [
            {"at": r.at, "id": r.headers.get("x-request-id")}
            for r in self.received
            if r.path in GENERATION_PATHS
        ]

    def fault(self) -> tuple[int, Any] | None:
        """The server's faults for the next generation request: a stall, or its failure."""
        self.generations += 1
        control = self.control
        if self.generations == control.stall_at:
            time.sleep(control.stall_s)  # blocks the event loop: the whole server freezes
        if control.fail_every and self.generations % control.fail_every == 0:
            return control.fail_status, ApiError(control.fail_status, "scripted failure").body()
        return None
