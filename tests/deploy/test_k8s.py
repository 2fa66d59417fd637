"""deploy/k8s: rendered with kustomize, valid for the Kubernetes and prometheus-operator schemas.

`kubectl kustomize` renders each kustomization; kubernetes-validate checks every built-in
object strictly (unknown fields rejected) against the OpenAPI schemas of the oldest and the
newest Kubernetes it knows; the PodMonitor and the PrometheusRule go through
prometheus-operator's generated models. Then the promises: the proxy is a sidecar of vLLM, the
Service reaches only the proxy, the pod outlives the proxy's drain, the loadgen Job's shards add
up, the PrometheusRule is the rule files Compose's Prometheus loads, and the log agent ships the
proxies' lines, untouched, with the labels Compose gives them.

No OpenTelemetry Collector binary can be installed here (none in Debian, PyPI or npm), so the
log agent's config is read the way the collector would read it, as in test_deploy_telemetry.py.
"""

from __future__ import annotations

import contextvars
import copy
import importlib.util
import logging
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path, PurePosixPath

import pytest
import yaml
from opentelemetry.trace import SpanContext

from latency_proxy.telemetry import logs
from tests.support import ROOT, node_checks
from tests.support.dashboards import dashboards, datasources, queries

K8S = ROOT / "deploy" / "k8s"
OVERLAYS = {"llama-70b-awq": ("llama-70b", "awq"), "qwen-72b-gptq": ("qwen-72b", "gptq")}
KUSTOMIZATIONS = [f"overlays/{name}" for name in OVERLAYS] + [
    "collector",
    "loadgen",
    "locust",
    "logging",
]
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
PROXY_DRAIN_S = 30  # the --drain-timeout base/deployment.yaml sets


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


