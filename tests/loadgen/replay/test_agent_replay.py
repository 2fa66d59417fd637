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

from loadgen.commands.cli import main
from loadgen.runs import rundir
from loadgen.stack.processes import simulator
from tests.support import run_module
from tests.support.agent_checks import (
    CALLS_PER_SESSION,
    check_capture,
    length_errors,
    order_violations,
    replayed,
    run_agent,
    write_capture,
)
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
    calls = run_agent(proxy_a.url, tmp_path / "agent.jsonl", "--canary", CANARY)
    seen = check_capture(calls, proxy_a, CANARY)
    original = hit_share(sim_a)

    capture = write_capture(seen, tmp_path / "capture.jsonl")
    report = run_module("loadgen", "sessions", str(capture), "--json", timeout=60)
    assert report.returncode == 0, report.stderr
    figures = json.loads(report.stdout)
    assert sorted(s["calls"] for s in figures["sessions"]) == sorted(CALLS_PER_SESSION)
    for s in figures["sessions"]:  # a tool takes 0.15 s a turn: the model has not all the time
        assert 0 < s["model_share"] < 1 and s["tools_s"] >= 0.15
        assert s["prefix_hit_share"] > 0.5
    assert figures["ttft_by_turn"]["1"]["calls"] == 5  # three sessions, two sub-agents

    out = tmp_path / "replay"
    argv = ["--target", proxy_b.url, "--replay", str(capture), "--warmup", "0s"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    replay = replayed(capture, rundir.read(out))
    assert order_violations(seen, replay) == []  # never before its parent's end, then its gap
    roots, first_step, deeper = length_errors(seen, replay)
    worst = max(roots + first_step + deeper)
    assert worst <= max(first_step), (roots, first_step, deeper)  # one step's error at most
    replay_share = hit_share(sim_b)
    # sessions started 8 times as fast, no think time: still no call before its parent's end
    fast = tmp_path / "fast"
    fast_argv = [*argv, "--replay-speed", "8", "--gap-scale", "0", "--out", str(fast)]
    assert main([*fast_argv, "--no-progress"]) == 0
    assert rundir.read(fast).meta["replay"]["gap_scale"] == 0
    assert order_violations(seen, replayed(capture, rundir.read(fast)), gap_scale=0) == []
    # the figures docs/loadgen/agents.md quotes (`pytest -rP` shows them)
    print(f"hit share {original:.3f} -> {replay_share:.3f}, prompts {worst} tokens over at most")
    assert original > 0.5  # an agent's prompts are mostly what it sent before
    assert abs(replay_share - original) <= 0.1 * original, (original, replay_share)
    assert CANARY not in proxy_b.output()
    # the same capture on the simulator's twin: the same order on the virtual clock, and
    # the prefix cache hitting as it did live
    twin = tmp_path / "twin"
    virtual = ["--target", "virtual:llama-70b-bf16-tp4-a100", *argv[2:], "--out", str(twin)]
    assert main([*virtual, "--no-progress"]) == 0
    predicted = replayed(capture, rundir.read(twin))
    assert order_violations(seen, predicted, slack=1e-6) == []  # one clock: to the microsecond
    cached = sum(r.cached_tokens or 0 for r in predicted.values())
    twin_share = cached / sum(r.input_tokens or 0 for r in predicted.values())
    assert abs(twin_share - original) <= 0.1 * original, (original, twin_share)
