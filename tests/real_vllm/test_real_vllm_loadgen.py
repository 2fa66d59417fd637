"""loadgen against real vLLM, directly and through the proxy, in one interleaved run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.real_vllm.conftest import MODEL, VLLMServer
from tests.support import ROOT
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.proxy import ProxyProcess

# the first test also waits for the session fixtures: the tiny model and vLLM's start
pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(600)]

INPUT_TOKENS = 100
OUTPUT_TOKENS = 16
REQUESTS = 8
CONTRACT_METRICS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")


class Run:
    """One finished `python -m loadgen` run: its records and summary."""

    def __init__(self, out: Path, targets: dict[str, str]) -> None:
        self.targets = targets  # role (direct | proxy) -> name in results
        self.records = [orjson.loads(line) for line in (out / "requests.jsonl").open("rb")]
        self.summary = orjson.loads((out / "summary.json").read_bytes())

    def measured(self, role: str) -> list[dict[str, Any]]:
        name = self.targets[role]
        return [r for r in self.records if r["target"] == name and r["excluded"] is None]


@pytest.fixture(scope="module")
def loadgen_runs(
    vllm: VLLMServer, vllm_proxy: ProxyProcess, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Run]:
    """One run per endpoint, vLLM direct and the proxy as two targets (A, B, A, B)."""
    runs = {}
    for endpoint in ("chat", "completions"):
        out = tmp_path_factory.mktemp(f"loadgen-{endpoint}")
        command = [
            *(sys.executable, "-m", "loadgen"),
            *("--target", vllm.url, "--target", vllm_proxy.url, "--model", MODEL),
            *("--endpoint", endpoint, "--concurrency", "2", "--requests", str(REQUESTS)),
            *("--input-tokens", str(INPUT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS)),
            *("--warmup", "1s", "--timeout", "120s", "--out", str(out), "--no-progress"),
            *("--server-metrics", vllm.url + "/metrics"),
            *("--server-metrics", vllm_proxy.admin + "/metrics"),
        ]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        names = {"direct": vllm.url.removeprefix("http://")}
        names["proxy"] = vllm_proxy.url.removeprefix("http://")
        runs[endpoint] = Run(out, names)
    return runs


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("role", ["direct", "proxy"])
def test_every_request_ok_with_tokens_from_usage(
    loadgen_runs: dict[str, Run], vllm_proxy: ProxyProcess, endpoint: str, role: str
) -> None:
    records = loadgen_runs[endpoint].measured(role)
    assert len(records) >= REQUESTS
    for record in records:
        assert record["ok"] and record["status"] == 200, record
        assert record["token_source"] == "usage_total"
        assert record["output_tokens"] == OUTPUT_TOKENS
        assert record["finish_reason"] == "length"
    if role == "proxy":  # a loadgen record joins the proxy's log line by request id
        for record in records:
            (line,) = vllm_proxy.request_logs(record["request_id"])
            assert line["output_tokens"] == record["output_tokens"]
            assert line["input_tokens"] == record["input_tokens"]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_summary_is_complete(loadgen_runs: dict[str, Run], endpoint: str) -> None:
    run = loadgen_runs[endpoint]
    for role, name in run.targets.items():
        target = run.summary["targets"][name]
        for metric in CONTRACT_METRICS:
            stats = target["metrics"][metric]
            assert {"p50", "p90", "p99", "p999", "mean", "count", "ci95"} <= stats.keys()
            assert {"p50", "p99"} <= stats["ci95"].keys()
            assert stats["p50"] is not None and stats["count"] > 0
        # a random-weight model can stream only partial UTF-8 (every text empty): such a
        # request has tokens but no content event, hence no TTFT (docs/reference/timing.md)
        with_ttft = [r for r in run.measured(role) if r["ttft_s"] is not None]
        assert target["metrics"]["ttft_s"]["count"] == len(with_ttft) > 0
        assert target["requests"]["ok"] == len(run.measured(role))
        assert target["requests"]["failed"] == 0
        assert target["throughput"]["requests_per_s"] > 0
        assert target["throughput"]["output_tokens_per_s"] > 0
        assert {"requests_per_s", "fraction"} <= target["goodput"].keys()
        assert isinstance(target["valid"], bool) and "invalid_reasons" in target


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_tokenize_calibration_hits_input_tokens_exactly(
    loadgen_runs: dict[str, Run], endpoint: str
) -> None:
    run = loadgen_runs[endpoint]
    lengths = {r["input_tokens"] for role in run.targets for r in run.measured(role)}
    assert lengths == {INPUT_TOKENS}


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_server_metrics_split_the_time_on_real_vllm(
    loadgen_runs: dict[str, Run], endpoint: str
) -> None:
    """vLLM 0.32's own histograms, sampled around each block, give the queue/prefill/decode
    split for both targets; the proxy's overhead only where requests went through it."""
    run = loadgen_runs[endpoint]
    for role, name in run.targets.items():
        server = run.summary["targets"][name]["server"]
        assert server is not None and server["notes"] == [], server
        for key in ("queue_s", "prefill_s", "decode_s", "inference_s", "e2e_s"):
            figure = server[key]
            assert figure is not None, (role, key)
            assert figure["count"] > 0 and figure["mean"] >= 0
            assert figure["source"].startswith("http://")
        proxied = server["proxy_overhead_s"]
        assert (proxied is not None) == (role == "proxy"), (role, proxied)


def test_loadgens_trace_ids_are_on_vllms_spans(
    loadgen_runs: dict[str, Run], otlp: OTLPReceiver
) -> None:
    """Every record's trace id (the traceparent loadgen sent) is the trace of a vLLM
    llm_request span, directly and through the proxy."""
    run = loadgen_runs["chat"]
    records = [r for role in run.targets for r in run.measured(role)]
    wanted = {r["trace_id"] for r in records}
    assert len(wanted) == len(records) and None not in wanted

    def all_seen(spans: list) -> bool:
        return wanted <= {s.trace_id for s in spans if s.name == "llm_request"}

    otlp.wait_for_spans(all_seen, timeout=30)
