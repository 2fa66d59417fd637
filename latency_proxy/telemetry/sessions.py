"""Sessions and call graphs from keyed hashes: which earlier call each chat call continues.

At a call's record, its messages are hashed (measure/conversation.py) and looked up among
the answers the proxy relayed: a call whose messages before their last assistant message
are an earlier call's prompt, and whose assistant message is that call's answer, continues
it (its parent), in the parent's session, one turn further. A call that continues none is
put in the session its caller names (`x-session-id`), else in its W3C trace's, else in a
session of its own. The table keeps hashes and ids, never text, and is bounded: at most
`capacity` sessions, each with its last MAX_CALLS_KEPT answers; a session with no call for
`idle_s` expires, and the least recently active one makes room for a new one past the cap,
each counted by why (latency_proxy_sessions_expired_total).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from hashlib import blake2b

import orjson
from opentelemetry.trace import SpanContext

from latency_proxy.measure.conversation import PromptShape, prompt_shape
from latency_proxy.record.exchange import Exchange
from latency_proxy.record.outcome import Outcome
from latency_proxy.record.session import Placement

MAX_CALLS_KEPT = 64  # a session's most recent answers a later call may continue
EXPIRED_IDLE = "idle"
EXPIRED_CAPACITY = "capacity"
EXPIRED_REASONS = (EXPIRED_IDLE, EXPIRED_CAPACITY)


@dataclass(frozen=True, slots=True)
class _Answered:
    request_id: str
    session: str
    turn: int
    t_end: float  # perf_counter at its last byte
    span: SpanContext | None


@dataclass(slots=True)
class _Session:
    last: float  # perf_counter of its latest call's record
    keys: list[bytes] = field(default_factory=list)  # its answers' keys in the table, oldest first


class SessionTable:
    """The open sessions and the answers later calls may continue."""

    def __init__(
        self,
        key: bytes,
        capacity: int,
        idle_s: float,
        on_expired: Callable[[str], None] = lambda reason: None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._key = key
        self._capacity = capacity
        self._idle_s = idle_s
        self._on_expired = on_expired
        self._clock = clock
        self._answers: dict[bytes, list[_Answered]] = {}
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    @property
    def key(self) -> bytes:
        """The deployment's session key: every hash of a conversation is keyed with it."""
        return self._key

    @property
    def open(self) -> int:
        return len(self._sessions)

    @property
    def answers(self) -> int:
        return sum(len(calls) for calls in self._answers.values())

    def place(self, exchange: Exchange, t_end: float) -> Placement | None:
        """Where a finished chat call stands (`t_end`: its last byte); its answer, if it got
        one, joins the table. None for a body that is not a chat request."""
        call = exchange.call
        if call is None or not call.body:
            return None
        try:
            shape = prompt_shape(orjson.loads(call.body), self._key)
        except orjson.JSONDecodeError:
            return None
        if shape is None:
            return None
        now = self._clock()
        self._expire(now)
        named = self._named_session(exchange)
        span = (exchange.client_span or exchange.server_span).context
        parent = self._parent(shape, named[0] if named else None)
        answer = exchange.answer
        tools_asked = len(answer.tool_ids) if answer is not None else 0
        if parent is not None:
            session, joined_by, turn = parent.session, "parent", parent.turn + 1
        elif named is not None:
            (session, joined_by), turn = named, 1
        else:
            session, joined_by, turn = self._id(b"call", exchange.request_id), "new", 1
        placement = Placement(
            session,
            joined_by,
            turn,
            parent.request_id if parent else None,
            max(0.0, exchange.t0 - parent.t_end) if parent else None,
            parent.span if parent else None,
            tools_asked,
            shape.tools_answered,
            shape.blocks,
            shape.chars,
        )
        held = self._touch(session, now)
        if answer is not None and exchange.outcome is Outcome.OK and 200 <= exchange.status < 300:
            key = shape.prompt + answer.digest()
            self._keep(held, key, _Answered(exchange.request_id, session, turn, t_end, span))
        return placement

    def _named_session(self, exchange: Exchange) -> tuple[str, str] | None:
        """The session the caller's `x-session-id`, else its W3C trace, names."""
        if exchange.session_header:
            return self._id(b"header", exchange.session_header.decode("latin-1")), "header"
        caller = exchange.server_span.parent
        if caller is not None and caller.is_valid:
            return self._id(b"trace", format(caller.trace_id, "032x")), "trace"
        return None

    def _parent(self, shape: PromptShape, named: str | None) -> _Answered | None:
        """The call this one continues: among the answers its last assistant message equals,
        the one in the session its caller names, else the latest."""
        if shape.continues is None:
            return None
        prompt, answer = shape.continues
        found = self._answers.get(prompt + answer)
        if not found:
            return None
        for candidate in reversed(found):
            if candidate.session == named:
                return candidate
        return found[-1]

    def _id(self, kind: bytes, value: str) -> str:
        return blake2b(kind + b"\x00" + value.encode(), key=self._key, digest_size=8).hexdigest()

    def _touch(self, session: str, now: float) -> _Session:
        held = self._sessions.pop(session, None) or _Session(now)
        held.last = now
        self._sessions[session] = held
        while len(self._sessions) > self._capacity:
            self._drop(next(iter(self._sessions)), EXPIRED_CAPACITY)
        return held

    def _expire(self, now: float) -> None:
        sessions = self._sessions
        while sessions:
            oldest, held = next(iter(sessions.items()))
            if now - held.last < self._idle_s:
                return
            self._drop(oldest, EXPIRED_IDLE)

    def _drop(self, session: str, reason: str) -> None:
        held = self._sessions.pop(session)
        for key in held.keys:
            self._forget(key, session)
        self._on_expired(reason)

    def _keep(self, held: _Session, key: bytes, answered: _Answered) -> None:
        self._answers.setdefault(key, []).append(answered)
        held.keys.append(key)
        if len(held.keys) > MAX_CALLS_KEPT:
            self._forget(held.keys.pop(0), answered.session)

    def _forget(self, key: bytes, session: str) -> None:
        calls = self._answers.get(key)
        if calls is None:
            return
        for i, call in enumerate(calls):
            if call.session == session:
                del calls[i]
                break
        if not calls:
            del self._answers[key]
