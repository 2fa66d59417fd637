"""Every Prometheus panel of the dashboards shows data, against the real thing.

Debian's Prometheus scrapes (every second, with the project's rule files and exemplar storage)
a real latency-proxy in front of a real loadgen.sim (preset llama-70b-awq-tp4-a100, which also
exports the DCGM GPU gauges) while a short mixed load runs through the proxy: streaming and
plain chat, completions, and requests to a route whose upstream refuses connections (the
errors panels). Then each panel query is run as Grafana would run it over that time range; a
query that returns no series, or only NaN, fails the test.
"""

from __future__ import annotations

import asyncio
import math
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
import yaml

from loadgen.stack.processes import free_port, running
from tests.support.dashboards import (
    ROOT,
    dashboards,
    datasources,
    defaults,
    expand,
    queries,
    variable_queries,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

PROMETHEUS = shutil.which("prometheus")
MODEL = "llama-70b"
LOAD_SECONDS = 12.0
RATE_INTERVAL = "5s"  # Grafana: max(step + scrape, 4 x scrape) = 4 s at a 1 s scrape; a bit more


def prometheus_config(proxy_admin: str, sim: str) -> dict:
    """deploy/prometheus/prometheus.yml with its two application jobs pointed at loopback."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(p) for p in (ROOT / "deploy/prometheus/rules").glob("*.yml")]
    targets = {"latency-proxy": proxy_admin, "vllm": sim}
    config["scrape_configs"] = [
        {**job, "static_configs": [{"targets": [targets[job["job_name"]]]}]}
        for job in config["scrape_configs"]
        if job["job_name"] in targets
    ]
    assert len(config["scrape_configs"]) == 2
    return config


async def load(proxy: str, seconds: float) -> Counter[tuple[str, int]]:
    """Mixed traffic through the proxy until `seconds` pass: responses per (kind, status)."""
    seen: Counter[tuple[str, int]] = Counter()
    deadline = time.monotonic() + seconds
    messages = [{"role": "user", "content": "Say something about latency."}]
    chat = {"model": MODEL, "messages": messages, "max_tokens": 24}

    async def send(client: httpx.AsyncClient, kind: str, path: str, body: dict) -> None:
        async with client.stream("POST", path, json=body) as r:
            await r.aread()
        seen[kind, r.status_code] += 1

    async def streams(client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            await send(client, "stream", "/v1/chat/completions", {**chat, "stream": True})

    async def others(client: httpx.AsyncClient) -> None:
        completion = {"model": MODEL, "prompt": "Latency is", "max_tokens": 16, "stream": True}
        while time.monotonic() < deadline:
            await send(client, "plain", "/v1/chat/completions", chat)
            await send(client, "completions", "/v1/completions", completion)
            await send(client, "broken", "/v1/chat/completions", {**chat, "model": "broken"})
            await asyncio.sleep(0.2)

    async with httpx.AsyncClient(base_url=proxy, timeout=30.0) as client:
        await asyncio.gather(*(streams(client) for _ in range(6)), others(client))
    return seen


class Scraped(NamedTuple):
    api: httpx.Client  # Prometheus' HTTP API
    start: float
    end: float
    proxy_log: Path


@pytest.fixture(scope="module")
def scraped(tmp_path_factory, start_module_proxy) -> Iterator[Scraped]:
    """A Prometheus that has scraped a proxy and a simulator under load."""
    if PROMETHEUS is None:
        pytest.skip("Debian's prometheus binary is not installed (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("live")
    sim, prom, refused = free_port(), free_port(), free_port()
    with running(
        [sys.executable, "-m", "loadgen.sim", "--preset", "llama-70b-awq-tp4-a100",
         "--host", "127.0.0.1", "--port", str(sim),
         # the reasoning, prefix-cache and stall panels need those signals in the traffic
         "--reasoning-parser", "deepseek_r1", "--reasoning-tokens", "8",
         "--enable-prompt-tokens-details", "--fault", "stall=0.2@4:500ms"],
        f"http://127.0.0.1:{sim}/health", tmp / "sim.log", cwd=ROOT, timeout_s=30,
    ):  # fmt: skip
        proxy = start_module_proxy(
            "--upstream", f"{MODEL}=http://127.0.0.1:{sim}",
            "--upstream", f"broken=http://127.0.0.1:{refused}",
            "--continuous-usage", "--stall-threshold", "300ms",
        )  # fmt: skip
        config = tmp / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(prometheus_config(f"127.0.0.1:{proxy.admin_port}", f"127.0.0.1:{sim}"))
        )
        with running(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom}", "--enable-feature=exemplar-storage"],
            f"http://127.0.0.1:{prom}/-/ready", tmp / "prometheus.log", cwd=ROOT, timeout_s=30,
        ):  # fmt: skip
            start = time.time()
            seen = asyncio.run(load(proxy.url, LOAD_SECONDS))
            expected = {"stream": 200, "plain": 200, "completions": 200, "broken": 502}
            for kind, status in expected.items():
                sent = sum(n for (k, _), n in seen.items() if k == kind)
                assert sent and seen[kind, status] == sent, seen
            time.sleep(3.0)  # the last scrape and rule evaluation after the load
            with httpx.Client(base_url=f"http://127.0.0.1:{prom}/api/v1", timeout=10.0) as api:
                yield Scraped(api, start, time.time(), proxy.log_path)
            proxy.stop()


def data(api: httpx.Client, expr: str, start: float, end: float, instant: bool) -> list[dict]:
    if instant:
        r = api.get("/query", params={"query": expr, "time": end})
    else:
        r = api.get("/query_range", params={"query": expr, "start": start, "end": end, "step": 1})
    r.raise_for_status()
    return r.json()["data"]["result"]


def finite(series: list[dict]) -> bool:
    values = [s["value"] for s in series if "value" in s]
    values += [v for s in series for v in s.get("values", [])]
    return any(math.isfinite(float(v)) for _, v in values)


BOARDS = dashboards()
PROM_QUERIES = [
    q for n, b in BOARDS.items() for q in queries(n, b) if q.datasource_type == "prometheus"
]


def test_targets_are_scraped_and_rules_evaluate(scraped):
    api = scraped.api
    health = {
        t["labels"]["job"]: t["health"] for t in api.get("/targets").json()["data"]["activeTargets"]
    }
    assert health == {"latency-proxy": "up", "vllm": "up"}
    rules = [r for g in api.get("/rules").json()["data"]["groups"] for r in g["rules"]]
    assert len(rules) >= 10
    assert {r["health"] for r in rules} == {"ok"}, [r for r in rules if r["health"] != "ok"]


@pytest.mark.parametrize("query", PROM_QUERIES, ids=str)
def test_panel_query_returns_data(scraped, query):
    api, start, end, _ = scraped
    expr = expand(query.text, defaults(BOARDS[query.dashboard]), RATE_INTERVAL)
    series = data(api, expr, start, end, query.instant)
    assert series, f"no data: {expr}"
    assert finite(series), f"only NaN: {expr}"


@pytest.mark.parametrize("query", [q for q in PROM_QUERIES if q.exemplar], ids=str)
def test_latency_panels_have_trace_exemplars(scraped, query):
    api, start, end, _ = scraped
    expr = expand(query.text, defaults(BOARDS[query.dashboard]), RATE_INTERVAL)
    r = api.get("/query_exemplars", params={"query": expr, "start": start, "end": end})
    exemplars = [e for s in r.json()["data"] for e in s["exemplars"]]
    assert exemplars, f"no exemplars: {expr}"
    assert all(len(e["labels"]["trace_id"]) == 32 for e in exemplars)


def test_variables_list_the_model_and_route(scraped):
    api, start, end, _ = scraped
    for name, board in BOARDS.items():
        values = defaults(board)
        for variable, selector, label in variable_queries(name, board):
            r = api.get(f"/label/{label}/values",
                        params={"match[]": expand(selector, values, RATE_INTERVAL),
                                "start": start, "end": end})  # fmt: skip
            assert MODEL in r.json()["data"], f"{name}: variable {variable}"


def test_log_lines_of_the_real_proxy_link_to_traces(scraped):
    """The Loki derived field finds the trace id in the proxy's own per-request log lines."""
    (loki,) = [d for d in datasources() if d["type"] == "loki"]
    (field,) = loki["jsonData"]["derivedFields"]
    lines = [ln for ln in scraped.proxy_log.read_text().splitlines() if '"request_id":"' in ln]
    requests = [ln for ln in lines if '"path":"/v1/' in ln]
    assert requests
    for line in requests:
        match = re.search(field["matcherRegex"], line)
        assert match and re.fullmatch(r"[0-9a-f]{32}", match.group(1)), line


SPLITS = [q for q in PROM_QUERIES if q.panel.endswith("proxy, rest")]


@pytest.mark.parametrize("query", SPLITS, ids=str)
def test_where_the_time_goes_parts_are_not_negative(scraped, query):
    """Each part of the TTFT/E2E split is a duration: the derived rest (the proxy's mean minus
    vLLM's and the proxy's own parts) may not come out below zero beyond noise, which it
    would if the parts were of different requests or double-counted."""
    api, start, end, _ = scraped
    expr = expand(query.text, defaults(BOARDS[query.dashboard]), RATE_INTERVAL)
    values = [float(v) for s in data(api, expr, start, end, False) for _, v in s["values"]]
    finite_values = [v for v in values if math.isfinite(v)]
    assert finite_values, f"no data: {expr}"
    assert min(finite_values) >= -0.005, f"{query}: {min(finite_values):.4f} s"
