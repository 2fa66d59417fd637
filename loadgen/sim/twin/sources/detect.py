"""Which format a file is, told from its content: a JSON document (GuideLLM, vLLM's bench,
inference-perf) or JSON lines (AIPerf, the proxy's log, loadgen's requests.jsonl). Pure but
for reading the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from loadgen.sim.twin.sources import aiperf, guidellm, inference_perf, ours, vllm_bench
from loadgen.sim.twin.sources.stream import CaptureError, Stream

KNOWN = (
    "the proxy's request log, a loadgen run directory, AIPerf's profile_export.jsonl, "
    "GuideLLM's benchmarks.json, vLLM's bench serve JSON or inference-perf's per-request report"
)
DOCUMENTS: tuple[tuple[str, Callable[[Any], bool], Callable[[str, Any], list[Stream]]], ...] = (
    ("GuideLLM", guidellm.looks_like, guidellm.read),
    ("vLLM bench serve", vllm_bench.looks_like, vllm_bench.read),
    ("inference-perf", inference_perf.looks_like_requests, inference_perf.read),
    (
        "inference-perf",
        inference_perf.looks_like_stage,
        lambda name, _: inference_perf.refuse_stage(name),
    ),
)


def read(source: str) -> tuple[str, list[Stream]]:
    """The file's format and its streams; CaptureError naming the file for anything else."""
    path = Path(source)
    file = path / "requests.jsonl" if path.is_dir() else path
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError(f"{file}: cannot read it ({exc})") from None
    name = str(file)
    if not text.strip():
        raise CaptureError(f"{name}: empty: no request to fit")
    document = _document(text)
    if document is not None:
        for label, looks_like, reader in DOCUMENTS:
            if looks_like(document):
                return label, _some(name, label, reader(name, document))
        if not isinstance(document, dict):  # one object may be a log of one line
            raise CaptureError(f"{name}: a JSON document of no format the fit reads ({KNOWN})")
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        item = orjson.loads(first)
    except orjson.JSONDecodeError:
        raise CaptureError(f"{name}: neither JSON nor JSON lines ({KNOWN} expected)") from None
    if isinstance(item, dict) and aiperf.looks_like(item):
        return "AIPerf", _some(name, "AIPerf", aiperf.read(name, text))
    streams = ours.read(name, text)
    if not streams:
        raise CaptureError(f"{name}: no request lines in a format the fit reads ({KNOWN})")
    return "loadgen run" if "intended_at" in first else "proxy log", streams


def _document(text: str) -> Any:
    """The file as one JSON document (Python's reader: vLLM writes Infinity and NaN), or None
    when it is not one (JSON lines are several)."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def _some(name: str, label: str, streams: list[Stream]) -> list[Stream]:
    if not any(s.rows or s.failed or s.empty for s in streams):
        raise CaptureError(f"{name}: a {label} file with no request in it")
    return streams
