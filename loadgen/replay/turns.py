"""Sessions of turns, as AIPerf writes them (its multi_turn datasets, and Mooncake trace lines
with a `session_id`): each later turn of a session waits for the answer to the turn before
it. Pure, no I/O.

AIPerf sends a session's turns one after another: a later turn once the turn before it has
been answered, then its `delay` (its scheduler's `schedule_later(delay)` on the previous
turn's return), or at its `timestamp` if that is later; and it keeps the conversation: each
turn's prompt is every turn before it, their answers, and its own text. So a later turn here
is the previous turn's call continued: its parent is that turn, its gap the delay (or, for a
`timestamp`, the time since the previous turn's: AIPerf's send is never earlier), and its
prompt the previous one's, its answer and its own new tokens.

A session's first turn arrives at its timestamp; without one, with the session before it
(at 0 when no session before has a time). A later turn's `at` is its parent's plus the gap:
where it falls in the window, not when it is sent.
"""

from __future__ import annotations

import dataclasses

from loadgen.inputs.bounds import MAX_TOKENS
from loadgen.replay.rows import DAY_S, BadRow, TraceRecord


@dataclasses.dataclass(slots=True)
class Sessions:
    """The turns read so far: each session's latest, and the clock of the last first turn."""

    _last: dict[str, TraceRecord] = dataclasses.field(default_factory=dict)
    _clock: float = 0.0

    def seen(self, session: str) -> bool:
        """Whether a turn of `session` has been placed."""
        return session in self._last

    def place(self, turn: TraceRecord, row: int, stamped: bool, delay: float | None) -> TraceRecord:
        """`turn` (its own new tokens; `at` its timestamp when `stamped`) as its session's
        next call; BadRow on `row` (the file's line) when it cannot follow its session."""
        if stamped and turn.at and delay:  # as AIPerf's check: a zero of either is unset
            raise BadRow(row, "a turn has a timestamp or a delay, not both")
        if turn.session is None:
            self._clock = turn.at if stamped else self._clock
            return dataclasses.replace(turn, at=self._clock)
        previous = self._last.get(turn.session)
        call = str(turn.line)
        if previous is None:
            at = turn.at if stamped else self._clock
            self._clock = at
            placed = dataclasses.replace(turn, at=at, call=call, turn=1)
        else:
            if stamped and turn.at < previous.at:
                raise BadRow(
                    row,
                    f"timestamp is before its session's turn before it ({turn.at:g} s < "
                    f"{previous.at:g} s)",
                )
            gap = turn.at - previous.at if stamped else delay or 0.0
            if gap > DAY_S:
                raise BadRow(row, f"{gap:g} s after its session's turn before it: over a day")
            tokens = previous.input_tokens + previous.output_tokens + turn.input_tokens
            if tokens > MAX_TOKENS:
                raise BadRow(row, f"the conversation grows past {MAX_TOKENS} tokens")
            placed = dataclasses.replace(
                turn,
                at=previous.at + gap,
                input_tokens=tokens,
                call=call,
                parent=previous.call,
                gap_s=gap,
                turn=(previous.turn or 1) + 1,
            )
        self._last[turn.session] = placed
        return placed
