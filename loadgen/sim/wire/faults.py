"""Failure injection: what can go wrong with one request, and the rules that make it go wrong
at a rate (`--fault`) or on demand (the `x-fault` header). No I/O: the middleware
(middleware.py) and the stream (app.py) play them.

A proxy or a load generator is only trusted once it has been seen to count, classify and
survive what a real fleet does to it: errors, slow starts, streams that break, stall or
carry garbage, and an engine that restarts under load. llm-d-inference-sim injects HTTP
errors at a rate; this injects those and the stream-level faults, reproducibly: every
generation request draws one number from a generator seeded with `--seed`, in arrival
order, and at most one rule (the rules' rates are laid end to end, so they add up to ≤ 1).

    --fault KIND=RATE[@N][:ARG]          (repeatable; `x-fault: KIND[@N][:ARG]` for one request)

    error=P[:STATUS]     answer STATUS (default 500; 429 and 503 carry Retry-After: 1)
    spike=P:DURATION     the response starts DURATION late
    cut=P[@N]            the connection closes after N content chunks (default 0: right after
                         the headers, and chat's role chunk), the stream unterminated
    reset=P[@N]          the same with a TCP reset (RST) instead of a close
    stall=P[@N]:DURATION the stream goes silent for DURATION after N content chunks, then goes on
    malformed=P[@N][:text|shape]  one broken event after N content chunks, then the stream goes
                         on: `text` is not JSON, `shape` is JSON that is no chunk ({"choices": 1})
    restart=P:DURATION   the engine restarts: every generation in flight is cut and, for
                         DURATION, every request but /metrics answers 503 (Retry-After);
                         a restart drawn while it is down does nothing more

N counts content chunks (tokens at stream interval 1); a stream that ends before N is not
hurt. Stream faults apply to streamed answers only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from latency_proxy.base.units import parse_duration
from loadgen.sim.wire.errors import ApiError

FAULT_HEADER = "x-fault"
MALFORMED = {"text": '{"choices": [{"delta": {"content": ', "shape": '{"choices": 1}'}
RETRY_AFTER = {429, 503}
_SPEC = re.compile(
    r"(?P<kind>[a-z]+)(?:=(?P<rate>[0-9.eE+-]+))?(?:@(?P<after>\d+))?(?::(?P<arg>.+))?"
)
KINDS = ("error", "spike", "cut", "reset", "stall", "malformed", "restart")
_AT = {"cut", "reset", "stall", "malformed"}  # the kinds that happen at a chunk
_NEEDS_DURATION = {"spike", "stall", "restart"}


class ScriptedDeath(Exception):
    """Raised mid-stream to cut the connection, as a crash would (`reset`: with an RST)."""

    def __init__(self, message: str, *, reset: bool = False) -> None:
        super().__init__(message)
        self.reset = reset


@dataclass(frozen=True, slots=True)
class Faults:
    """What goes wrong with one request: the fields a script (script.Script) and a drawn
    fault share. The defaults are a request nothing happens to."""

    headers: dict[str, str] = field(default_factory=dict)  # extra response headers
    headers_delay: float = 0.0  # seconds before the response starts
    status: int = 200  # answer with this status instead, and error_body
    error_body: str | None = None  # JSON text; default a vLLM-shaped error
    die_after: int | None = None  # content chunks before the connection is cut
    die_reset: bool = False  # cut with a TCP reset
    hang_after: int | None = None  # content chunks before the stream goes silent
    hang_s: float | None = None  # for this long (None: until the client goes away)
    malformed_after: int | None = None  # content chunks before one broken event
    malformed: str = MALFORMED["text"]  # that event's data
    restart_s: float = 0.0  # the engine restarts on this request, down this long

    def error(self) -> tuple[int, Any]:
        """The scripted error's status and body."""
        if self.error_body is not None:
            return self.status, json.loads(self.error_body)
        return self.status, ApiError(self.status, "scripted failure").body()

    async def after_chunk(self, chunks: int) -> bytes:
        """The faults due once `chunks` content chunks are out (0: before the first); the
        bytes of an extra event to send, or b""."""
        if self.die_after is not None and chunks >= self.die_after:
            raise ScriptedDeath(f"scripted death after {chunks} chunks", reset=self.die_reset)
        if self.hang_after == chunks:
            if self.hang_s is None:
                await asyncio.Event().wait()  # until the client goes away
            else:
                await asyncio.sleep(self.hang_s)
        if self.malformed_after == chunks:
            return b"data: " + self.malformed.encode() + b"\n\n"
        return b""


