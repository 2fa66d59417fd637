"""Every request loadgen sends is a record: the cooldown requests still in flight when a
block ends are cut and recorded (excluded, unfinished), not cancelled unseen — the server
counted 113 chat requests where requests.jsonl had 110."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.analysis.records import UNFINISHED
from loadgen.commands.cli import main
from tests.support.scripted_upstream import arrivals, running


def test_the_server_receives_exactly_the_requests_recorded(tmp_path: Path) -> None:
    with running(ttft=0.05, itl=0.02, script={"tokens": 8}) as url:
        before = len(arrivals(url))
        out = tmp_path / "run"
        argv = ["--target", url, "--concurrency", "4", "--requests", "40", "--warmup", "0.5s"]
        assert main([*argv, "--no-progress", "--out", str(out)]) == 0
        received = len(arrivals(url)) - before
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert received == len(records)
    measured = [r for r in records if r["excluded"] is None]
    assert len(measured) == 40 and all(r["ok"] for r in measured)
    cut = [r for r in records if r["error"] == UNFINISHED]
    assert all(r["excluded"] == "cooldown" for r in cut)
