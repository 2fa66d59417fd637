"""vLLM's `bench serve --save-result --save-detailed` JSON: the run's settings, and lists
indexed by request (lengths, TTFT, the gaps between tokens, error; latency in later
releases). Pure.

Later releases (0.32, not 0.13) also write each request's start on the client's monotonic
clock (`start_times`): such a file is fitted request by request, a stream of its own.
Earlier releases wrote no send time: the arrivals are rebuilt from the file's
`request_rate` and `burstiness` for its requests (rebuilt.py) with the seed vLLM used,
which the file does not keep unless given as `--metadata seed=N` (vLLM's default, 0,
otherwise), and the fit matches the run's percentiles, not its requests. A run capped by
--max-concurrency sent as requests finished, which no rate rebuilds: it needs its start
times.
"""

from __future__ import annotations

import math
from typing import Any

from loadgen.sim.twin.sources import rebuilt
from loadgen.sim.twin.sources.fields import MAX_EPOCH, number, tokens, tpot
from loadgen.sim.twin.sources.stream import REBUILT, Captured, CaptureError, Stream

LISTS = ("input_lens", "output_lens", "ttfts", "itls")  # and latencies in later releases (0.32)
DEFAULT_SEED = 0  # vllm bench serve's --seed default


def looks_like(document: Any) -> bool:
    """A run's result, with or without its per-request lists (--save-detailed)."""
    return isinstance(document, dict) and (
        "input_lens" in document or {"request_rate", "burstiness", "completed"} <= document.keys()
    )


def read(name: str, document: dict[str, Any]) -> list[Stream]:
    n = len(document["input_lens"]) if isinstance(document["input_lens"], list) else -1
    for key in LISTS:
        if not isinstance(document.get(key), list) or len(document[key]) != n:
            raise CaptureError(
                f"{name}: no {key} list of {n} requests (saved without --save-detailed?)"
            )
    given = document.get("errors")
    errors: list[Any] = given if isinstance(given, list) else [""] * n
    starts = document.get("start_times")
    stream = Stream(wall_clock=False)
    if not isinstance(starts, list) or len(starts) != n:
        starts = _rebuild(name, document, n, stream)
    for i in range(n):
        at = f"{name}: request {i + 1}"
        row = {key: document[key][i] for key in LISTS} | {"start": starts[i]}
        if isinstance(document.get("latencies"), list) and len(document["latencies"]) == n:
            row["latencies"] = document["latencies"][i]
        output = tokens(row, "output_lens", at)
        if (i < len(errors) and errors[i]) or output == 0:
            stream.failed += 1
            continue
        ttft = number(row, "ttfts", at, 24 * 3600)
        if "latencies" in row:
            e2e = number(row, "latencies", at, 24 * 3600)
        elif isinstance(row["itls"], list):  # the gaps after the first token add up to the rest
            e2e = ttft + sum(number({"itl": g}, "itl", at, 24 * 3600) for g in row["itls"])
        else:
            raise CaptureError(f"{at}: itls is not a list")
        stream.rows.append(
            (
                Captured(
                    arrival=number(row, "start", at, MAX_EPOCH),
                    prompt_tokens=tokens(row, "input_lens", at),
                    output_tokens=output,
                    ttft=ttft,
                    tpot=tpot(e2e, ttft, output),
                    rebuilt=stream.fitted == REBUILT,
                ),
                document.get("model_id") if isinstance(document.get("model_id"), str) else None,
            )
        )
    return [stream]


def _rebuild(name: str, document: dict[str, Any], n: int, stream: Stream) -> list[float]:
    if document.get("max_concurrency") is not None:
        raise CaptureError(
            f"{name}: no start_times, and a run capped by --max-concurrency sent requests as "
            "others finished: no rate rebuilds its arrivals"
        )
    if document.get("ramp_up_strategy") is not None:
        raise CaptureError(
            f"{name}: no start_times, and a ramped rate: its arrivals cannot be rebuilt"
        )
    rate = _positive(document, "request_rate", name)
    burstiness = _positive(document, "burstiness", name, default=1.0)
    seed = document.get("seed", DEFAULT_SEED)
    if isinstance(seed, str) and seed.isdigit():
        seed = int(seed)  # --metadata seed=N writes a string
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise CaptureError(f"{name}: seed {seed!r} is not a whole number")
    stream.fitted = REBUILT
    stream.settings = {"request_rate": rate, "burstiness": burstiness, "seed": seed, "requests": n}
    return rebuilt.arrivals(n, rate, burstiness, seed)


def _positive(document: dict[str, Any], key: str, name: str, default: float | None = None) -> float:
    value = document.get(key, default)
    if value == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise CaptureError(
            f"{name}: no positive {key} to rebuild the arrivals from (it has {value!r})"
        )
    return float(value)
