"""An agent, seen and replayed: a scripted agent (tests/support/agent.py: tool-calling loops,
a fan-out of three parallel calls, a sub-agent) works against the simulator through the
proxy, all real processes on loopback. The proxy's capture holds the agent's own sessions
and parents and no prompt text; its replay through a second proxy to a fresh simulator
sends no call before its parent's answer ended and finds the prefix cache hitting as
often as the agent did; so does its replay on the simulator's twin (`virtual:`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadgen import rundir
from loadgen.cli import main
from loadgen.stack.processes import simulator
from tests.support import run_module
from tests.support.proxy import ProxyProcess, proxy_env

CANARY = "canary-4b7e"
SIM = (
    "--preset",
    "llama-70b-bf16-tp4-a100",
    "--served-model-name",
    "sim",
    "--enable-prompt-tokens-details",  # cached_tokens in usage: the sessions' prefix hits
)


@pytest.fixture
def stacks(tmp_path: Path) -> Iterator[list[tuple[str, ProxyProcess]]]:
    """Two simulators, each behind its own proxy: one for the agent, one for the replay."""
    with simulator(*SIM) as first, simulator(*SIM) as second:
        proxies = []
        try:
            for n, sim in enumerate((first, second)):
                args = ["--upstream", sim, "--log-format", "json"]
                env = proxy_env(None)
                proxies.append(ProxyProcess(args, env, tmp_path / f"proxy{n}.log").wait_ready())
            yield list(zip((first, second), proxies, strict=True))
        finally:
            for proxy in proxies:
                proxy.stop()


def hit_share(sim: str) -> float:
    page = httpx.get(sim + "/metrics").text
    hits, queries = (
        float(re.search(rf"^vllm:prefix_cache_{name}_total(?:{{[^}}]*}})? (\S+)$", page, re.M)[1])
        for name in ("hits", "queries")
    )
    return hits / queries


@pytest.mark.slow  # four servers and three runs: about a minute
@pytest.mark.timeout(300)
def test_an_agent_is_captured_as_it_ran_and_replayed_in_its_order(
    stacks: list[tuple[str, ProxyProcess]], tmp_path: Path
) -> None:
    (sim_a, proxy_a), (sim_b, proxy_b) = stacks
    own = tmp_path / "agent.jsonl"
    done = run_module("tests.support.agent", proxy_a.url, str(own), "--canary", CANARY, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    calls = [json.loads(line) for line in own.read_text().splitlines()]
    # loops of 3, 2 and 2 tool turns, an answer, a fan-out of 3, a follow-up and (for the
    # sessions that name themselves) a sub-agent
    assert len(calls) == 9 + 8 + 7

    lines = [json.loads(x) for x in proxy_a.output().splitlines() if '"msg":"request"' in x]
    assert CANARY not in proxy_a.output()  # hashes, never text
    assert "session-a" not in proxy_a.output()  # the caller's session names, hashed too
    seen = {line["request_id"]: line for line in lines}
    assert seen.keys() == {c["id"] for c in calls}
    # the capture's parents are the agent's own, and its sessions the agent's, one to one
    assert {c["id"]: c["parent"] for c in calls} == {k: v["parent"] for k, v in seen.items()}
    pairs = {(c["session"], seen[c["id"]]["session"]) for c in calls}
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs}) == 3
    assert {line["joined_by"] for line in lines} == {"new", "header", "trace", "parent"}
    assert sum(line["tools_answered"] for line in lines) == 3 + 2 + 2  # one per tool turn
    original = hit_share(sim_a)

    capture = tmp_path / "capture.jsonl"
    capture.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    report = run_module("loadgen", "sessions", str(capture), "--json", timeout=60)
    assert report.returncode == 0, report.stderr
    figures = json.loads(report.stdout)
    assert sorted(s["calls"] for s in figures["sessions"]) == [7, 8, 9]
    for s in figures["sessions"]:  # a tool takes 0.15 s a turn: the model has not all the time
        assert 0 < s["model_share"] < 1 and s["tools_s"] >= 0.15
        assert s["prefix_hit_share"] > 0.5
    assert figures["ttft_by_turn"]["1"]["calls"] == 5  # three sessions, two sub-agents

    out = tmp_path / "replay"
    argv = ["--target", proxy_b.url, "--replay", str(capture), "--warmup", "0s"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    run = rundir.read(out)
    assert run.meta["replay"]["calls"] == {"sessions": 3, "linked": 19, "unlinked": 0}
    by_line = {n: json.loads(x) for n, x in enumerate(capture.read_text().splitlines(), 1)}
    replayed = {by_line[r.replay_index]["request_id"]: r for r in run.records}
    assert replayed.keys() == seen.keys() and all(r.ok for r in run.records)
    for call_id, record in replayed.items():
        parent = seen[call_id]["parent"]
        if parent is not None:  # never before its parent's answer ended, then its gap
            gap = seen[call_id]["parent_gap_s"]
            assert record.sent_at >= replayed[parent].end_at + gap - 0.02
    replay_share = hit_share(sim_b)
    # sessions started 8 times as fast, no think time: still no call before its parent's end
    fast = tmp_path / "fast"
    fast_argv = [*argv, "--replay-speed", "8", "--gap-scale", "0", "--out", str(fast)]
    assert main([*fast_argv, "--no-progress"]) == 0
    quick = {by_line[r.replay_index]["request_id"]: r for r in rundir.read(fast).records}
    assert rundir.read(fast).meta["replay"]["gap_scale"] == 0
    for call_id, record in quick.items():
        parent = seen[call_id]["parent"]
        if parent is not None:
            assert record.sent_at >= quick[parent].end_at - 0.02
    assert original > 0.5  # an agent's prompts are mostly what it sent before
    assert abs(replay_share - original) <= 0.1 * original, (original, replay_share)
    assert CANARY not in proxy_b.output()
    # the same capture on the simulator's twin: the same order on the virtual clock, and
    # the prefix cache hitting as it did live
    twin = tmp_path / "twin"
    virtual = ["--target", "virtual:llama-70b-bf16-tp4-a100", *argv[2:], "--out", str(twin)]
    assert main([*virtual, "--no-progress"]) == 0
    predicted = {by_line[r.replay_index]["request_id"]: r for r in rundir.read(twin).records}
    assert predicted.keys() == seen.keys()
    for call_id, record in predicted.items():
        parent = seen[call_id]["parent"]
        if parent is not None:
            gap = seen[call_id]["parent_gap_s"]
            assert record.sent_at >= predicted[parent].end_at + gap - 1e-6
    cached = sum(r.cached_tokens or 0 for r in predicted.values())
    twin_share = cached / sum(r.input_tokens or 0 for r in predicted.values())
    assert abs(twin_share - original) <= 0.1 * original, (original, twin_share)
