"""deploy/prometheus: config and rules checked by promtool, rules unit-tested by promtool.

The unit tests also run against the rules as Kubernetes gets them: the groups of the
PrometheusRule in deploy/k8s/rules (generated from these rule files).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT
from tests.support.dashboards import dashboards, defaults

PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = sorted((PROMETHEUS / "rules").glob("*.yml"))
UNIT_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))
PROMETHEUSRULE = ROOT / "deploy" / "k8s" / "rules" / "prometheusrule.yaml"


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return subprocess.run([binary, *args], capture_output=True, text=True, cwd=cwd)


def test_config_is_valid_with_its_rule_files(tmp_path):
    """promtool checks the config and, through rule_files, the rules it would load."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]  # the compose mount
    config["rule_files"] = [str(path) for path in RULES]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    done = promtool("check", "config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(f"SUCCESS: {n} rules found" in done.stdout for n in (3, 7))


def test_rules_are_valid():
    done = promtool("check", "rules", *map(str, RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_unit_tests_pass():
    assert UNIT_TESTS
    done = promtool("test", "rules", *(p.name for p in UNIT_TESTS), cwd=PROMETHEUS / "tests")
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_unit_tests_can_fail(tmp_path):
    """The same tests against a TTFT alert with another threshold must fail."""
    (tmp_path / "rules").mkdir()
    for path in RULES:
        text = path.read_text().replace("p99_rate5m > 0.8", "p99_rate5m > 2")
        (tmp_path / "rules" / path.name).write_text(text)
    (tmp_path / "tests").mkdir()
    for path in UNIT_TESTS:
        (tmp_path / "tests" / path.name).write_text(path.read_text())
    done = promtool("test", "rules", *(p.name for p in UNIT_TESTS), cwd=tmp_path / "tests")
    assert done.returncode != 0 and "LatencyProxyTTFTP99OverSLO" in done.stdout + done.stderr


def run_unit_tests_on_prometheusrule(tmp_path: Path, edit=lambda text: text):
    """The unit tests, with the PrometheusRule's groups (through `edit`) as their one rule file."""
    spec = yaml.safe_load(PROMETHEUSRULE.read_text())["spec"]
    (tmp_path / "rules").mkdir(parents=True)
    rules = tmp_path / "rules" / "prometheusrule.yml"
    rules.write_text(edit(yaml.safe_dump({"groups": spec["groups"]}, sort_keys=False)))
    (tmp_path / "tests").mkdir()
    for path in UNIT_TESTS:
        unit = yaml.safe_load(path.read_text())
        unit["rule_files"] = ["../rules/prometheusrule.yml"]
        (tmp_path / "tests" / path.name).write_text(yaml.safe_dump(unit, sort_keys=False))
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return promtool("test", "rules", *(p.name for p in UNIT_TESTS), cwd=tmp_path / "tests")


def test_rules_unit_tests_pass_on_the_kubernetes_prometheusrule(tmp_path):
    done = run_unit_tests_on_prometheusrule(tmp_path / "same")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_unit_tests_on_prometheusrule(
        tmp_path / "other", lambda text: text.replace("p99_rate5m > 0.8", "p99_rate5m > 2")
    )
    assert done.returncode != 0 and "LatencyProxyTTFTP99OverSLO" in done.stdout + done.stderr


def test_quantiles_are_recorded_for_ttft_tpot_and_e2e():
    recorded = {
        r["record"] for p in RULES for g in yaml.safe_load(p.read_text())["groups"]
        for r in g["rules"] if "record" in r
    }  # fmt: skip
    for metric in (
        "gen_ai_server_time_to_first_token_seconds",
        "gen_ai_server_time_per_output_token_seconds",
        "gen_ai_server_request_duration_seconds",
    ):
        for q in ("p50", "p99"):
            assert f"model_route:{metric}:{q}_rate5m" in recorded


def test_alert_thresholds_are_the_dashboards_slo_defaults():
    alerts = {
        r["alert"]: r["expr"] for p in RULES for g in yaml.safe_load(p.read_text())["groups"]
        for r in g["rules"] if "alert" in r
    }  # fmt: skip
    assert set(alerts) == {
        "LatencyProxyTTFTP99OverSLO",
        "LatencyProxyTPOTP99OverSLO",
        "LatencyProxyErrorRatioHigh",
    }
    threshold = {name: float(re.search(r">\s*([\d.]+)$", e).group(1)) for name, e in alerts.items()}
    slo = defaults(dashboards()["latency-proxy.json"])
    assert threshold["LatencyProxyTTFTP99OverSLO"] == int(slo["ttft_slo_ms"]) / 1000
    assert threshold["LatencyProxyTPOTP99OverSLO"] == int(slo["tpot_slo_ms"]) / 1000
