"""deploy/extender: the objects agree with the extender (CLI arguments, port, endpoints, probes),
the RBAC allows what the node cache does and nothing more, and the KubeSchedulerConfiguration
registers the extender the way it speaks (schema validation of the built-in objects is in
tests/test_deploy.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from conftest import ROOT, require_tool
from hetero_exporter import cli
from hetero_exporter.vendors import names as vendor_names
from hetero_exporter.scoring.resources import device_resource, parse_resource

pytestmark = pytest.mark.integration

# KubeSchedulerConfiguration v1 Extender fields (k8s.io/kube-scheduler/config/v1 types.go)
EXTENDER_FIELDS = {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
                   "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
                   "ignorable"}


@pytest.fixture(scope="module")
def objs() -> list[dict]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl not installed (kubectl kustomize renders deploy/)")
    res = subprocess.run([require_tool("kubectl"), "kustomize", str(ROOT / "deploy" / "extender")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def one(objs: list[dict], kind: str) -> dict:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind}"
    return found[0]


def test_deployment_runs_the_extender_command_on_the_service_port(objs):
    dep, svc = one(objs, "Deployment"), one(objs, "Service")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = cli.build_parser().parse_args(c["args"])
    assert args.command == "scheduler-extender"
    port = int(args.listen.rsplit(":", 1)[1])
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named["http"] == port
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True  # the extender writes no file


def test_rbac_is_list_and_watch_nodes_only(objs):
    role, binding, sa = one(objs, "ClusterRole"), one(objs, "ClusterRoleBinding"), one(objs, "ServiceAccount")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]


def test_scheduler_configuration_registers_the_extender_as_it_speaks(objs):
    cm = one(objs, "ConfigMap")
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (ext,) = config["extenders"]
    assert set(ext) <= EXTENDER_FIELDS
    svc = one(objs, "Service")
    host = f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc"
    assert ext["urlPrefix"] == f"http://{host}:{svc['spec']['ports'][0]['port']}"
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")  # server.py endpoints
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is True
    assert 1 <= ext["weight"] and "bindVerb" not in ext and "preemptVerb" not in ext
    names = [m["name"] for m in ext["managedResources"]]
    for name in names:
        spec = parse_resource(name)
        assert spec is not None and spec.unit == "devices", name
    # every vendor's whole-device resource is managed (Ascend: each family the device plugin exposes)
    assert {device_resource(v, "") for v in vendor_names() if v != "ascend"} <= set(names)
    assert {"huawei.com/Ascend910", "huawei.com/Ascend310P", "huawei.com/Ascend310"} <= set(names)
    assert all(m["ignoredByScheduler"] is False for m in ext["managedResources"])  # kube-scheduler still counts them


def _peer(namespace: str, labels: dict) -> list[dict]:
    """One peer holding both selectors (two peers would be OR)."""
    return [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
             "podSelector": {"matchLabels": labels}}]


def test_the_network_policy_admits_kube_scheduler_to_the_extender_port_and_prometheus_to_metrics(objs):
    netpol, dep = one(objs, "NetworkPolicy"), one(objs, "Deployment")
    template = dep["spec"]["template"]
    assert netpol["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert netpol["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    scheduler, prometheus = netpol["spec"]["ingress"]
    # scheduler pods in kube-system, not anything in kube-system; Prometheus as in deploy/base
    assert scheduler == {"from": _peer("kube-system", {"component": "kube-scheduler"}),
                         "ports": [{"port": ports["http"], "protocol": "TCP"}]}
    assert prometheus == {"from": _peer("monitoring", {"app.kubernetes.io/name": "prometheus"}),
                          "ports": [{"port": ports["metrics"], "protocol": "TCP"}]}


def test_servicemonitor_scrapes_the_metrics_port_of_each_replica(objs):
    dep, svc, sm = one(objs, "Deployment"), one(objs, "Service"), one(objs, "ServiceMonitor")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = cli.build_parser().parse_args(c["args"])
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert int(args.metrics_listen.rsplit(":", 1)[1]) == named["metrics"] != named["http"]
    assert {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]} == {"http": "http", "metrics": "metrics"}
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == "metrics" and ep["path"] == "/metrics"
    # its own job: the agents' alerts and dashboards select job="hetero-exporter"
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "scheduler-extender"


def test_the_replica_name_in_trace_ids_is_the_pod_name(objs):
    c = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in c["env"]


def test_two_replicas_and_a_disruption_budget_that_keeps_one_serving(objs):
    dep, pdb = one(objs, "Deployment"), one(objs, "PodDisruptionBudget")
    assert dep["spec"]["replicas"] == 2
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert pdb["spec"]["minAvailable"] == 1 < dep["spec"]["replicas"]  # a drain can still evict the other
    assert "maxUnavailable" not in pdb["spec"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["livenessProbe"]["httpGet"]["port"] == c["readinessProbe"]["httpGet"]["port"] == "http"
