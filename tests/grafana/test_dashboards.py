"""The provisioned dashboards: valid for Grafana's schema, every query parses, every name exists.

PromQL is parsed by Prometheus' own parser (promtool), LogQL and TraceQL by Grafana's lezer
grammars; the dashboard JSON goes through grafana-foundation-sdk's Dashboard model, which is
generated from Grafana's dashboard schema.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from latency_proxy.telemetry import instruments
from tests.support import node_checks
from tests.support.dashboards import (
    ROOT,
    dashboards,
    datasources,
    defaults,
    expand,
    panels,
    queries,
    variable_queries,
    variables_used,
)

RULES = sorted((ROOT / "deploy" / "prometheus" / "rules").glob("*.yml"))
BOARDS = dashboards()
ALL_QUERIES = [q for name, board in BOARDS.items() for q in queries(name, board)]


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return path


def _promql_errors(exprs: dict[str, str], tmp_path: Path) -> str:
    """Parse each expression with Prometheus' parser: as recording rules, via promtool."""
    rules = {"groups": [{"name": "parse", "rules": [
        {"record": f"q{i}", "expr": e} for i, e in enumerate(exprs.values())
    ]}]}  # fmt: skip
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(
        [_promtool(), "check", "rules", str(path)], capture_output=True, text=True
    )
    if done.returncode == 0:
        return ""
    names = dict(enumerate(exprs))
    return re.sub(r'"q(\d+)"', lambda m: repr(names[int(m.group(1))]), done.stdout + done.stderr)


def test_there_is_a_dashboard_with_every_kind_of_query():
    assert "latency-proxy.json" in BOARDS
    kinds = {q.datasource_type for q in ALL_QUERIES}
    assert kinds == {"prometheus", "loki", "tempo"}


@pytest.mark.parametrize("name", BOARDS)
def test_dashboard_survives_grafanas_schema_model(name):
    """Every key is a field of Grafana's dashboard schema (the SDK model drops unknown ones)."""
    dashboard_model = pytest.importorskip("grafana_foundation_sdk.models.dashboard")
    original = BOARDS[name]
    model = dashboard_model.Dashboard.from_json(original)
    again = json.loads(json.dumps(model.to_json(), default=lambda o: o.to_json()))

    def dropped(a, b, path=""):
        if isinstance(a, dict):
            for key, value in a.items():
                if key not in b:
                    yield f"{path}/{key}"
                else:
                    yield from dropped(value, b[key], f"{path}/{key}")
        elif isinstance(a, list):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                yield from dropped(x, y, f"{path}[{i}]")

    assert list(dropped(original, again)) == []
    assert again["uid"] == original["uid"] and again["panels"][1]["targets"]


@pytest.mark.parametrize("name", BOARDS)
def test_panels_have_unique_ids_and_do_not_overlap(name):
    cells: dict[tuple[int, int], str] = {}
    ids = []
    for panel in BOARDS[name]["panels"]:
        ids.append(panel["id"])
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
    assert len(ids) == len(set(ids))


def test_datasource_uids_exist_in_provisioning():
    provisioned = {d["uid"]: d["type"] for d in datasources()}
    for query in ALL_QUERIES:
        assert provisioned.get(query.datasource_uid) == query.datasource_type, str(query)
    for board in BOARDS.values():
        for panel in panels(board):
            assert provisioned.get(panel["datasource"]["uid"]) == panel["datasource"]["type"]
        for variable in board["templating"]["list"]:
            if "datasource" in variable:
                assert variable["datasource"]["uid"] in provisioned


def test_every_variable_used_is_defined():
    for name, board in BOARDS.items():
        defined = set(defaults(board))
        for query in queries(name, board):
            assert variables_used(query.text) - {"__rate_interval"} <= defined, str(query)


def test_slo_lines_default_to_800ms_and_50ms():
    values = defaults(BOARDS["latency-proxy.json"])
    assert (values["ttft_slo_ms"], values["tpot_slo_ms"]) == ("800", "50")
    slo = {q.panel: q.text for q in ALL_QUERIES if "_slo_ms" in q.text}
    assert slo == {
        "TTFT P50 / P99": "vector($ttft_slo_ms / 1000)",
        "TPOT P50 / P99": "vector($tpot_slo_ms / 1000)",
    }


