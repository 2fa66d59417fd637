"""`capacity --by speed` over an agents' capture: the answer is also how many sessions like
these start a minute at the speed found, the window's sessions over its length times the
speed, in capacity.json and in the sentence. On the twin, so the search takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.commands.cli import main

AGENT = Path(__file__).parents[1] / "fixtures" / "agent-capture.jsonl"
COPIES, EVERY_S = 8, 6.0  # the agent's three sessions, started again every 6 s


def sessions_capture(path: Path) -> tuple[int, float]:
    """The agent's capture, its sessions started COPIES times (ids and sessions renamed);
    the sessions it holds and its length (first arrival to last), in seconds."""
    calls = [json.loads(line) for line in AGENT.read_text().splitlines()]
    lines = []
    for k in range(COPIES):
        for call in calls:
            again = call | {
                "request_id": f"{call['request_id']}-{k}",
                "session": f"{call['session']}-{k}",
                "parent": call["parent"] and f"{call['parent']}-{k}",
                "arrived_at": call["arrived_at"] + k * EVERY_S,
            }
            lines.append(json.dumps(again) + "\n")
    path.write_text("".join(lines))
    arrivals = [json.loads(line)["arrived_at"] for line in lines]
    sessions = {json.loads(line)["session"] for line in lines}
    return len(sessions), max(arrivals) - min(arrivals)


def test_by_speed_an_agents_capture_is_said_in_sessions_a_minute(tmp_path: Path) -> None:
    count, span = sessions_capture(tmp_path / "capture.jsonl")
    assert count == 3 * COPIES
    out = tmp_path / "cap"
    argv = ["capacity", "--target", "virtual:llama-70b-bf16-tp4-a100", "--by", "speed"]
    argv += ["--replay", str(tmp_path / "capture.jsonl"), "--slo", "ttft=100ms@p90"]
    argv += ["--start", "4", "--budget", "3s", "--warmup", "0s", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0
    (t,) = json.loads((out / "capacity.json").read_text())["targets"].values()
    assert t["capacity"] is not None  # 4x meets (the knee is near 5.5x); then the budget
    for probe in t["probes"]:  # every speed tried, in sessions started a minute
        assert probe["sessions_per_min"] == pytest.approx(probe["level"] * count / span * 60)
    per_minute = t["capacity"] * count / span * 60
    assert t["sessions_per_min"] == pytest.approx(per_minute)
    said = f"{t['capacity']:g}x ({per_minute:.3g} sessions/min)"
    assert said in (out / "report.md").read_text()
