"""grafana/provisioning: datasources linked to each other, and where deploy/compose puts them."""

from __future__ import annotations

import re

import yaml

from tests.support import ROOT
from tests.support.dashboards import datasources

PROVIDERS = ROOT / "grafana" / "provisioning" / "dashboards" / "dashboards.yaml"
COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
SOURCES = {d["type"]: d for d in datasources()}


def interpolated(value: str) -> str:
    """Grafana expands $VAR in provisioning files and reads $$ as a literal $."""
    assert "$" not in value.replace("$$", ""), f"{value}: an environment variable?"
    return value.replace("$$", "$")


def test_three_datasources_with_unique_uids():
    uids = [d["uid"] for d in datasources()]
    assert sorted(uids) == ["loki", "prometheus", "tempo"]
    assert set(SOURCES) == {"prometheus", "tempo", "loki"}
    assert SOURCES["prometheus"]["isDefault"] is True


def test_urls_are_the_compose_services():
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    urls = {d["uid"]: d["url"] for d in datasources()}
    assert urls == {
        "prometheus": "http://prometheus:9090",
        "tempo": "http://tempo:3200",
        "loki": "http://loki:3100",
    }
    assert set(urls) <= set(compose)


def test_exemplars_link_to_tempo_by_trace_id():
    (link,) = SOURCES["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert link == {"name": "trace_id", "datasourceUid": SOURCES["tempo"]["uid"]}


def test_traces_link_to_the_logs_of_the_same_trace():
    to_logs = SOURCES["tempo"]["jsonData"]["tracesToLogsV2"]
    assert to_logs["datasourceUid"] == SOURCES["loki"]["uid"]
    query = interpolated(to_logs["query"])
    assert query == '{service_name="latency-proxy"} |= "${__trace.traceId}"'


def test_log_lines_link_to_their_trace():
    (field,) = SOURCES["loki"]["jsonData"]["derivedFields"]
    assert field["datasourceUid"] == SOURCES["tempo"]["uid"]
    assert interpolated(field["url"]) == "${__value.raw}"
    line = (
        '{"ts":"2026-11-30T00:44:50Z","level":"info","trace_id":"8d50f7e1acdb4f5c949c173ef17b3263"}'
    )
    assert re.search(field["matcherRegex"], line).group(1) == "8d50f7e1acdb4f5c949c173ef17b3263"
    assert re.search(field["matcherRegex"], '{"trace_id":null}') is None


def test_dashboard_provider_reads_where_compose_mounts_the_dashboards():
    (provider,) = yaml.safe_load(PROVIDERS.read_text())["providers"]
    grafana = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    assert mounts["../../grafana/dashboards"] == provider["options"]["path"]
    assert mounts["../../grafana/provisioning"] == "/etc/grafana/provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == provider["options"]["path"] + "/latency-proxy.json"
    assert (ROOT / "grafana" / "dashboards" / "latency-proxy.json").is_file()
