"""Where the time went: a target's client-side TTFT and E2E split into the servers' parts.

The parts are means — the proxy's own overhead, vLLM's queue, prefill and decode time, from
the histograms sampled around each block (loadgen/analysis/server_metrics.py), or without those from
the servers' own per-request timings every request carried — because means add up and
percentiles do not. What the parts do not cover is the rest: the network, the HTTP
layers, tokenization and the client itself (and any intermediary), and the wait for the
engine's step in flight (vLLM's queue time starts when the engine takes a request in, in
between steps), derived as the client's mean minus the parts. Pure: a summary's target
block in, rows and a sentence out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# (summary server key, label) of the parts under each client figure, in the order they happen
TTFT_PARTS = (("proxy_overhead_s", "proxy"), ("queue_s", "queue"), ("prefill_s", "prefill"))
E2E_PARTS = (*TTFT_PARTS, ("decode_s", "decode"))
REST = "rest"
MEANING = {
    "proxy": "the proxy's own overhead",
    "queue": "vLLM's queue: the server is past its batch limit",
    "prefill": "prefill: long prompts, or a compute-bound server",
    "decode": "decode: the tokens themselves",
    REST: "outside vLLM's timings: network, HTTP layers, tokenization, the client and the "
    "wait for the engine's step in flight",
}


@dataclass(frozen=True, slots=True)
class Split:
    """One client figure (mean, seconds) and its parts; `rest` may dip below zero by noise."""

    figure: str  # "TTFT" or "E2E"
    client_s: float
    parts: tuple[tuple[str, float], ...]  # (label, mean seconds), REST last

    def largest(self) -> tuple[str, float]:
        """The biggest part and its share of the client figure."""
        label, value = max(self.parts, key=lambda part: part[1])
        return label, value / self.client_s

    def sentence(self) -> str:
        label, share = self.largest()
        return f"{share:.0%} of mean {self.figure} is {MEANING[label]}"


def _split(
    figure: str, client: float | None, server: Mapping[str, Any], parts: Sequence[tuple[str, str]]
) -> Split | None:
    found = [(label, server[key]["mean"]) for key, label in parts if server.get(key)]
    engine = [label for label, _ in found if label in ("queue", "prefill")]
    if client is None or client <= 0 or not engine:
        return None  # no server-side figures for this target: nothing to split
    rest = client - sum(value for _, value in found)
    return Split(figure, client, (*found, (REST, rest)))


PER_REQUEST = {
    "queue_s": "server_queue_s",
    "prefill_s": "server_ttft_s",
    "decode_s": "server_decode_s",
}


def per_request_parts(metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """The parts from the servers' own per-request timings (vLLM's
    --enable-per-request-metrics), when every measured request carried them."""
    count = metrics["ttft_s"]["count"]
    parts = {key: metrics.get(name) for key, name in PER_REQUEST.items()}
    if not count or any(part is None or part["count"] != count for part in parts.values()):
        return None
    return {**parts, "sources": ["per-request metrics"], "notes": [], "per_request": True}


def _server(target: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The sampled histograms' parts, else the per-request timings' ones."""
    return target.get("server") or per_request_parts(target["metrics"])


def splits(target: Mapping[str, Any]) -> list[Split]:
    """The TTFT and E2E splits of one target's summary block (those that can be made)."""
    server = _server(target)
    if not server:
        return []
    metrics = target["metrics"]
    found = [
        _split("TTFT", metrics["ttft_s"]["mean"], server, TTFT_PARTS),
        _split("E2E", metrics["e2e_s"]["mean"], server, E2E_PARTS),
    ]
    return [s for s in found if s is not None]


def markdown(name: str, target: Mapping[str, Any]) -> list[str]:
    """report.md's "Where the time went" table for one target, and its sentences."""
    found = splits(target)
    server = _server(target) or {}
    if not found:
        if server:
            return [
                f"### Where the time went: {name}",
                "",
                "No server-side queue or prefill figures moved during this target's blocks "
                f"(sampled: {', '.join(server['sources']) or 'none answered'}).",
                "",
            ]
        return []
    lines = [
        f"### Where the time went: {name}",
        "",
        "| client mean (ms) | " + " | ".join(label for label, _ in found[-1].parts) + " |",
        "|---|" + "---|" * len(found[-1].parts),
    ]
    for split in found:
        values = dict(split.parts)
        cells = [
            f"{values[label] * 1e3:.1f} ({values[label] / split.client_s:.0%})"
            if label in values
            else "—"
            for label, _ in found[-1].parts
        ]
        lines.append(f"| {split.figure} {split.client_s * 1e3:.1f} | " + " | ".join(cells) + " |")
    lines += ["", *(f"- {split.sentence()}." for split in found)]
    lines += [f"- note: {note}" for note in server.get("notes", [])]
    if server.get("per_request"):
        lines.append(
            "- means of the servers' own per-request timings (vLLM's `metrics` object: "
            "queue, scheduled to first token, first to last token); the rest is derived"
        )
    else:
        lines.append(
            "- means of the servers' histograms over each block's measured window (vLLM's "
            "`vllm:request_*_time_seconds`, the proxy's `latency_proxy_overhead_seconds`); "
            "the rest is derived"
        )
    return [*lines, ""]