def test_ttft_tpot_gpu_memory_and_power_share_one_screen():
    board = BOARDS["latency-proxy.json"]
    top = [p for p in board["panels"] if p["type"] != "row" and p["gridPos"]["y"] < 10]
    text = " ".join(q["expr"] for p in top for q in p["targets"])
    for needle in (
        "gen_ai_server_time_to_first_token_seconds_bucket",
        "latency_proxy_event_loop_lag_seconds_bucket",  # whether TTFT holds the proxy's queueing
        "gen_ai_server_time_per_output_token_seconds_bucket",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_POWER_USAGE",
    ):
        assert needle in text


def test_latency_panels_link_exemplars_to_traces():
    latency = [q for q in ALL_QUERIES if "histogram_quantile(0.99, sum by (le, gen_ai_" in q.text]
    with_exemplars = {q.panel for q in latency if q.exemplar}
    assert {"TTFT P50 / P99", "TPOT P50 / P99", "E2E request duration P50 / P99"} <= with_exemplars
    prometheus = next(d for d in datasources() if d["type"] == "prometheus")
    link = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    assert link == [{"name": "trace_id", "datasourceUid": "tempo"}]


def test_proxy_metric_and_label_names_are_the_proxys():
    metrics = {spec.prometheus_name for spec in instruments.ALL}
    labels = {label for spec in instruments.ALL for label in spec.label_names}
    used = {m for q in ALL_QUERIES for m in re.findall(r"\b(?:gen_ai|latency_proxy)_\w+", q.text)}
    assert len(used) > 10
    for name in used:
        base = re.sub(r"_(bucket|sum|count|total)$", "", name)
        assert base in metrics or name in labels, f"{name}: not in telemetry.instruments"


def test_recorded_series_used_are_recorded():
    recorded = {
        r["record"]
        for path in RULES
        for g in yaml.safe_load(path.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    used = {m for q in ALL_QUERIES for m in re.findall(r"\b[a-z_]+:\w+:\w+", q.text)}
    assert used and used <= recorded


def test_every_promql_expression_parses(tmp_path):
    exprs = {}
    for name, board in BOARDS.items():
        values = defaults(board)
        for q in ALL_QUERIES:
            if q.dashboard == name and q.datasource_type == "prometheus":
                exprs[str(q)] = expand(q.text, values, "1m")
        for variable, selector, _label in variable_queries(name, board):
            exprs[f"{name} / variable {variable}"] = expand(selector, values, "1m")
    assert len(exprs) > 20
    assert _promql_errors(exprs, tmp_path) == ""


def test_promql_check_can_fail(tmp_path):
    found = _promql_errors({"broken": "sum by (le (rate(x[1m]))"}, tmp_path)
    assert "'broken': could not parse expression" in found


def test_logql_and_traceql_parse_with_grafanas_grammars():
    def expanded(kind: str) -> dict[str, str]:
        return {
            str(q): expand(q.text, defaults(BOARDS[q.dashboard]), "1m")
            for q in ALL_QUERIES
            if q.datasource_type == kind
        }

    tempo = next(d for d in datasources() if d["type"] == "tempo")
    to_logs = tempo["jsonData"]["tracesToLogsV2"]["query"].replace("$${__trace.traceId}", "abc")
    logql = {**expanded("loki"), "Tempo tracesToLogsV2": to_logs}
    traceql = expanded("tempo")
    assert len(logql) >= 2 and traceql
    broken = {"logql": '{service_name="latency-proxy"} |= ', "traceql": "{ span.a = }"}
    found = node_checks.check(
        logql=[*logql.values(), broken["logql"]], traceql=[*traceql.values(), broken["traceql"]]
    )
    assert found["logql"].pop() and found["traceql"].pop(), "broken queries must not parse"
    errors = {
        where: offsets
        for queries_, kind in ((logql, "logql"), (traceql, "traceql"))
        for where, offsets in zip(queries_, found[kind], strict=True)
        if offsets
    }
    assert errors == {}, f"syntax errors at these offsets: {errors}"
