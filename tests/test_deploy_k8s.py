"""deploy/k8s: rendered with kustomize, valid for the Kubernetes and prometheus-operator schemas.

`kubectl kustomize` renders each kustomization; kubernetes-validate checks every built-in
object strictly (unknown fields rejected) against the OpenAPI schemas of the oldest and the
newest Kubernetes it knows; the PodMonitor goes through prometheus-operator's generated model.
Then the promises: the proxy is a sidecar of vLLM, the Service reaches only the proxy, the pod
outlives the proxy's drain, and the loadgen Job's shards add up.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

import node_checks
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = {"llama-70b-awq": ("llama-70b", "awq"), "qwen-72b-gptq": ("qwen-72b", "gptq")}
KUSTOMIZATIONS = [f"overlays/{name}" for name in OVERLAYS] + ["collector", "loadgen"]
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
PROXY_DRAIN_S = 30  # the proxy's default --drain-timeout, also set in base/deployment.yaml


@cache
def render(kustomization: str) -> tuple[dict, ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (for `kubectl kustomize`) is not installed")
    done = subprocess.run(
        [kubectl, "kustomize", str(K8S / kustomization)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return tuple(yaml.safe_load_all(done.stdout))


def one(kustomization: str, kind: str) -> dict:
    (obj,) = [o for o in render(kustomization) if o["kind"] == kind]
    return obj


def containers(pod_spec: dict) -> dict[str, dict]:
    return {c["name"]: c for c in pod_spec["containers"]}


def env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_builtin_objects_are_valid_for_kubernetes(kustomization):
    kv = pytest.importorskip("kubernetes_validate")
    objects = [o for o in render(kustomization) if "coreos.com" not in o["apiVersion"]]
    assert objects
    for obj in objects:
        for version in KUBERNETES_VERSIONS:
            kv.validate(obj, version, strict=True)


def test_kubernetes_validation_can_fail():
    kv = pytest.importorskip("kubernetes_validate")
    service = {**one("overlays/llama-70b-awq", "Service")}
    service["spec"] = {**service["spec"], "bogus": True}
    with pytest.raises(kv.ValidationError):
        kv.validate(service, KUBERNETES_VERSIONS[-1], strict=True)


def test_podmonitors_are_valid_for_prometheus_operator():
    monitors = [one(f"overlays/{name}", "PodMonitor") for name in OVERLAYS]
    broken = {**monitors[0], "spec": {"podMetricsEndpoints": [{"port": 9464}]}}
    found = node_checks.check(crds=[*monitors, broken])["crds"]
    assert found[:-1] == [None] * len(monitors)
    assert found[-1], "the PodMonitor model must reject a monitor without a selector"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_runs_its_model_with_the_proxy_as_sidecar(overlay):
    model, quantization = OVERLAYS[overlay]
    config = one(f"overlays/{overlay}", "ConfigMap")["data"]
    assert config["SERVED_MODEL_NAME"] == model and config["QUANTIZATION"] == quantization
    pod = one(f"overlays/{overlay}", "Deployment")["spec"]["template"]["spec"]
    vllm, proxy = containers(pod)["vllm"], containers(pod)["proxy"]
    assert vllm["image"].startswith("vllm/vllm-openai:")
    assert "--quantization=$(QUANTIZATION)" in vllm["args"]
    assert "--tensor-parallel-size=4" in vllm["args"]
    assert vllm["resources"]["requests"]["nvidia.com/gpu"] == 4
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert proxy["args"] == ["--upstream=$(SERVED_MODEL_NAME)=http://127.0.0.1:8000"]
    assert proxy["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert proxy["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert set(proxy["resources"]["requests"]) == {"cpu", "memory"}
    # Both containers read the overlay's ConfigMap under its generated (hashed) name.
    name = one(f"overlays/{overlay}", "ConfigMap")["metadata"]["name"]
    for c in (vllm, proxy):
        assert c["envFrom"] == [{"configMapRef": {"name": name}}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pod_outlives_the_proxys_drain(overlay):
    pod = one(f"overlays/{overlay}", "Deployment")["spec"]["template"]["spec"]
    vllm, proxy = containers(pod)["vllm"], containers(pod)["proxy"]
    assert env(proxy)["LATENCY_PROXY_DRAIN_TIMEOUT"] == f"{PROXY_DRAIN_S}s"
    sleep = vllm["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep[0] == "sleep" and int(sleep[1]) > PROXY_DRAIN_S  # vLLM serves the drain
    assert pod["terminationGracePeriodSeconds"] > int(sleep[1])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_and_podmonitor_select_only_their_own_pods(overlay):
    objects = {o["kind"]: o for o in render(f"overlays/{overlay}")}
    pod_labels = objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
    service, monitor = objects["Service"], objects["PodMonitor"]
    for selector in (service["spec"]["selector"], monitor["spec"]["selector"]["matchLabels"]):
        assert selector["app.kubernetes.io/instance"] == overlay
        assert selector.items() <= pod_labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"http", "metrics"}
    ports = {p["port"] for p in monitor["spec"]["podMetricsEndpoints"]}
    assert ports == {"metrics", "vllm-http"}


def test_collector_runs_the_shared_config():
    config = one("collector", "ConfigMap")
    shared = (ROOT / "deploy" / "otel-collector" / "config.yaml").read_text()
    assert config["data"]["config.yaml"] == shared
    pod = one("collector", "Deployment")["spec"]["template"]["spec"]
    assert pod["volumes"][0]["configMap"]["name"] == config["metadata"]["name"]
    assert {p["port"] for p in one("collector", "Service")["spec"]["ports"]} == {4317, 4318}


def test_loadgen_job_shards_add_up_and_share_a_volume():
    job = next(o for o in render("loadgen") if o["metadata"]["name"] == "loadgen")
    merge = next(o for o in render("loadgen") if o["metadata"]["name"] == "loadgen-merge")
    config = one("loadgen", "ConfigMap")["data"]
    service = one("overlays/llama-70b-awq", "Service")["metadata"]["name"]
    assert config["TARGET"] == f"http://{service}:8080"
    spec = job["spec"]
    shards = int(config["SHARDS"])
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == shards
    (container,) = spec["template"]["spec"]["containers"]
    args = container["args"]
    assert f"--shard=$(SHARD_INDEX)/{shards}" in args
    assert "--out=/results/$(RUN_ID)/shard-$(SHARD_INDEX)" in args
    assert "--sync-dir=/results/$(RUN_ID)/sync" in args  # on the shared volume, fresh per run
    index = container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index == "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    script = merge["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert 'python -m loadgen merge "$run"/shard-* --out "$run/merged"' in script
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for o in (job, merge)
        for v in o["spec"]["template"]["spec"]["volumes"]
    }
    assert claims == {one("loadgen", "PersistentVolumeClaim")["metadata"]["name"]}
