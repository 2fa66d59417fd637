"""A chunk's end is the engine step's decision: a reader that wakes late gets the count the
step released, not the tokens sampled since (vLLM's output processor decides it there)."""

import asyncio

from loadgen.sim.model.sequence import Seq


def test_a_late_reader_gets_the_chunk_the_step_released() -> None:
    async def scenario() -> list[int]:
        seq = Seq(prompt_tokens=8, output_tokens=10, arrival=0.0, stream_interval=4)
        seq.advance(1, 0.01)
        chunks = [await seq.next_chunk(0)]  # the first token, at once
        for step in range(4):
            seq.advance(1, 0.02 + step / 100)  # the fourth of these releases 1 + 4
        seq.advance(1, 0.06)  # sampled before the reader wakes: the next chunk's
        chunks.append(await seq.next_chunk(chunks[-1]))
        reader = asyncio.ensure_future(seq.next_chunk(chunks[-1]))
        for step in range(3):
            await asyncio.sleep(0)  # steps yield to the loop, as the engine's do
            seq.advance(1, 0.07 + step / 100)  # the third releases 9
        chunks.append(await reader)
        seq.advance(1, 0.1)  # the last token: whatever remains
        chunks.append(await seq.next_chunk(chunks[-1]))
        return chunks

    assert asyncio.run(scenario()) == [1, 5, 9, 10]


def test_chunks_a_reader_missed_arrive_merged() -> None:
    async def scenario() -> int:
        seq = Seq(prompt_tokens=8, output_tokens=20, arrival=0.0, stream_interval=2)
        for step in range(7):
            seq.advance(1, step / 100)  # released at 1, 3, 5, 7
        return await seq.next_chunk(0)

    assert asyncio.run(scenario()) == 7
