"""The slowest measured requests of each target, by TTFT and by E2E, as both reports show
them: their figures (TTFT split into queue, server and the rest where the server said),
their ids and their traces.
"""

from __future__ import annotations

from operator import attrgetter

from loadgen.analysis.records import Record, RunData
from loadgen.reports.formatting import ms, trace_link

SLOWEST = 5


def slowest(data: RunData) -> list[tuple[str, str, list[Record]]]:
    """(target, "TTFT" or "E2E", its slowest measured requests, slowest first)."""
    found = []
    for name in dict.fromkeys(r.target for r in data.records):
        ok = [r for r in data.records if r.target == name and r.ok and not r.excluded]
        for label, key in (("TTFT", "ttft_s"), ("E2E", "e2e_s")):
            ranked = sorted(
                (r for r in ok if getattr(r, key) is not None),
                key=attrgetter(key),
                reverse=True,
            )[:SLOWEST]
            if ranked:
                found.append((name, label, ranked))
    return found


def slowest_requests(data: RunData) -> list[str]:
    """The slowest measured requests of each target by TTFT and by E2E, with the ids that
    find them in the proxy's log lines and traces (links when --trace-url gave a template)."""
    lines = ["## Slowest requests", ""]
    reasoned = any_reasoned(data)
    columns = slowest_columns(reasoned)
    for name, label, ranked in slowest(data):
        lines += [
            f"{name}, by {label}:",
            "",
            "| " + " | ".join(columns) + " |",
            "|---" * len(columns) + "|",
        ]
        for r in ranked:
            trace = trace_cell(data.meta.get("trace_url"), r.trace_id)
            cells = [*slowest_cells(r, reasoned), f"`{r.request_id}`", trace]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines if len(lines) > 2 else []


def trace_cell(template: str | None, trace_id: str | None) -> str:
    """A trace id as report.md shows it: a link when --trace-url gave a template."""
    link = trace_id and trace_link(template, trace_id)
    return f"[{trace_id}]({link})" if link else trace_id or "—"


SLOWEST_COLUMNS = (
    "TTFT (ms)",
    "answer TTFT",
    "E2E (ms)",
    "queue",
    "server TTFT",
    "network and proxy",
    "stalls",
    "request id",
    "trace id",
)


def slowest_columns(reasoned: bool) -> tuple[str, ...]:
    """The tables' columns: answer TTFT only where something reasoned (else it is TTFT's
    twin)."""
    return tuple(c for c in SLOWEST_COLUMNS if reasoned or c != "answer TTFT")


def any_reasoned(data: RunData) -> bool:
    return any(r.reasoning_s is not None for r in data.records)


def slowest_cells(r: Record, reasoned: bool) -> list[str]:
    """A slow request's figures (ms), as both reports show them, before its ids."""
    queue, server, rest = ttft_split(r)
    answer = (r.answer_ttft_s,) if reasoned else ()
    figures = (r.ttft_s, *answer, r.e2e_s, queue, server, rest)
    return [*(ms(v) for v in figures), "—" if r.stalls is None else str(r.stalls)]


def ttft_split(r: Record) -> tuple[float | None, float | None, float | None]:
    """A request's TTFT as (server queue, server TTFT, the rest: network, proxy, client),
    from the server's own timings; all None when it sent none."""
    if r.ttft_s is None or r.server_queue_s is None or r.server_ttft_s is None:
        return None, None, None
    return r.server_queue_s, r.server_ttft_s, r.ttft_s - r.server_queue_s - r.server_ttft_s
