"""A run of decode steps whose batch stays the same: scheduled without visiting every
sequence. Pure, no I/O.

Once every running sequence sampled in a step, none finished and none waits, the next step
is the same sequences decoding one token each: it holds as many new tokens as sequences,
and the context it reads grows by as many each step. A sequence then needs the scheduler
only on the steps where its next token starts a KV block or fills one (every block_size
tokens), so the stride files each sequence under the step of its next such event and hands
the scheduler those, in the running order a full pass would have visited them. A step's
work and totals are what the full pass (scheduler.py, _continue) would have built.
"""

from __future__ import annotations

from loadgen.sim.model.sequence import Seq


class Stride:
    """The steps after the one that made the batch steady, counted from 0."""

    def __init__(self, running: list[Seq], block_size: int) -> None:
        self.block_size = block_size
        self.work = [(seq, 1) for seq in running]
        self.context = sum(seq.computed + 1 for seq in running)  # the next step's
        self.step = 0
        self._due: dict[int, list[tuple[int, Seq]]] = {}
        for place, seq in enumerate(running):
            self._file(place, seq)

    def due(self) -> list[tuple[int, Seq]]:
        """The sequences (with their place in the batch) whose next token starts or fills a
        block on this step, in running order."""
        placed = self._due.pop(self.step, None)
        return sorted(placed, key=lambda entry: entry[0]) if placed else []

    def advance(self, served: list[tuple[int, Seq]]) -> int:
        """This step scheduled, `served` given their blocks: they are filed under their next
        events and the step's context is returned."""
        for place, seq in served:
            self._file(place, seq)
        context = self.context
        self.context += len(self.work)
        self.step += 1
        return context

    def _file(self, place: int, seq: Seq) -> None:
        """Under the step where seq's token next needs a new block (its context passes the
        blocks it holds) or fills one (its hashed blocks fall one short)."""
        size, computed = self.block_size, seq.computed
        starts = len(seq.blocks) * size - computed
        fills = (seq.hashed_blocks + 1) * size - 1 - computed
        step = self.step + max(0, min(starts, fills))
        self._due.setdefault(step, []).append((place, seq))
