"""One huge SSE event through the parser: the cost must grow linearly with its size.

An event still incomplete past --max-event-bytes (sse.MAX_EVENT_BYTES by default) passes
through unparsed; below the limit a big event's buffer grows in place. Here: 50 MB and 150 MB
events without a newline in 64 KiB reads (as a socket delivers them), and a 4 MB event just
under the limit in 1 KiB reads (the worst split below it); seconds and MB/s, one pass each.

    python bench/sse_big_event.py
"""

from __future__ import annotations

import time

from latency_proxy.measure.sse import MAX_EVENT_BYTES, SSEParser

CASES = (  # event size, read size, limit
    (50 * 10**6, 65536, MAX_EVENT_BYTES),
    (150 * 10**6, 65536, MAX_EVENT_BYTES),
    (MAX_EVENT_BYTES - 4096, 1024, MAX_EVENT_BYTES),
)


def one_pass(size: int, read: int, limit: int) -> float:
    parser = SSEParser(limit)
    piece = b"a" * read
    t = time.perf_counter()
    parser.feed(b"data: ")
    for _ in range(size // read):
        parser.feed(piece)
    events = parser.feed(b"\n\ndata: 1\n\n")
    seconds = time.perf_counter() - t
    assert events[-1].data == b"1"
    return seconds


def main() -> None:
    print("| event | reads | limit | seconds | MB/s |")
    print("|---|---|---|---|---|")
    for size, read, limit in CASES:
        seconds = one_pass(size, read, limit)
        print(
            f"| {size / 1e6:.0f} MB | {read} B | {limit / 2**20:.0f} MiB | {seconds:.3f} "
            f"| {size / 1e6 / seconds:.0f} |"
        )


if __name__ == "__main__":
    main()
