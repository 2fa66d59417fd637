"""A run directory on disk: requests.jsonl, run.json, summary.json (+ report.md, plots).

run.json keeps everything besides the requests that a summary is computed from (block
times, loop-lag and GPU samples, the settings), so `merge` and `compare` can recompute every
figure from raw data instead of averaging averages.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from loadgen.analysis.records import GpuSample, Phase, Record, RunData, SummarySettings
from loadgen.analysis.server_metrics import ServerWindow

REQUESTS = "requests.jsonl"
RUN = "run.json"
SUMMARY = "summary.json"


def write(out: str | Path, data: RunData, summary: dict[str, Any]) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / REQUESTS, "wb") as f:
        for record in data.records:
            f.write(record.to_json() + b"\n")
    run = {
        "version": 1,
        "meta": data.meta,
        "settings": asdict(data.settings),
        "phases": [asdict(p) for p in data.phases],
        "loop_lag": data.loop_lag,
        "gpu": [asdict(s) for s in data.gpu],
        "server": [w.to_dict() for w in data.server],
    }
    (out / RUN).write_bytes(orjson.dumps(run))
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return out


def read(path: str | Path) -> RunData:
    path = Path(path)
    if not (path / RUN).exists():
        raise FileNotFoundError(f"{path} is not a run directory (no {RUN})")
    run = orjson.loads((path / RUN).read_bytes())
    records = []
    with open(path / REQUESTS, "rb") as f:
        for line in f:
            if line.strip():
                records.append(Record.from_dict(orjson.loads(line)))
    return RunData(
        records=records,
        phases=[Phase(**p) for p in run["phases"]],
        loop_lag=[(at, lag) for at, lag in run["loop_lag"]],
        gpu=[GpuSample(**s) for s in run["gpu"]],
        server=[ServerWindow.from_dict(w) for w in run.get("server", [])],
        settings=SummarySettings(**run["settings"]),
        meta=run["meta"],
    )


def read_summary(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / SUMMARY).read_text())
