"""One request inside the simulated engine: its progress, its timestamps, and the hand-off
that wakes the HTTP response when a chunk's worth of tokens is ready.

The stream interval lives here (vLLM's `--stream-interval`): the first token is released at
once, then every `stream_interval` tokens, and whatever remains when the request finishes.
(`first_chunk` > 1 is a scripted test's chunking, script.py: vLLM's first chunk is one token.)
As in vLLM's output processor, the engine's step decides a chunk's end, not the reader: a
reader that wakes late still gets the count the step released, and one that missed several
chunks gets them merged, as vLLM's per-request output collector merges them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from itertools import chain

from loadgen.sim.model.speculation import SpecStats


class Seq:
    __slots__ = (
        "_next",
        "_waiter",
        "aborted",
        "arrival",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "computed",
        "created_tokens",
        "finished_at",
        "first_chunk",
        "first_sent_at",
        "first_token_at",
        "generated",
        "hashed_blocks",
        "index",
        "last_sent_at",
        "last_token_at",
        "output_tokens",
        "preemptions",
        "prompt_tokens",
        "queued_at",
        "released",
        "scheduled_at",
        "spec",
        "stepped",
        "stream_interval",
    )

    def __init__(
        self,
        prompt_tokens: int,
        output_tokens: int,
        arrival: float,
        stream_interval: int = 1,
        first_chunk: int = 1,
        block_hashes: tuple[bytes, ...] = (),
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.block_hashes = block_hashes  # of its full blocks, prompt then answer (prefix_cache.py)
        self.output_tokens = output_tokens  # planned; the request finishes when reached
        self.stream_interval = stream_interval
        self.first_chunk = first_chunk
        self.arrival = arrival
        self.index = -1  # its place among the requests a caller numbered (the twin's); -1: none
        self.generated = 0
        self.computed = 0  # tokens whose KV is in the cache (scheduler's view)
        self.blocks: list[int] = []  # the KV-cache blocks it holds, in order
        self.hashed_blocks = 0  # of them, those whose hashes the cache was given (vLLM's count)
        self.preemptions = 0
        self.cached_tokens = 0  # prompt tokens its first admission found in the prefix cache
        self.created_tokens = 0  # prompt tokens of full blocks it added to the cache
        # taken into the engine's queue (between steps) and first admitted to a step
        self.queued_at: float | None = None
        self.scheduled_at: float | None = None
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.finished_at: float | None = None
        # when the front end (frontend.py) sent its first and latest tokens on to the client
        self.first_sent_at: float | None = None
        self.last_sent_at: float | None = None
        self.aborted = False
        self.spec: SpecStats | None = None  # its verify steps, when the engine speculates
        self.stepped = 0  # tokens sampled in its last step (more than 1 when speculating)
        self._next = first_chunk  # the cumulative count at which the next chunk is released
        # cumulative tokens of the chunks released so far: `generated` right after the step
        # that released one
        self.released = 0
        self._waiter: asyncio.Future[None] | None = None

    @property
    def known(self) -> int:
        """Tokens the model has seen: the prompt plus everything sampled so far."""
        return self.prompt_tokens + self.generated

    @property
    def finished(self) -> bool:
        return self.generated >= self.output_tokens

    def advance(self, tokens: int, now: float) -> float | None:
        """Record `tokens` newly sampled at `now`; returns the gap since the previous token
        (None for the first). Releases a chunk when one is due, and wakes the reader."""
        gap = None if self.last_token_at is None else (now - self.last_token_at) / tokens
        if self.first_token_at is None:
            self.first_token_at = now
        self.stepped = tokens
        generated = self.generated = self.generated + tokens
        self.last_token_at = now
        if generated >= self.output_tokens:  # finished: its last chunk, however short
            self.finished_at = now
        elif generated < self._next:
            return gap
        self.released = generated
        self._next = generated + self.stream_interval
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        return gap

    def sent(self, at: float) -> None:
        """Its tokens of the latest step reached the client at `at`."""
        if self.first_sent_at is None:
            self.first_sent_at = at
        self.last_sent_at = at

    def chunk_ends(self) -> Iterator[int]:
        """Cumulative token counts of all chunks, for a timeline known in advance."""
        ends = range(self.first_chunk, self.output_tokens, self.stream_interval)
        return chain(ends, (self.output_tokens,))

    async def next_chunk(self, taken: int) -> int:
        """Wait for a chunk past `taken` tokens; returns the cumulative tokens released."""
        while self.released <= taken:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        self._waiter = None
        return self.released