@dataclass(frozen=True, slots=True)
class Rule:
    """One `--fault`: a kind, the share of requests it hits, where and what."""

    kind: str
    rate: float
    after: int = 0
    status: int = 500
    duration: float = 0.0
    malformed: str = "text"

    def fields(self) -> dict[str, Any]:
        """The Faults fields a request this rule hits gets."""
        match self.kind:
            case "error":
                retry = {"retry-after": "1"} if self.status in RETRY_AFTER else {}
                return {"status": self.status, "headers": retry}
            case "spike":
                return {"headers_delay": self.duration}
            case "cut" | "reset":
                return {"die_after": self.after, "die_reset": self.kind == "reset"}
            case "stall":
                return {"hang_after": self.after, "hang_s": self.duration}
            case "malformed":
                return {"malformed_after": self.after, "malformed": MALFORMED[self.malformed]}
            case _:  # restart
                return {"restart_s": self.duration}


def parse(text: str, *, rated: bool = True) -> Rule:
    """A `--fault` (`rated`: KIND=RATE…) or an `x-fault` header (KIND…, always); ValueError
    naming what is wrong."""
    match = _SPEC.fullmatch(text.strip())
    if match is None or match["kind"] not in KINDS:
        raise ValueError(f"{text!r}: not KIND=RATE[@N][:ARG], KIND one of {', '.join(KINDS)}")
    kind, rate, after, arg = match["kind"], match["rate"], match["after"], match["arg"]
    if (rate is None) == rated:
        raise ValueError(f"{text!r}: " + ("give a rate, KIND=RATE" if rated else "no rate here"))
    rule = Rule(kind, float(rate) if rated else 1.0)
    if not 0 <= rule.rate <= 1:
        raise ValueError(f"{text!r}: the rate is a probability, 0 to 1")
    if after is not None:
        if kind not in _AT:
            raise ValueError(f"{text!r}: {kind} has no @N")
        rule = dataclasses.replace(rule, after=int(after))
    if kind in _NEEDS_DURATION:
        if arg is None:
            raise ValueError(f"{text!r}: {kind} needs :DURATION")
        return dataclasses.replace(rule, duration=parse_duration(arg))
    if kind == "error" and arg is not None:
        if not arg.isdigit() or not 400 <= int(arg) <= 599:
            raise ValueError(f"{text!r}: the status is 400-599")
        return dataclasses.replace(rule, status=int(arg))
    if kind == "malformed" and arg is not None:
        if arg not in MALFORMED:
            raise ValueError(f"{text!r}: malformed is {' or '.join(MALFORMED)}")
        return dataclasses.replace(rule, malformed=arg)
    if arg is not None:
        raise ValueError(f"{text!r}: {kind} takes no :ARG")
    return rule


class Injector:
    """The server's rules and its seeded draw, one per generation request in arrival order;
    counts what it injected, by kind."""

    def __init__(self, rules: Sequence[Rule], seed: int = 0) -> None:
        if sum(rule.rate for rule in rules) > 1 + 1e-9:
            raise ValueError("the --fault rates add up to more than 1")
        self.rules = tuple(rules)
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(f"{seed}:faults")

    def draw(self, header: str | None) -> dict[str, Any]:
        """The Faults fields for the next generation request: its `x-fault` header's if it
        has one (ValueError when bad), else the drawn rule's, else none."""
        u = self._rng.random()  # drawn either way: a header does not shift later draws
        if header is not None:
            rule: Rule | None = parse(header, rated=False)
        else:
            rule = self._pick(u)
        if rule is None:
            return {}
        self.injected[rule.kind] += 1
        return rule.fields()

    def _pick(self, u: float) -> Rule | None:
        for rule in self.rules:
            if u < rule.rate:
                return rule
            u -= rule.rate
        return None
