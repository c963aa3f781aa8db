"""deploy/kubernetes validated offline: Kubernetes' OpenAPI schemas (kubernetes-validate), KEDA's and the
Prometheus operator's documented fields, the GPU overlay's result, and every port, probe, flag, setting
and metric name the manifests mention checked against the code."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from tests.deploy.crd_schemas import PROMETHEUS_METADATA, SCHEMAS
from tests.deploy.kustomize import canonical, merge, render
from tests.deploy.test_rules_match_metrics import metric_names
from typer.main import get_command

from depthserve.cli import app
from depthserve.discovery.dns_source import parse_dns_url
from depthserve.discovery.urls import check_url
from depthserve.settings import GatewaySettings, WorkerSettings, load_settings
from depthserve.worker.server import OIP_SERVICE

KUBE = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
SRC = Path(__file__).resolve().parents[2] / "src" / "depthserve"
BASE, GPU = KUBE / "base", KUBE / "overlays" / "gpu"
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())  # 1.30: preStop `sleep` on by default


def objects(directory: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in render(directory)}


def pod(deployment: dict[str, Any]) -> dict[str, Any]:
    return deployment["spec"]["template"]["spec"]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod(deployment)["containers"]
    return only


def flags(args: list[str]) -> dict[str, str]:
    """`--flag value` pairs of a container's args (these flags all take a value)."""
    return {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--")}


def cli_options(*path: str) -> set[str]:
    command: Any = get_command(app)
    for name in path:
        command = command.commands[name]
    return {opt for param in command.params for opt in param.opts}


def config_file(configmap: dict[str, Any], name: str, cls: type[Any], tmp_path: Path) -> Any:
    path = tmp_path / name
    path.write_text(configmap["data"][name])
    return load_settings(cls, path)  # extra=forbid: a renamed setting fails here


@pytest.mark.parametrize("directory", [BASE, GPU], ids=["base", "gpu"])
def test_every_object_validates_against_its_schema(directory: Path) -> None:
    docs = render(directory)
    for doc in docs:
        schema = SCHEMAS.get(doc["kind"])
        if schema is not None:
            jsonschema.validate(doc, schema)
            continue
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    for trigger in objects(directory)[("ScaledObject", "depthserve-worker")]["spec"]["triggers"]:
        assert trigger["type"] == "prometheus"
        jsonschema.validate(trigger["metadata"], PROMETHEUS_METADATA)
    hpa = yaml.safe_load((KUBE / "alternatives" / "hpa.yaml").read_text())
    for version in VERSIONS:
        kubernetes_validate.validate(hpa, version, strict=True)


def test_the_validators_catch_a_wrong_field() -> None:
    deployment = objects(BASE)[("Deployment", "depthserve-worker")]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(merge(deployment, {"spec": {"replica": 2}}), VERSIONS[-1], strict=True)
    scaled = objects(BASE)[("ScaledObject", "depthserve-worker")]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(merge(scaled, {"spec": {"maxReplicas": 4}}), SCHEMAS["ScaledObject"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: the Python rendering stands alone")
@pytest.mark.parametrize("directory", [BASE, GPU], ids=["base", "gpu"])
def test_python_rendering_matches_kubectl_kustomize(directory: Path) -> None:
    built = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=True)
    assert canonical(render(directory)) == canonical([d for d in yaml.safe_load_all(built.stdout) if d])


def test_gpu_overlay_gives_each_worker_one_gpu_and_the_cuda_image(tmp_path: Path) -> None:
    base, gpu = objects(BASE), objects(GPU)
    worker = gpu[("Deployment", "depthserve-worker")]
    resources = container(worker)["resources"]
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == "1"
    images = {c["image"] for d in gpu.values() if d["kind"] == "Deployment" for c in pod(d)["containers"]}
    assert images == {"depthserve:0.1.0-cuda"}
    (init,) = pod(worker)["initContainers"]
    assert set(flags(init["args"])) <= cli_options("weights", "download")
    assert {m["name"] for m in container(worker)["volumeMounts"]} == {"config", "tmp", "models"}  # merged, not replaced
    settings = config_file(gpu[("ConfigMap", "depthserve-config")], "worker.yaml", WorkerSettings, tmp_path)
    assert (settings.model, settings.device) == ("vitl14", "cuda")
    gateway = merge(base[("Deployment", "depthserve-gateway")], {})
    container(gateway)["image"] = "depthserve:0.1.0-cuda"
    assert gpu[("Deployment", "depthserve-gateway")] == gateway  # the gateways change only their image


@pytest.mark.parametrize("directory", [BASE, GPU], ids=["base", "gpu"])
def test_ports_probes_flags_and_settings_match_the_code(directory: Path, tmp_path: Path) -> None:
    found = objects(directory)
    gateway, worker = found[("Deployment", "depthserve-gateway")], found[("Deployment", "depthserve-worker")]
    configmap = found[("ConfigMap", "depthserve-config")]
    for deployment, command in ((gateway, "gateway"), (worker, "worker")):
        args = container(deployment)["args"]
        assert args[0] == command and set(flags(args)) <= cli_options(command), args
        mounted = {m["mountPath"] for m in container(deployment)["volumeMounts"]}
        assert str(Path(flags(args)["--config"]).parent) in mounted
    gateway_flags, worker_flags = flags(container(gateway)["args"]), flags(container(worker)["args"])
    gateway_settings = config_file(configmap, "gateway.yaml", GatewaySettings, tmp_path)
    worker_settings = config_file(configmap, "worker.yaml", WorkerSettings, tmp_path)

    ports = {p["name"]: p["containerPort"] for p in container(gateway)["ports"]}
    assert ports == {"http": int(gateway_flags["--port"]), "grpc": int(gateway_flags["--grpc-port"])}
    worker_ports = {p["name"]: p["containerPort"] for p in container(worker)["ports"]}
    assert worker_ports == {"grpc": int(worker_flags["--port"]), "metrics": int(worker_flags["--metrics-port"])}

    routes = (SRC / "gateway" / "app.py").read_text()
    for probe in ("readinessProbe", "livenessProbe"):
        path = container(gateway)[probe]["httpGet"]["path"]
        assert f'Route("{path}"' in routes and container(gateway)[probe]["httpGet"]["port"] in ports
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        grpc = container(worker)[probe]["grpc"]
        assert grpc["port"] == worker_ports["grpc"] and grpc.get("service", "") in ("", OIP_SERVICE)
    assert container(worker)["readinessProbe"]["grpc"]["service"] == OIP_SERVICE  # NOT_SERVING until warm
    drain = worker_settings.drain_notice_s + worker_settings.drain_seconds
    pre_stop = container(worker)["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod(worker)["terminationGracePeriodSeconds"] >= pre_stop + drain + 5
    liveness = container(worker)["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] > pod(worker)["terminationGracePeriodSeconds"]

    # Services name container ports and select the pods; the gateways find workers by the headless SRV name.
    for service_name, deployment in (("depthserve-gateway", gateway), ("depthserve-worker", worker)):
        service = found[("Service", service_name)]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        named = {p["name"] for p in container(deployment)["ports"]}
        assert all(p["targetPort"] in named and p.get("appProtocol") for p in service["spec"]["ports"])
    headless = found[("Service", "depthserve-worker")]
    assert headless["spec"]["clusterIP"] == "None"
    (url,) = gateway_settings.discovery
    target = parse_dns_url(check_url(url))
    grpc_port = next(p for p in headless["spec"]["ports"] if p["name"] == "grpc")
    namespace = headless["metadata"]["namespace"]
    assert (
        target.srv
        and target.name == f"_grpc._{grpc_port['protocol'].lower()}.depthserve-worker.{namespace}.svc.cluster.local"
    )
    assert grpc_port["port"] == worker_ports["grpc"]

    # Only gateway pods reach the workers' gRPC port.
    policy = found[("NetworkPolicy", "depthserve-worker")]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    grpc_rules = [r for r in policy["ingress"] if any(p["port"] == worker_ports["grpc"] for p in r["ports"])]
    (rule,) = grpc_rules
    (source,) = rule["from"]
    assert source["podSelector"]["matchLabels"] == gateway["spec"]["template"]["metadata"]["labels"]

    # Scrapes and the autoscaler read what the code exports, from the ports that serve it.
    for monitor, service_name in (
        ("depthserve-gateway", "depthserve-gateway"),
        ("depthserve-worker", "depthserve-worker"),
    ):
        spec = found[("ServiceMonitor", monitor)]["spec"]
        service_ports = {p["name"] for p in found[("Service", service_name)]["spec"]["ports"]}
        assert all(e["port"] in service_ports and e["path"] == "/metrics" for e in spec["endpoints"])
    scaled = found[("ScaledObject", "depthserve-worker")]["spec"]
    assert scaled["scaleTargetRef"]["name"] == worker["metadata"]["name"]
    assert scaled["maxReplicaCount"] == gateway_settings.scale_max_workers
    assert scaled["minReplicaCount"] == gateway_settings.scale_min_workers
    exported = set(re.findall(r'"(depthserve_gateway_\w+)"', (SRC / "gateway" / "metrics.py").read_text()))
    queries = [t["metadata"]["query"] for t in scaled["triggers"]]
    hpa = yaml.safe_load((KUBE / "alternatives" / "hpa.yaml").read_text())
    used = set().union(*(metric_names(q) for q in queries)) | {
        m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"]
    }
    assert used and used <= exported, used - exported
    pending = next(t for t in scaled["triggers"] if t["name"] == "pending")
    assert float(pending["metadata"]["threshold"]) == gateway_settings.scale_pending_threshold
    assert found[("PodDisruptionBudget", "depthserve-gateway")]["spec"]["minAvailable"] < gateway["spec"]["replicas"]
