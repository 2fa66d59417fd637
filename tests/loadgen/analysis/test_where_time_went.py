"""Where the time went, against real parts: the simulator's own histograms through a real proxy,
and a real buffering intermediary (Debian's nginx) flagged on both sides of the proxy."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.analysis import timesplit
from loadgen.commands.cli import main
from loadgen.stack.processes import simulator
from tests.support.nginx import NGINX, nginx
from tests.support.proxy import ProxyProcess

SMALL_BATCH = 4  # max_num_seqs of the test preset: 16 streams are far past it


@pytest.fixture(scope="module")
def small_batch_sim() -> Iterator[str]:
    """The LLaMA-70B preset with room for only a few sequences at a time (vLLM's flag)."""
    args = ("--preset", "llama-70b-awq-tp4-a100", "--max-num-seqs", str(SMALL_BATCH))
    with simulator(*args) as url:
        yield url


def loadgen(out: Path, *args: str) -> dict[str, Any]:
    assert main(["--out", str(out), "--no-progress", "--warmup", "0.5s", *args]) == 0
    return json.loads((out / "summary.json").read_text())


def test_past_the_batch_limit_the_queue_is_the_largest_share(
    small_batch_sim: str, start_proxy: Callable[..., ProxyProcess], tmp_path: Path
) -> None:
    proxy = start_proxy("--upstream", small_batch_sim)
    scrape = ["--server-metrics", small_batch_sim + "/metrics"]
    scrape += ["--server-metrics", proxy.admin + "/metrics"]
    common = ["--target", proxy.url, "--output-tokens", "8", "--input-tokens", "256", *scrape]
    heavy = loadgen(tmp_path / "heavy", *common, "--concurrency", "16", "--requests", "48")
    light = loadgen(tmp_path / "light", *common, "--concurrency", "1", "--requests", "6")
    (name,) = heavy["targets"]

    t = heavy["targets"][name]
    server = t["server"]
    assert server["notes"] == [] and len(server["sources"]) == 2
    ttft, _ = timesplit.splits(t)
    assert ttft.largest()[0] == "queue", ttft
    assert ttft.sentence().endswith("is vLLM's queue: the server is past its batch limit")
    # vLLM's TTFT is its queue plus its prefill (plus its own front end): means add up
    parts = server["queue_s"]["mean"] + server["prefill_s"]["mean"]
    assert parts == pytest.approx(server["ttft_s"]["mean"], rel=0.15, abs=0.01)
    # the client saw every part and a little more; never less, beyond the windows' edges
    rest = dict(ttft.parts)["rest"]
    assert -0.02 < rest < 0.25 * ttft.client_s, ttft
    assert server["proxy_overhead_s"]["mean"] < 0.01
    assert server["gauges"]["waiting"]["end"] >= 1  # requests were waiting for a slot

    quiet = light["targets"][name]["server"]
    assert quiet["queue_s"]["mean"] < 0.01  # one stream never waits
    assert quiet["queue_s"]["mean"] < 0.1 * server["queue_s"]["mean"]
    report = (tmp_path / "heavy" / "report.md").read_text()
    assert "### Where the time went" in report and "vLLM's queue" in report
    assert (tmp_path / "heavy" / "time_split.png").stat().st_size > 0


@pytest.fixture(scope="module")
def paced_sim() -> Iterator[str]:
    with simulator("--ttft", "100ms", "--itl", "10ms") as url:
        yield url


@pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx)")
def test_a_buffering_intermediary_is_flagged_on_the_side_it_is_on(
    paced_sim: str, start_proxy: Callable[..., ProxyProcess], tmp_path: Path
) -> None:
    with (
        simulator("--ttft", "100ms", "--itl", "10ms", "--stream-interval", "3") as chunked_sim,
        nginx(tmp_path / "b", paced_sim, buffering=True, close_delimited=True) as buffering,
        nginx(tmp_path / "u", paced_sim, buffering=False, close_delimited=True) as unbuffered,
        nginx(tmp_path / "c", paced_sim, buffering=True) as chunked_through,
    ):
        before = start_proxy("--upstream", buffering)  # the buffering is upstream of the proxy
        plain = start_proxy("--upstream", paced_sim)
        targets = {
            "buffering": buffering,
            "unbuffered": unbuffered,
            "chunked-through": chunked_through,
            "proxy": plain.url,
            "interval3": chunked_sim,
            "behind": before.url,
        }
        args = [a for name, url in targets.items() for a in ("--target", url)]
        summary = loadgen(
            tmp_path / "run", *args, "--concurrency", "2", "--requests", "4",
            "--output-tokens", "48", "--blocks", "1",
        )  # fmt: skip
        streams = {
            name: summary["targets"][url.removeprefix("http://")]["stream"]
            for name, url in targets.items()
        }
    for name in ("buffering", "behind"):
        assert streams[name]["buffered"] is True, streams[name]
        assert streams[name]["verdict"].startswith("streams arrive in bursts: ")
    for name in ("unbuffered", "chunked-through", "proxy", "interval3"):
        assert streams[name]["buffered"] is False, (name, streams[name])
    assert streams["interval3"]["verdict"].startswith("chunked stream: ")
    assert streams["interval3"]["tokens_per_event"] == pytest.approx(3, rel=0.1)
    # the proxy behind nginx saw the bursts itself: its log line and counter say so
    lines = streamed(before)
    assert len(lines) >= 4 and all(line["coalesced_fraction"] > 0.5 for line in lines)
    assert _counter(before.metrics(), "latency_proxy_coalesced_streams_total") >= len(lines)
    # the proxy in front of the paced simulator did not
    plain_lines = streamed(plain)
    assert len(plain_lines) >= 4 and all(line["coalesced_fraction"] < 0.5 for line in plain_lines)
    assert _counter(plain.metrics(), "latency_proxy_coalesced_streams_total") == 0


def streamed(proxy: ProxyProcess) -> list[dict[str, Any]]:
    """The proxy's log lines of whole streams (not /tokenize, /v1/models or cut cooldowns)."""
    lines = [line for line in proxy.log_lines() if line.get("msg") == "request"]
    return [line for line in lines if line.get("output_tokens") == 48]


def _counter(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )
