"""The OTel Collector, Tempo and Loki configs: parsed, and checked for the paths data must take.

None of the three runs here, so these read the configs the way the programs would: every
component a pipeline names is defined, traces reach Tempo through the redaction processors,
metrics reach Prometheus, the proxies' logs reach Loki, and ports and endpoints agree.
"""

from __future__ import annotations

import re

import yaml

from tests.support import ROOT

DEPLOY = ROOT / "deploy"
_ENV_DEFAULT = re.compile(r"\$\{env:\w+:-([^}]*)\}")


def load(path: str) -> dict:
    return yaml.safe_load((DEPLOY / path).read_text())


def with_defaults(value: str) -> str:
    """The collector's `${env:VAR:-default}` as it expands when VAR is unset (compose)."""
    return _ENV_DEFAULT.sub(lambda m: m.group(1), value)


COLLECTOR = load("otel-collector/config.yaml")
PIPELINES = COLLECTOR["service"]["pipelines"]


def test_every_component_in_a_pipeline_is_defined_and_every_one_defined_is_used():
    for section in ("receivers", "processors", "exporters"):
        used = {c for p in PIPELINES.values() for c in p.get(section, [])}
        assert used == set(COLLECTOR[section]), section
    assert COLLECTOR["service"]["extensions"] == list(COLLECTOR["extensions"])


def test_pipelines_take_each_signal_where_it_belongs():
    assert PIPELINES["traces"]["receivers"] == ["otlp"]
    assert PIPELINES["traces"]["exporters"] == ["otlp/tempo"]
    assert PIPELINES["metrics"]["receivers"] == ["otlp"]
    assert PIPELINES["metrics"]["exporters"] == ["prometheusremotewrite"]
    assert set(PIPELINES["logs"]["receivers"]) == {"otlp", "fluentforward"}
    assert PIPELINES["logs"]["exporters"] == ["otlphttp/loki"]
    for pipeline in PIPELINES.values():
        processors = pipeline["processors"]
        assert processors[0] == "memory_limiter" and processors[-1] == "batch"


def test_traces_and_logs_pass_the_second_line_of_content_defence():
    for signal in ("traces", "logs"):
        processors = PIPELINES[signal]["processors"]
        assert "attributes/drop-content" in processors and "redaction" in processors
    deleted = {a["key"] for a in COLLECTOR["processors"]["attributes/drop-content"]["actions"]}
    assert {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.prompt"} <= deleted
    assert all(
        a["action"] == "delete"
        for a in COLLECTOR["processors"]["attributes/drop-content"]["actions"]
    )


def test_redaction_masks_secrets_but_not_ids():
    """blocked_values are RE2; these patterns use only syntax Python's re reads the same way."""
    patterns = [re.compile(p) for p in COLLECTOR["processors"]["redaction"]["blocked_values"]]

    def masked(value: str) -> bool:
        return any(p.search(value) for p in patterns)

    for secret in (
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
        "key sk-proj-AbCdEfGhIjKlMnOpQrSt",
        "mail me: jane.doe@example.com",
        "card 4111 1111 1111 1111",
    ):
        assert masked(secret), secret
    for harmless in (
        "4bf92f3577b34da6a3ce929d0e0e4736",  # trace_id
        "00f067aa0ba902b7",  # span_id
        "f0b322d9-1212-4846-87e6-42c79c20a4f5",  # request id
        "chat llama-70b",
        "POST /v1/chat/completions",
    ):
        assert not masked(harmless), harmless


def test_proxy_log_lines_are_named_and_scrubbed():
    statements = [
        s
        for group in COLLECTOR["processors"]["transform/proxy-logs"]["log_statements"]
        for s in group["statements"]
    ]
    assert 'set(attributes["service.name"], "latency-proxy")' in statements[0]
    replaced = [s for s in statements if s.startswith("replace_pattern(body, ")]
    assert len(replaced) == 3
    for statement in replaced:
        pattern = re.match(r'replace_pattern\(body, "(.*)", "\*\*\*\*"\)$', statement).group(1)
        re.compile(pattern.encode().decode("unicode_escape"))


def test_exporters_reach_tempo_prometheus_and_loki_on_their_ports():
    exporters = COLLECTOR["exporters"]
    tempo, loki = load("tempo/tempo.yaml"), load("loki/loki.yaml")
    tempo_grpc = tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert with_defaults(exporters["otlp/tempo"]["endpoint"]) == "tempo:" + tempo_grpc.split(":")[1]
    loki_port = loki["server"]["http_listen_port"]
    assert with_defaults(exporters["otlphttp/loki"]["endpoint"]) == f"http://loki:{loki_port}/otlp"
    assert (
        with_defaults(exporters["prometheusremotewrite"]["endpoint"])
        == "http://prometheus:9090/api/v1/write"
    )


def test_receivers_listen_where_the_compose_file_sends():
    receivers = COLLECTOR["receivers"]
    assert receivers["otlp"]["protocols"]["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert receivers["otlp"]["protocols"]["http"]["endpoint"] == "0.0.0.0:4318"
    assert receivers["fluentforward"]["endpoint"] == "0.0.0.0:24224"
    compose = (DEPLOY / "compose" / "compose.yaml").read_text()
    assert "fluentd-address: 127.0.0.1:24224" in compose
    assert '"127.0.0.1:24224:24224"' in compose


def test_tempo_stores_traces_and_writes_span_metrics_to_prometheus():
    tempo = load("tempo/tempo.yaml")
    assert set(tempo["distributor"]["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}
    assert tempo["storage"]["trace"]["backend"] == "local"
    (remote,) = tempo["metrics_generator"]["storage"]["remote_write"]
    assert remote == {"url": "http://prometheus:9090/api/v1/write", "send_exemplars": True}
    processors = tempo["overrides"]["defaults"]["metrics_generator"]["processors"]
    assert {"service-graphs", "span-metrics"} <= set(processors)
    assert tempo["server"]["http_listen_port"] == 3200  # the Grafana datasource URL


def test_loki_accepts_otlp_logs():
    """Loki's /otlp endpoint needs the TSDB store, schema v13 and structured metadata."""
    loki = load("loki/loki.yaml")
    (schema,) = loki["schema_config"]["configs"]
    assert (schema["store"], schema["schema"]) == ("tsdb", "v13")
    assert loki["limits_config"]["allow_structured_metadata"] is True
    assert loki["auth_enabled"] is False
