"""Parser + meter on their own: CPU per SSE event, no sockets, no event loop.

The streams are the simulator's (loadgen.sim.wire.responses.ChunkWriter writes vLLM's chunks,
key for key): a chat role chunk, content chunks, a finish chunk, the usage chunk when asked
for, [DONE]; chat and completions, with no usage, a final usage chunk, or usage on every
chunk (`continuous_usage_stats`). Each chunk arrives as its own read, as it does from a streaming
upstream. One pass = a fresh SSEParser and StreamMeter, every chunk through `feed` and every
event through `on_event`, then `finish`; the figure is the pass's time over its events, the
fastest of `--repeat` short rounds (the one least disturbed by the rest of a shared machine).
The column "full parse" is the same pass with `StreamMeter(lazy=False)`: every event parsed
in full; "answer hashed" the same pass hashing the answer as it streams (chat: an agent's
sessions, measure/conversation.py), beside the plain pass in the same round.

    python bench/meter_micro.py [--tokens 64] [--repeat 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence

from latency_proxy.measure.conversation import KEY_BYTES, AnswerDigest
from latency_proxy.measure.meter import StreamMeter
from latency_proxy.measure.sse import Event, SSEParser
from loadgen.sim.wire.requests import GenerationRequest
from loadgen.sim.wire.responses import ChunkWriter

GOAL_US = 8.0
# what a model writes: words, punctuation, a newline, a quote, a non-ASCII character
PIECES = (" The", " proxy", " measures", ",", " time", "\n", ' "quoted"', " café", " 42", ".")
SCENARIOS = {
    "chat": dict(chat=True),
    "chat, final usage": dict(chat=True, include_usage=True),
    "chat, usage per chunk": dict(chat=True, include_usage=True, continuous_usage=True),
    "completions, final usage": dict(chat=False, include_usage=True),
    "completions, usage per chunk": dict(chat=False, include_usage=True, continuous_usage=True),
}


def stream_chunks(tokens: int, **request: bool) -> list[bytes]:
    """One response's reads, one event each."""
    req = GenerationRequest(model="bench", prompt=["x"] * 12, stream=True, **request)
    writer = ChunkWriter(req, "chatcmpl-8f0c2e1d9b7a4c3e", "bench-model", "vllm-0.1-abcdef12")
    chunks = [writer.role()] if req.chat else []
    for i in range(1, tokens):
        chunks.append(writer.content(PIECES[i % len(PIECES)], i))
    chunks.append(writer.content(".", tokens, finish_reason="length"))
    tail = writer.tail(tokens)
    done = b"data: [DONE]\n\n"
    chunks.extend([tail[: -len(done)], done] if tail != done else [done])
    return chunks


def pass_both(chunks: Sequence[bytes], lazy: bool = True, answer: bool = False) -> int:
    digest = AnswerDigest(b"k" * KEY_BYTES) if answer else None
    parser, meter = SSEParser(), StreamMeter(0.0, lazy=lazy, answer=digest)
    on_event = meter.on_event
    n = 0
    for i, chunk in enumerate(chunks):
        for event in parser.feed(chunk):
            on_event(i * 0.01, event)
            n += 1
    meter.finish(len(chunks) * 0.01)
    return n


def pass_parser(chunks: Sequence[bytes]) -> int:
    parser = SSEParser()
    return sum(len(parser.feed(chunk)) for chunk in chunks)


def pass_meter(events: Sequence[Event]) -> int:
    meter = StreamMeter(0.0)
    on_event = meter.on_event
    for i, event in enumerate(events):
        on_event(i * 0.01, event)
    meter.finish(len(events) * 0.01)
    return len(events)


def best_us_per_event(run: Callable[[], int], repeat: int, min_time_s: float = 0.02) -> float:
    """Fastest round, in µs per event; each round repeats the pass for at least min_time_s."""
    best = float("inf")
    for _ in range(repeat):
        events = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < min_time_s:
            events += run()
        best = min(best, elapsed / events * 1e6)
    return best


def measure(tokens: int, repeat: int) -> list[dict]:
    rows = []
    for name, request in SCENARIOS.items():
        chunks = stream_chunks(tokens, **request)
        events = SSEParser().feed(b"".join(chunks))
        rows.append(
            {
                "stream": name,
                "events": len(events),
                "bytes_per_event": sum(map(len, chunks)) / len(events),
                "parser_us": best_us_per_event(lambda c=chunks: pass_parser(c), repeat),
                "meter_us": best_us_per_event(lambda e=events: pass_meter(e), repeat),
                "both_us": best_us_per_event(lambda c=chunks: pass_both(c), repeat),
                "both_full_parse_us": best_us_per_event(
                    lambda c=chunks: pass_both(c, lazy=False), repeat
                ),
                **_answer_hashed(chunks, repeat),
            }
        )
    return rows


def _answer_hashed(chunks: Sequence[bytes], repeat: int) -> dict:
    """Both passes, plain and hashing the answer, alternating round by round: the added cost
    per event as the difference of the two fastest rounds, and their ratio."""
    plain = hashed = float("inf")
    for _ in range(repeat):
        plain = min(plain, best_us_per_event(lambda: pass_both(chunks), 1))
        hashed = min(hashed, best_us_per_event(lambda: pass_both(chunks, answer=True), 1))
    return {
        "answer_hashed_us": hashed,
        "answer_added_us": hashed - plain,
        "answer_ratio": hashed / plain,
    }


def markdown(rows: Sequence[dict]) -> str:
    lines = [
        "| stream | events | bytes/event | parser µs/event | meter µs/event | both µs/event "
        "| both, full parse µs/event | both, answer hashed µs/event (added, ratio) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['stream']} | {r['events']} | {r['bytes_per_event']:.0f} | "
            f"{r['parser_us']:.2f} | {r['meter_us']:.2f} | {r['both_us']:.2f} | "
            f"{r['both_full_parse_us']:.2f} | {r['answer_hashed_us']:.2f} "
            f"({r['answer_added_us']:+.2f}, ×{r['answer_ratio']:.3f}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=64, help="content events per stream")
    parser.add_argument("--repeat", type=int, default=40, help="rounds; the fastest is shown")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    rows = measure(args.tokens, args.repeat)
    if args.json:
        print(json.dumps({"settings": vars(args), "goal_us": GOAL_US, "rows": rows}, indent=2))
    else:
        print(markdown(rows))
        worst = max(r["both_us"] for r in rows)
        print(f"\ngoal: parser + meter ≤ {GOAL_US:g} µs/event; worst stream here {worst:.2f}")


if __name__ == "__main__":
    main()
