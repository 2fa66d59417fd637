"""What the scripted agent's capture and replay must show, whichever server answered it.

The agent (tests/support/agent.py) keeps its own record of its calls; the proxy's capture
must hold the same calls, parents and sessions, and no prompt text. A replay of the capture
must send no call before its parent's answer ended on the replay's own run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadgen.analysis.records import Record, RunData
from tests.support import run_module
from tests.support.proxy import ProxyProcess

# three sessions: loops of 3, 2 and 2 tool turns, an answer, a fan-out of 3, a follow-up and
# (for the sessions that name themselves) a sub-agent
CALLS_PER_SESSION = (9, 8, 7)
TOOL_TURNS = 3 + 2 + 2
SLACK_S = 0.02  # clock readings of two processes on one host


def run_agent(url: str, out: Path, *flags: str, timeout: float = 120) -> list[dict[str, Any]]:
    """Runs the agent against `url`; returns its own record of its calls."""
    done = run_module("tests.support.agent", url, str(out), *flags, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    calls = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(calls) == sum(CALLS_PER_SESSION)
    return calls


def captured(proxy: ProxyProcess) -> list[dict[str, Any]]:
    """The proxy's request lines: its capture."""
    return [line for line in proxy.log_lines() if line.get("msg") == "request"]


def check_capture(
    calls: list[dict[str, Any]], proxy: ProxyProcess, canary: str
) -> dict[str, dict[str, Any]]:
    """The capture holds the agent's calls, parents and sessions, no text; returns it by id."""
    output = proxy.output()
    assert canary not in output  # hashes, never text
    assert "session-a" not in output  # the caller's session names, hashed too
    lines = captured(proxy)
    seen = {line["request_id"]: line for line in lines}
    assert seen.keys() == {c["id"] for c in calls}
    # the capture's parents are the agent's own, and its sessions the agent's, one to one
    assert {c["id"]: c["parent"] for c in calls} == {k: v["parent"] for k, v in seen.items()}
    pairs = {(c["session"], seen[c["id"]]["session"]) for c in calls}
    sessions = len(CALLS_PER_SESSION)
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs}) == sessions
    assert {line["joined_by"] for line in lines} == {"new", "header", "trace", "parent"}
    assert sum(line["tools_answered"] for line in lines) == TOOL_TURNS  # one per tool turn
    return seen


def write_capture(seen: dict[str, dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in seen.values()))
    return path


def replayed(capture: Path, run: RunData) -> dict[str, Record]:
    """A replay's records by the request id of the capture's line each replayed."""
    ids = [json.loads(line)["request_id"] for line in capture.read_text().splitlines()]
    out = {ids[r.replay_index - 1]: r for r in run.records if r.replay_index is not None}
    assert len(out) == len(run.records) == len(ids) and all(r.ok for r in run.records)
    assert run.meta["replay"]["calls"] == {
        "sessions": len(CALLS_PER_SESSION),
        "linked": len(ids) - len(CALLS_PER_SESSION) - 2,  # a session's first call, sub-agents
        "unlinked": 0,
    }
    return out


def order_violations(
    seen: dict[str, dict[str, Any]],
    replay: dict[str, Record],
    gap_scale: float = 1.0,
    slack: float = SLACK_S,
) -> list[tuple[str, float]]:
    """The replayed calls sent before their parent's answer ended (plus the recorded gap,
    scaled), by more than `slack` seconds: each with how early it went."""
    early = []
    for call_id, record in replay.items():
        parent = seen[call_id]["parent"]
        if parent is None:
            continue
        due = replay[parent].end_at + seen[call_id]["parent_gap_s"] * gap_scale
        if record.sent_at < due - slack:
            early.append((call_id, due - record.sent_at))
    return early


def length_errors(
    seen: dict[str, dict[str, Any]], replay: dict[str, Record]
) -> tuple[list[int], list[int], list[int]]:
    """How many tokens the replayed prompts are longer than the captured ones (the server's
    counts): of a session's first calls (sized from their prefix blocks), of the calls that
    continue one (one step of guessing how the new messages tokenize), and of the calls
    deeper in a session, whose errors are one step's too when one step's error does not
    carry into the next."""
    roots: list[int] = []
    first: list[int] = []
    deeper: list[int] = []
    for call_id, record in replay.items():
        parent = seen[call_id]["parent"]
        error = (record.input_tokens or 0) - seen[call_id]["input_tokens"]
        if parent is None:
            roots.append(error)
        else:
            (deeper if seen[parent]["parent"] else first).append(error)
    return roots, first, deeper
