"""charts/hetero-exporter (issue 36): `helm lint --strict` passes; `helm template` with the default
values renders deploy/base's objects and with ci/all-vendors-values.yaml deploy/overlays/all-vendors'
(one DaemonSet per enabled agent), equal after the normalisations below; every object validates
against the Kubernetes schemas (the prometheus-operator's by structure, as tests/test_deploy.py
checks them); values.schema.json refuses bad values with a message naming the key; the values
reach the objects; `helm package` builds the archive; the `helm test` Pod's check answers against
a running agent; the Helm commands the docs show render. Needs helm (scripts/install-helm.sh):
skipped without it, failed when HETERO_REQUIRE_TOOLS=1; the kustomize side needs kubectl."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from agent_proc import Agent
from conftest import REQUIRE_TOOLS, ROOT
from hetero_exporter import config as config_mod
from hetero_exporter import vendors
from promql_names import load
from test_deploy import (ENDPOINT_FIELDS, RELABEL_FIELDS, assert_agent_daemonset, by_kind, container, one,
                         render, validation_errors, volume)
from test_deploy_components import overlay

pytestmark = pytest.mark.integration

rules = load("alerts/rules.py")
CHART = ROOT / "charts" / "hetero-exporter"
ALL_VENDORS = CHART / "ci" / "all-vendors-values.yaml"
NAMESPACE = "hetero-exporter"  # deploy/'s, so the renderings compare
MONITORING = "monitoring.coreos.com/v1"
# The normalisations, each the values' business or a kustomize artefact, and no more:
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version"}  # 1. Helm's recommended labels (objects and pod templates)
# 2. deploy/base's Namespace: the chart installs into the release namespace, made beforehand
# 3. kustomize (up to v5.5) puts a namespace on cluster-scoped kinds it does not know
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                  "NodeFeatureRule"}
# 4. the config ConfigMap: kustomize's hashed name vs the chart's fixed one with the pods' checksum
#    annotation; ConfigMap files compared as the YAML they hold (the chart writes them without comments)
HASHED = re.compile(r"^(hetero-exporter-config)-[a-z0-9]{10}$")
# 5. the Prometheus Operator objects are off by default in the chart (on request: serviceMonitor,
#    prometheusRule); they are compared where the values turn them on
EVERYTHING = ("-f", str(ALL_VENDORS), "--set", "agents.generic.enabled=true,extender.enabled=true,eviction.enabled=true,"
              "serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboards.enabled=true")


def _tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        msg = f"{name} not installed ({hint})"
        if REQUIRE_TOOLS and name == "helm":
            pytest.fail(msg + " and HETERO_REQUIRE_TOOLS=1")
        pytest.skip(msg)
    return path


def helm(*args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    res = subprocess.run([_tool("helm", "scripts/install-helm.sh installs it"), *args], capture_output=True,
                         text=True, timeout=120, cwd=cwd)
    if check:
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return res


def template(*args: str) -> list[dict]:
    """The objects `helm template` renders with ``args`` (no test hooks), a fresh copy each call."""
    return copy.deepcopy(_template(args))


@functools.lru_cache(maxsize=None)
def _template(args: tuple[str, ...]) -> list[dict]:
    out = helm("template", "hetero-exporter", str(CHART), "--namespace", NAMESPACE, "--skip-tests", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def kustomized(target: str | Path) -> list[dict]:
    _tool("kubectl", "kubectl kustomize renders deploy/")
    return render(target)


def daemonset_names(objs: list[dict]) -> set[str]:
    return {o["metadata"]["name"] for o in by_kind(objs, "DaemonSet")}


# --- the kustomize equivalence ------------------------------------------------------------------

def normalised(objs: list[dict], *, monitoring: bool = True) -> dict[tuple[str, str], dict]:
    """Objects by (kind, name), with the normalisations above applied."""
    out = {}
    for o in copy.deepcopy(objs):
        if o["kind"] == "Namespace" or (not monitoring and o["apiVersion"] == MONITORING):
            continue
        meta = o["metadata"]
        template = o.get("spec", {}).get("template", {})
        for m in (meta, template.get("metadata")):
            if not m:
                continue
            for k in HELM_LABELS:
                m.get("labels", {}).pop(k, None)
            m.get("annotations", {}).pop("checksum/config", None)
            for key in ("labels", "annotations"):
                if key in m and not m[key]:
                    del m[key]
        if o["kind"] in CLUSTER_SCOPED:
            meta.pop("namespace", None)
        if o["kind"] == "ConfigMap":
            meta["name"] = HASHED.sub(r"\1", meta["name"])
            o["data"] = {k: yaml.safe_load(v) for k, v in o["data"].items()}
        for v in template.get("spec", {}).get("volumes", []):
            if "configMap" in v:
                v["configMap"]["name"] = HASHED.sub(r"\1", v["configMap"]["name"])
        out[(o["kind"], meta["name"])] = o
    return out


def assert_same_objects(chart: list[dict], kustomize: list[dict], *, monitoring: bool = True) -> None:
    c, k = normalised(chart), normalised(kustomize, monitoring=monitoring)
    assert sorted(c) == sorted(k)
    for key in sorted(k):
        assert c[key] == k[key], key


def test_the_default_values_render_deploy_base():
    chart = template()
    assert daemonset_names(chart) == {"hetero-exporter"}  # the generic agent only
    assert not [o for o in chart if o["apiVersion"] == MONITORING]
    assert_same_objects(chart, kustomized("base"), monitoring=False)


def test_the_all_vendors_values_render_deploy_overlays_all_vendors():
    chart = template("-f", str(ALL_VENDORS), "--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true")
    assert daemonset_names(chart) == {f"hetero-exporter-{v}" for v in vendors.names()}  # one per vendor
    assert_same_objects(chart, kustomized("overlays/all-vendors"))


def test_some_vendors_beside_the_generic_agent_render_their_components(tmp_path):
    """The generic agent leaves the enabled vendors' nodes to them, as each component's
    exclude-from-generic.yaml does; eviction.enabled adds deploy/components/eviction."""
    chart = template("--set", "agents.nvidia.enabled=true,agents.ascend.enabled=true,eviction.enabled=true")
    assert daemonset_names(chart) == {"hetero-exporter", "hetero-exporter-nvidia", "hetero-exporter-ascend"}
    _tool("kubectl", "kubectl kustomize renders deploy/")
    assert_same_objects(chart, overlay(tmp_path, ["nvidia", "ascend", "eviction"]), monitoring=False)


def test_the_extender_values_render_deploy_extender():
    chart = template("--set", "agents.generic.enabled=false,extender.enabled=true,serviceMonitor.enabled=true")
    extender = kustomized("extender")
    names = {(o["kind"], o["metadata"]["name"]) for o in extender}
    assert_same_objects([o for o in chart if (o["kind"], o["metadata"]["name"]) in names], extender)
    # a single replica gets no PodDisruptionBudget: minAvailable 1 would block every drain of its node
    one_replica = template("--set", "extender.enabled=true,extender.replicas=1")
    assert one(one_replica, "Deployment")["spec"]["replicas"] == 1
    assert not by_kind(one_replica, "PodDisruptionBudget")


def test_the_normalisations_do_not_hide_a_difference():
    chart, base = template(), kustomized("base")
    ds = one(chart, "DaemonSet")
    container(ds)["args"].append("--interval=5")
    with pytest.raises(AssertionError):
        assert_same_objects(chart, base, monitoring=False)
    with pytest.raises(AssertionError):  # a monitoring object is compared where the chart renders it
        assert_same_objects(template(), base)


# --- every object, as Kubernetes and the prometheus-operator read it ----------------------------

RENDERS = {"default": (), "all-vendors": ("-f", str(ALL_VENDORS)), "everything": EVERYTHING,
           "pod-monitor": (*EVERYTHING, "--set", "serviceMonitor.kind=PodMonitor")}


@pytest.fixture(scope="module", params=sorted(RENDERS))
def rendered(request) -> list[dict]:
    return template(*RENDERS[request.param])


def test_every_object_validates_against_the_kubernetes_schemas(rendered):
    assert validation_errors(rendered) == []


def test_every_agent_daemonset_holds_the_invariants(rendered):
    agents = [o for o in rendered if "-extender" not in o["metadata"]["name"]]  # the extender has its own account
    for ds in by_kind(rendered, "DaemonSet"):
        assert_agent_daemonset(ds, agents)
        (vol,) = [v for v in ds["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
        assert vol["configMap"]["name"] in {o["metadata"]["name"] for o in by_kind(rendered, "ConfigMap")}


def test_the_prometheus_operator_objects_have_their_fields(rendered):
    agent_pods = [ds["spec"]["template"]["metadata"]["labels"] for ds in by_kind(rendered, "DaemonSet")]
    for m in [o for o in rendered if o["apiVersion"] == MONITORING]:
        assert set(m["metadata"]["labels"]) >= HELM_LABELS
        if m["kind"] == "PrometheusRule":
            assert m["spec"] == rules.rule_groups()  # the shipped alert and recording rules, whole
            assert any("record" in r for g in m["spec"]["groups"] for r in g["rules"])
            continue
        assert m["kind"] in ("ServiceMonitor", "PodMonitor"), m["kind"]
        endpoints = m["spec"]["endpoints" if m["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
        assert set(m["spec"]) <= {"jobLabel", "selector", "endpoints", "podMetricsEndpoints"}
        for ep in endpoints:
            assert set(ep) <= ENDPOINT_FIELDS | {"basicAuth"}, set(ep) - ENDPOINT_FIELDS
            assert all(set(r) <= RELABEL_FIELDS for r in ep.get("relabelings", []))
        if m["metadata"]["name"] == "hetero-exporter" and m["kind"] == "PodMonitor":
            selector = m["spec"]["selector"]["matchLabels"]
            assert agent_pods and all(selector.items() <= labels.items() for labels in agent_pods)
            assert selector[m["spec"]["jobLabel"]] == rules.JOB  # job="hetero-exporter", as the alerts select


def test_the_dashboards_are_dashboards_json_for_the_grafana_sidecar():
    objs = template("--set", "dashboards.enabled=true,dashboards.namespace=grafana")
    shipped = sorted((ROOT / "dashboards" / "json").glob("*.json"))
    maps = {o["metadata"]["name"]: o for o in by_kind(objs, "ConfigMap") if "dashboard" in o["metadata"]["name"]}
    assert sorted(maps) == [f"hetero-exporter-dashboard-{p.stem}" for p in shipped]
    for path in shipped:
        cm = maps[f"hetero-exporter-dashboard-{path.stem}"]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["namespace"] == "grafana"
        assert json.loads(cm["data"][path.name]) == json.loads(path.read_text())
    # the chart's copies are dashboards/json/, no more, no fewer (collectors/generate.py --check: no less stale)
    copies = sorted(p.name for p in (CHART / "files" / "generated" / "dashboards").glob("*"))
    assert copies == [p.name for p in shipped]


# --- values ---------------------------------------------------------------------------------------

VALUES = {
    "image": {"repository": "registry.example.com/hx", "tag": "9.9", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "agents": {"nvidia": {"enabled": True, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                                         "limits": {"memory": "512Mi"}}}},
    "resources": {"requests": {"cpu": "60m", "memory": "80Mi"}, "limits": {"memory": "300Mi"}},
    "tolerations": [{"key": "gpu", "operator": "Exists"}],
    "nodeSelector": {"pool": "gpu"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    "priorityClassName": "system-cluster-critical",
    "extraArgs": ["--no-collector.amd_smi"], "extraEnv": [{"name": "FOO", "value": "bar"}],
    "podAnnotations": {"team/owner": "platform"}, "commonLabels": {"team": "platform"},
    "web": {"configSecret": "web-config", "tlsSecret": "web-tls", "scheme": "HTTPS"},
    "config": {"interval": 5, "health": {"mode": "enforce"}},
    "networkPolicy": {"prometheusFrom": [{"namespaceSelector": {"matchLabels": {"name": "obs"}}}]},
    "serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "kps"},
                       "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "c1"}],
                       "tlsConfig": {"insecureSkipVerify": True}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
}


def test_the_values_reach_every_agent(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    objs = template("-f", str(values))
    default = {o["metadata"]["name"]: o for o in by_kind(template("--set", "agents.nvidia.enabled=true"), "DaemonSet")}
    sets = by_kind(objs, "DaemonSet")
    assert {ds["metadata"]["name"] for ds in sets} == {"hetero-exporter", "hetero-exporter-nvidia"}
    assert validation_errors(objs) == []
    for ds in sets:
        name, pod, c = ds["metadata"]["name"], ds["spec"]["template"]["spec"], container(ds)
        before = default[name]
        assert c["image"] == "registry.example.com/hx:9.9" and c["imagePullPolicy"] == "Always"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        assert c["resources"] == (VALUES["agents"]["nvidia"]["resources"] if name.endswith("nvidia") else VALUES["resources"])
        assert pod["tolerations"] == VALUES["tolerations"] and pod["nodeSelector"] == {"pool": "gpu"}
        assert pod["priorityClassName"] == "system-cluster-critical"
        # the zone expression narrows every one of the agent's own terms, which stay
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        was = before["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": t["matchExpressions"] + [{"key": "zone", "operator": "In", "values": ["a"]}]}
                         for t in was]
        assert c["args"] == container(before)["args"] + ["--no-collector.amd_smi",
                                                         "--web.config.file=/etc/hetero-exporter-web/web-config.yml"]
        assert c["env"] == container(before)["env"] + [{"name": "FOO", "value": "bar"}]
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert volume(ds, mounts["/etc/hetero-exporter-web"])["secret"] == {"secretName": "web-config"}
        assert volume(ds, mounts["/etc/hetero-exporter-tls"])["secret"] == {"secretName": "web-tls"}
        assert c["livenessProbe"]["httpGet"]["scheme"] == c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
        meta = ds["spec"]["template"]["metadata"]
        assert meta["annotations"]["team/owner"] == "platform" and meta["labels"]["team"] == "platform"
        assert ds["metadata"]["labels"]["team"] == "platform"
        assert ds["spec"]["selector"] == before["spec"]["selector"]  # never the values' (immutable)
    cm = one(objs, "ConfigMap")
    cfg = config_mod.from_dict(yaml.safe_load(cm["data"]["config.yaml"]))
    assert cfg.interval == 5 and cfg.health["mode"] == "enforce" and cfg.sysfs_root == "/host/sys"  # defaults kept
    assert one(objs, "NetworkPolicy")["spec"]["ingress"][0]["from"] == VALUES["networkPolicy"]["prometheusFrom"]
    (ep,) = one(objs, "ServiceMonitor")["spec"]["endpoints"]
    assert ep["interval"] == "15s" and ep["scheme"] == "https" and ep["tlsConfig"] == {"insecureSkipVerify": True}
    assert ep["relabelings"][-1] == VALUES["serviceMonitor"]["relabelings"][0] and len(ep["relabelings"]) > 1
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(objs, kind)["metadata"]["labels"]["release"] == "kps"


def test_the_image_tag_defaults_to_the_app_version_which_is_pyprojects():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version
    for ds in by_kind(template(*EVERYTHING), "DaemonSet") + by_kind(template(*EVERYTHING), "Deployment"):
        assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == \
            f"ghcr.io/hetero-exporter/hetero-exporter:{version}"


def test_a_config_change_rolls_the_pods_and_the_default_config_loads():
    objs = template()
    cm, ds = one(objs, "ConfigMap"), one(objs, "DaemonSet")
    text = cm["data"]["config.yaml"]
    annotation = ds["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert annotation == hashlib.sha256(text.encode()).hexdigest()
    assert yaml.safe_load(text) == yaml.safe_load((ROOT / "deploy" / "base" / "config.yaml").read_text())
    config_mod.from_dict(yaml.safe_load(text))  # the agent accepts it
    changed = one(template("--set", "config.interval=30"), "DaemonSet")
    assert changed["spec"]["template"]["metadata"]["annotations"]["checksum/config"] != annotation


def test_the_switches_turn_their_objects_off():
    kinds = lambda objs: {o["kind"] for o in objs}  # noqa: E731
    on = template("--set", "extender.enabled=true")
    assert {"NetworkPolicy", "NodeFeatureRule"} <= kinds(on)
    off = template("--set", "extender.enabled=true,networkPolicy.enabled=false,nodeFeatureRule.enabled=false")
    assert kinds(on) - kinds(off) == {"NetworkPolicy", "NodeFeatureRule"}
    assert not by_kind(template("--set", "agents.generic.enabled=false"), "DaemonSet")


BAD_VALUES = [
    ("agents.nvida.enabled=true", "at '/agents': additional properties 'nvida' not allowed"),
    ("agents.nvidia.enabled=yes", "at '/agents/nvidia/enabled': got string, want boolean"),
    ("config.intervall=5", "at '/config': additional properties 'intervall' not allowed"),
    ("config.interval=fast", "at '/config/interval': got string, want number"),
    ("config.interval=0", "at '/config/interval': minimum"),
    ("config.health.mode=enforcing", "at '/config/health/mode': value must be one of 'observe', 'dry-run', 'enforce'"),
    ("config.health.evict_pod=true", "at '/config/health': additional properties 'evict_pod' not allowed"),
    ("image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one of"),
    ("imagePolicy=Always", "additional properties 'imagePolicy' not allowed"),
    ("extender.replicas=0", "at '/extender/replicas': minimum: got 0, want 1"),
    ("serviceMonitor.kind=Probe", "at '/serviceMonitor/kind': value must be one of 'ServiceMonitor', 'PodMonitor'"),
    ("serviceMonitor.interval=30", "at '/serviceMonitor/interval': got number, want string"),
    ("web.scheme=https", "at '/web/scheme': value must be one of 'HTTP', 'HTTPS'"),
    ("extraArgs[0]=interval", "at '/extraArgs/0': 'interval' does not match pattern"),
    ("commonLabels.tier=1", "at '/commonLabels/tier': got number, want string"),
]


@pytest.mark.parametrize("setting, message", BAD_VALUES, ids=[s for s, _ in BAD_VALUES])
def test_the_schema_refuses_bad_values(setting, message):
    res = helm("template", "x", str(CHART), "--set", setting, check=False)
    assert res.returncode != 0 and "values don't meet the specifications of the schema" in res.stderr, res.stderr
    assert message in res.stderr, res.stderr


def test_evictions_configured_without_their_grant_are_refused():
    res = helm("template", "x", str(CHART), "--set", "config.health.evict_pods=true", check=False)
    assert res.returncode != 0 and "needs eviction.enabled: true" in res.stderr, res.stderr
    grant = template("--set", "config.health.evict_pods=true,eviction.enabled=true")
    (role,) = [r for r in by_kind(grant, "ClusterRole") if r["metadata"]["name"].endswith("-eviction")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]


def test_another_namespace_reaches_the_subjects_and_the_scheduler_url():
    out = helm("template", "x", str(CHART), "--namespace", "gpu-monitoring", "--skip-tests",
               "--set", "extender.enabled=true,eviction.enabled=true").stdout
    objs = [d for d in yaml.safe_load_all(out) if d]
    for o in objs:
        assert o["metadata"].get("namespace", "gpu-monitoring") == "gpu-monitoring", o["metadata"]
        for s in o.get("subjects", []):
            assert s["namespace"] == "gpu-monitoring"
    cm = [o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == "hetero-exporter-scheduler-config"][0]
    (ext,) = yaml.safe_load(cm["data"]["scheduler-config.yaml"])["extenders"]
    assert ext["urlPrefix"] == "http://hetero-exporter-extender.gpu-monitoring.svc:9401"
    # extender.schedulerConfig is merged over deploy/extender's (maps merged, lists replaced)
    merged = helm("template", "x", str(CHART), "--skip-tests", "--set", "extender.enabled=true",
                  "--set", "extender.schedulerConfig.leaderElection.leaderElect=true").stdout
    cm = [d for d in yaml.safe_load_all(merged) if d and d["metadata"]["name"] == "hetero-exporter-scheduler-config"][0]
    cfg = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    assert cfg["leaderElection"] == {"leaderElect": True} and cfg["extenders"][0]["nodeCacheCapable"] is True
    assert not [o for o in objs if o["metadata"].get("namespace") is not None and o["kind"] in CLUSTER_SCOPED]


# --- lint, package, NOTES, helm test ------------------------------------------------------------

@pytest.mark.parametrize("args", [(), ("-f", str(ALL_VENDORS)), EVERYTHING], ids=["default", "all-vendors", "everything"])
def test_helm_lint_strict_passes(args):
    res = helm("lint", "--strict", str(CHART), *args)
    assert "0 chart(s) failed" in res.stdout, res.stdout


def test_helm_package_builds_the_archive(tmp_path):
    helm("package", str(CHART), "--destination", str(tmp_path))
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    archive = tmp_path / f"hetero-exporter-{version}.tgz"
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {"hetero-exporter/values.schema.json", "hetero-exporter/files/generated/kustomize.json",
            "hetero-exporter/templates/NOTES.txt"} <= names
    # the archive renders what the folder renders
    packaged = helm("template", "hetero-exporter", str(archive), "--namespace", NAMESPACE, "--skip-tests").stdout
    assert [d for d in yaml.safe_load_all(packaged) if d] == template()


def test_the_notes_say_what_was_installed_and_how_to_check_it():
    out = helm("install", "hx", str(CHART), "--dry-run=client", "--namespace", "gpu", "-f", str(ALL_VENDORS),
               "--set", "extender.enabled=true").stdout
    notes = out[out.index("NOTES:"):]
    for name in vendors.names():
        assert f"hetero-exporter-{name}" in notes
    assert "kubectl describe node" in notes and "helm test hx -n gpu" in notes
    assert "9400/metrics" in notes and "hetero-exporter-extender" in notes
    assert "pod-security.kubernetes.io/enforce=privileged" in notes


def _hooks(*args: str) -> list[dict]:
    out = helm("template", "x", str(CHART), "--namespace", NAMESPACE, *args).stdout
    return [d for d in yaml.safe_load_all(out)
            if d and d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]


def test_helm_test_fetches_readyz_of_the_agent_on_its_node():
    hooks = _hooks("-f", str(ALL_VENDORS))
    svc, pod = one(hooks, "Service"), one(hooks, "Pod")
    assert validation_errors(hooks) == []
    agents = [ds["spec"]["template"]["metadata"]["labels"] for ds in by_kind(template("-f", str(ALL_VENDORS)), "DaemonSet")]
    # the Service answers only from the calling node, and selects every agent
    assert svc["spec"]["internalTrafficPolicy"] == "Local"
    assert all(svc["spec"]["selector"].items() <= labels.items() for labels in agents)
    spec = pod["spec"]
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname" and term["labelSelector"]["matchLabels"] == svc["spec"]["selector"]
    # on the host network: the agents' NetworkPolicy admits the node, as for the kubelet's probes
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    (c,) = spec["containers"]
    url = {e["name"]: e["value"] for e in c["env"]}["READYZ_URL"]
    assert url == f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:9400/readyz"
    assert not _hooks("--set", "tests.enabled=false")
    # the check itself, against a running agent
    agent = Agent(["--simulate"])
    try:
        res = subprocess.run(c["command"], env={**os.environ, "READYZ_URL": agent.base + "/readyz"},
                             capture_output=True, text=True, timeout=300)
    finally:
        agent.stop()
    assert res.returncode == 0 and " 200 " in res.stdout, res.stdout + res.stderr


# --- the docs' commands ---------------------------------------------------------------------------

DOC_PAGES = [ROOT / "README.md", ROOT / "docs" / "install.md"]
HELM_LINE = re.compile(r"^helm (?:install|upgrade --install) (.*)$", re.M)
KUSTOMIZE_LINE = re.compile(r"^kubectl apply -k (\S+)$", re.M)


def _shell_blocks() -> list[str]:
    return [m.group(1).replace("\\\n", " ") for p in DOC_PAGES
            for m in re.finditer(r"^```(?:sh|bash)\n(.*?)^```", p.read_text(), re.M | re.S)]


def test_the_helm_and_kustomize_commands_the_docs_show_render():
    """README.md and docs/install.md show Helm first, kustomize second; each command they show
    renders (`helm template` with the same arguments; `kubectl kustomize` of the same folder)."""
    for page in DOC_PAGES:
        text = page.read_text()
        assert 0 <= text.index("helm install ") < text.index("kubectl apply -k "), page.name
    helm_lines = [m.group(1) for b in _shell_blocks() for m in HELM_LINE.finditer(b)]
    assert len(helm_lines) >= 3, helm_lines  # README's, and docs/install.md's two
    for line in helm_lines:
        res = helm("template", *shlex.split(line), check=False, cwd=ROOT)
        assert res.returncode == 0, f"helm install {line}: {res.stderr[-1000:]}"
        assert by_kind([d for d in yaml.safe_load_all(res.stdout) if d], "DaemonSet"), line
    folders = {m.group(1) for b in _shell_blocks() for m in KUSTOMIZE_LINE.finditer(b)}
    assert folders == {"deploy/overlays/all-vendors"}, folders
    for folder in folders:
        assert by_kind(kustomized(ROOT / folder), "DaemonSet"), folder