def test_locust_example_runs_the_locustfile_distributed():
    jobs = {o["metadata"]["name"]: o for o in render("locust") if o["kind"] == "Job"}
    master, workers = jobs["loadgen-locust-master"], jobs["loadgen-locust-workers"]
    config = one("locust", "ConfigMap")["data"]
    service = one("locust", "Service")
    llm = one("overlays/llama-70b-awq", "Service")["metadata"]["name"]
    assert config["TARGET"] == f"http://{llm}:8080"
    (m,) = master["spec"]["template"]["spec"]["containers"]
    (w,) = workers["spec"]["template"]["spec"]["containers"]
    assert m["command"] == w["command"] == ["python", "-m", "loadgen.locust"]
    assert {"--master", "--headless", "--expect-workers=$(WORKERS)", "--host=$(TARGET)"} <= set(
        m["args"]
    )
    assert "--out=/results/$(RUN_ID)" in m["args"]  # loadgen's run directory, on the volume
    assert workers["spec"]["completions"] == workers["spec"]["parallelism"] == int(
        config["WORKERS"]
    )
    assert f"--master-host={service['metadata']['name']}" in w["args"]
    # the Service reaches the master's pod, not the workers'
    selector = service["spec"]["selector"].items()
    assert selector <= master["spec"]["template"]["metadata"]["labels"].items()
    assert not selector <= workers["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for p in m["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    (volume,) = master["spec"]["template"]["spec"]["volumes"]
    claim = one("locust", "PersistentVolumeClaim")["metadata"]["name"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim


# ---- deploy/k8s/rules: the PrometheusRule, generated from deploy/prometheus/rules

RULE_FILES = ROOT / "deploy" / "prometheus" / "rules"
PROMETHEUSRULE = K8S / "rules" / "prometheusrule.yaml"


@cache
def generator():
    """deploy/k8s/rules/generate.py, imported from its path (deploy/ is not a package)."""
    spec = importlib.util.spec_from_file_location(
        "prometheusrule_generate", PROMETHEUSRULE.parent / "generate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rule_groups(folder: Path = RULE_FILES) -> list[dict]:
    return [
        g for p in sorted(folder.glob("*.yml")) for g in yaml.safe_load(p.read_text())["groups"]
    ]


def test_prometheusrule_is_the_rule_files():
    """One source of truth: the object holds exactly the groups Compose's Prometheus loads."""
    assert rule_groups() and one("rules", "PrometheusRule")["spec"]["groups"] == rule_groups()
    assert PROMETHEUSRULE.read_text() == generator().render(), (
        "deploy/k8s/rules/prometheusrule.yaml is stale: run python deploy/k8s/rules/generate.py"
    )


def test_a_changed_rule_file_makes_the_prometheusrule_stale(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    for path in RULE_FILES.glob("*.yml"):
        text = path.read_text().replace("p99_rate5m > 0.8", "p99_rate5m > 2")
        (rules / path.name).write_text(text)
    out = tmp_path / "prometheusrule.yaml"
    out.write_text(PROMETHEUSRULE.read_text())
    assert yaml.safe_load(out.read_text())["spec"]["groups"] != rule_groups(rules)
    assert generator().main(["--check", f"--rules={rules}", f"--out={out}"]) == 1
    assert generator().main([f"--rules={rules}", f"--out={out}"]) == 0
    assert generator().main(["--check", f"--rules={rules}", f"--out={out}"]) == 0
    assert yaml.safe_load(out.read_text())["spec"]["groups"] == rule_groups(rules)
    # Prometheus would refuse one rule file with a group name twice: so does the generator.
    (rules / "copy.yml").write_text((RULE_FILES / "latency-proxy.alerts.yml").read_text())
    with pytest.raises(ValueError, match="latency-proxy-slo"):
        generator().render(rules)


def test_prometheusrule_is_valid_for_prometheus_operator():
    rule = one("rules", "PrometheusRule")
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    found = node_checks.check(crds=[rule, broken])["crds"]
    assert found[0] is None
    assert found[1] and "/for must match pattern" in found[1]


def test_prometheusrule_is_selected_like_the_podmonitors():
    """A Prometheus that selects the PodMonitors by their shared labels selects the rules too."""
    monitors = [one(f"overlays/{name}", "PodMonitor")["metadata"]["labels"] for name in OVERLAYS]
    shared = dict(set.intersection(*(set(labels.items()) for labels in monitors)))
    assert shared.get("app.kubernetes.io/part-of") == "latency-proxy"
    assert shared.items() <= one("rules", "PrometheusRule")["metadata"]["labels"].items()
    # Applied once, not per model: two copies would record every series twice.
    for name in OVERLAYS:
        assert all(o["kind"] != "PrometheusRule" for o in render(f"overlays/{name}"))


# ---- deploy/k8s/logging: the proxies' JSON lines from /var/log/pods to Loki

LOG_AGENT = yaml.safe_load((K8S / "logging" / "config.yaml").read_text())
COLLECTOR = yaml.safe_load((ROOT / "deploy" / "otel-collector" / "config.yaml").read_text())
# Loki's default_resource_attributes_as_index_labels (pkg/loghttp/push/otlp_config.go, Loki 3.x):
# the resource attributes its OTLP endpoint makes stream labels; all others are structured metadata.
LOKI_INDEX_LABELS = {
    "service.name", "service.namespace", "service.instance.id", "deployment.environment",
    "deployment.environment.name", "cloud.region", "cloud.availability_zone", "k8s.cluster.name",
    "k8s.namespace.name", "k8s.pod.name", "k8s.container.name", "container.name",
    "k8s.replicaset.name", "k8s.deployment.name", "k8s.statefulset.name", "k8s.daemonset.name",
    "k8s.cronjob.name", "k8s.job.name",
}  # fmt: skip
# What filelog's `container` operator reads from /var/log/pods/<ns>_<pod>_<uid>/<container>/<n>.log.
FROM_LOG_PATH = {
    "k8s.namespace.name", "k8s.pod.name", "k8s.pod.uid", "k8s.container.name",
    "k8s.container.restart_count",
}  # fmt: skip
_ENV = re.compile(r"\$\{env:(\w+)(?::-([^}]*))?\}")


def agent() -> tuple[dict, dict]:
    pod = one("logging", "DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def with_defaults(value: str) -> str:
    return _ENV.sub(lambda m: m.group(2) or "", value)


def resource_statements() -> list[str]:
    return [
        s
        for name, p in LOG_AGENT["processors"].items()
        if name.split("/")[0] == "transform"
        for group in p["log_statements"]
        if group["context"] == "resource"
        for s in group["statements"]
    ]


def test_log_agent_runs_its_config_and_every_component_is_used():
    config = one("logging", "ConfigMap")
    assert config["data"]["config.yaml"] == (K8S / "logging" / "config.yaml").read_text()
    pod, container = agent()
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    (name,) = [n for n, v in volumes.items() if "configMap" in v]
    assert volumes[name]["configMap"]["name"] == config["metadata"]["name"]
    assert container["args"] == [f"--config={mounts[name]}/config.yaml"]
    # The same collector build as deploy/k8s/collector (and Compose).
    (collector,) = one("collector", "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == collector["image"]
    pipelines = LOG_AGENT["service"]["pipelines"]
    assert list(pipelines) == ["logs"]
    for section in ("receivers", "processors", "exporters"):
        assert {c for p in pipelines.values() for c in p[section]} == set(LOG_AGENT[section])
    assert LOG_AGENT["service"]["extensions"] == list(LOG_AGENT["extensions"])
    processors = pipelines["logs"]["processors"]
    assert processors[0] == "memory_limiter" and processors[-1] == "batch"
    health = LOG_AGENT["extensions"]["health_check"]["endpoint"].split(":")[1]
    assert {p["containerPort"] for p in container["ports"]} == {int(health)}


def test_log_agent_tails_only_the_proxy_containers_of_its_namespace():
    _, container = agent()
    env = {e["name"]: e for e in container["env"]}
    assert env["K8S_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    filelog = LOG_AGENT["receivers"]["filelog"]
    assert [o["type"] for o in filelog["operators"]] == ["container"] and filelog[
        "include_file_path"
    ]
    ns = "ml"  # the agent's namespace, as K8S_NAMESPACE gives it
    includes = [i.replace("${env:K8S_NAMESPACE}", ns) for i in filelog["include"]]

    def tailed(namespace: str, pod: str, container: str, file: str = "0.log") -> bool:
        path = PurePosixPath(f"/var/log/pods/{namespace}_{pod}_0b1c4f/{container}/{file}")
        return any(path.match(pattern) for pattern in includes)  # `*` stops at a `/`

    # Past the file name, the filter keeps only the model server pods (by their name label).
    (condition,) = LOG_AGENT["processors"]["filter/model-server-pods"]["logs"]["log_record"]
    pattern = r'resource\.attributes\["(.+)"\] != "(.+)"'
    attribute, value = re.fullmatch(pattern, condition).groups()
    extract = LOG_AGENT["processors"]["k8sattributes"]["extract"]["labels"]
    (rule,) = [r for r in extract if r["tag_name"] == attribute]
    assert rule["from"] == "pod"
    for overlay in OVERLAYS:
        template = one(f"overlays/{overlay}", "Deployment")["spec"]["template"]
        assert template["metadata"]["labels"][rule["key"]] == value
        pod = f"{overlay}-llm-5d4f8b9c7-x2k4q"
        names = set(containers(template["spec"]))
        assert "proxy" in names and tailed(ns, pod, "proxy")
        assert not any(tailed(ns, pod, other) for other in names - {"proxy"})  # vLLM's
        assert not tailed("other", pod, "proxy")
        assert not tailed(ns, pod, "proxy", "0.log.20260101-000000.gz")  # rotated


def test_log_lines_stay_unparsed_and_only_low_cardinality_attributes_become_labels():
    """Loki labels come from resource attributes: the agent may set only bounded ones."""
    operators = LOG_AGENT["receivers"]["filelog"]["operators"]
    assert [o["type"] for o in operators] == ["container"]  # no json_parser: the body as is
    k8s = LOG_AGENT["processors"]["k8sattributes"]["extract"]
    set_here = {
        re.match(r'set\(attributes\["([^"]+)"\]', s).group(1) for s in resource_statements()
    }
    resource = (
        FROM_LOG_PATH | set(k8s["metadata"]) | {r["tag_name"] for r in k8s["labels"]} | set_here
    )
    assert resource & LOKI_INDEX_LABELS == {
        "service.name", "k8s.namespace.name", "k8s.pod.name", "k8s.container.name",
        "k8s.deployment.name",
    }  # fmt: skip
    processors = yaml.safe_dump(LOG_AGENT["processors"])
    for field in ("request_id", "trace_id", "span_id", "body"):
        assert field not in processors


def test_log_lines_are_named_and_linked_as_in_compose():
    """service_name is what the dashboard and Tempo ask Loki for; the line keeps trace_id as is."""
    (statement,) = resource_statements()
    name = re.fullmatch(r'set\(attributes\["service\.name"\], "(.+)"\)', statement).group(1)
    compose = COLLECTOR["processors"]["transform/proxy-logs"]["log_statements"][0]["statements"]
    assert compose[0].startswith(f'set(attributes["service.name"], "{name}")')
    asked = [
        q.text
        for q in queries("latency-proxy.json", dashboards()["latency-proxy.json"])
        if q.datasource_type == "loki"
    ]
    sources = {d["uid"]: d for d in datasources()}
    asked.append(sources["tempo"]["jsonData"]["tracesToLogsV2"]["query"])
    assert asked and all(f'{{service_name="{name}"}}' in q for q in asked)

    def log_line() -> str:
        logs.bind_request(
            "req-1", SpanContext(0x8D50F7E1ACDB4F5C949C173EF17B3263, 0x51581BF3CB55C13, False)
        )
        record = logging.LogRecord(
            "latency_proxy", logging.INFO, __file__, 1, "request", None, None
        )
        return logs.JSONFormatter().format(record)

    (field,) = sources["loki"]["jsonData"]["derivedFields"]
    line = contextvars.copy_context().run(log_line)
    assert re.search(field["matcherRegex"], line).group(1) == "8d50f7e1acdb4f5c949c173ef17b3263"


def test_log_agent_sends_to_the_collector_which_pushes_to_loki():
    _, container = agent()
    env = {e["name"]: e.get("value") for e in container["env"]}
    endpoint = LOG_AGENT["exporters"]["otlphttp"]["endpoint"]
    assert _ENV.fullmatch(endpoint).group(1) == "LOGS_OTLP_ENDPOINT"
    service = one("collector", "Service")
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-http"]
    assert env["LOGS_OTLP_ENDPOINT"] == with_defaults(endpoint)
    assert env["LOGS_OTLP_ENDPOINT"] == f"http://{service['metadata']['name']}:{port}"
    assert COLLECTOR["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(f":{port}")
    pipeline = COLLECTOR["service"]["pipelines"]["logs"]
    assert "otlp" in pipeline["receivers"] and pipeline["exporters"] == ["otlphttp/loki"]
    assert "redaction" in pipeline["processors"]  # the same second line of defence as in Compose


def test_log_agent_pod_can_read_the_logs_keep_its_offsets_and_see_its_pods():
    pod, container = agent()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    pod_logs = mounts["/var/log/pods"]
    assert pod_logs["readOnly"]
    assert volumes[pod_logs["name"]]["hostPath"]["path"] == "/var/log/pods"
    assert all(i.startswith("/var/log/pods/") for i in LOG_AGENT["receivers"]["filelog"]["include"])
    assert LOG_AGENT["receivers"]["filelog"]["storage"] == "file_storage"
    offsets = mounts[LOG_AGENT["extensions"]["file_storage"]["directory"]]
    assert not offsets.get("readOnly") and "hostPath" in volumes[offsets["name"]]
    # Every variable the config reads without a default is set; the node filter gets the node.
    env = {e["name"]: e for e in container["env"]}
    text = (K8S / "logging" / "config.yaml").read_text()
    assert {m.group(1) for m in _ENV.finditer(text) if m.group(2) is None} <= set(env)
    node = env[LOG_AGENT["processors"]["k8sattributes"]["filter"]["node_from_env_var"]]
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # Its ServiceAccount may read pods and ReplicaSets (k8s.deployment.name), nothing more.
    account = one("logging", "ServiceAccount")["metadata"]["name"]
    binding, role = one("logging", "RoleBinding"), one("logging", "Role")
    assert pod["serviceAccountName"] == account
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    assert (binding["roleRef"]["kind"], binding["roleRef"]["name"]) == (
        "Role",
        role["metadata"]["name"],
    )
    grants = {
        (g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert grants == {("", "pods"), ("apps", "replicasets")}
    assert all(set(rule["verbs"]) == {"get", "list", "watch"} for rule in role["rules"])
    # On GPU nodes too (their NoSchedule taints), reading root's 0640 files without capabilities.
    assert {"operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    security = container["securityContext"]
    assert security["runAsUser"] == 0 and security["readOnlyRootFilesystem"]
    assert security["capabilities"]["drop"] == ["ALL"] and not security["allowPrivilegeEscalation"]
