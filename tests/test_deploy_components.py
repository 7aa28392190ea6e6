"""deploy/components/<vendor>: each component, rendered in a small overlay of deploy/base, and
deploy/overlays/all-vendors, which uses them all. Every rendering validates against the Kubernetes
schemas (1.30, 1.37); every agent DaemonSet holds the invariants (tests/test_deploy.py); each
vendor's agent has the access its vendor needs and no more; and node selection, evaluated on
synthetic nodes (one per label that marks a vendor's node, every pair of vendors, CPU and BMC-only
nodes), gives each node at most one agent: its vendor's, the earlier vendor's on a node of two
(deploy/components/affinity.py, ORDER), the generic one where no included component claims it."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from hetero_exporter import vendors
from hetero_exporter.scoring.resources import device_resource
from promql_names import load
from test_deploy import (DEPLOY, KERNEL_LOG_OFF, assert_agent_daemonset, by_kind, container, daemonsets,
                         host_root_arg, render, validation_errors, volume)

pytestmark = pytest.mark.integration

affinity = load("deploy/components/affinity.py")
# components that add a capability, not a vendor's agent (issue 35: evictions are opt-in)
CAPABILITIES = {"eviction"}
COMPONENTS = sorted(p.parent.name for p in (DEPLOY / "components").glob("*/kustomization.yaml")
                    if yaml.safe_load(p.read_text())["kind"] == "Component" and p.parent.name not in CAPABILITIES)
UNPRIVILEGED = {"nvidia"}  # through the NVIDIA container runtime (components/nvidia/agent/daemonset-patch.yaml)
LINUX = {"kubernetes.io/os": "linux"}
# nodes no vendor claims: a CPU node, and servers whose BMC graphics share an accelerator vendor's
# id (ASPEED 1a03, ATI ES1000 1002:515e, Huawei iBMC 19e5:1711) or use another display class
NOT_ACCELERATOR_NODES = [{}, {"feature.node.kubernetes.io/pci-0300_1a03.present": "true"},
                         {"feature.node.kubernetes.io/pci-0300_1002.present": "true"},
                         {"feature.node.kubernetes.io/pci-0300_19e5.present": "true"},
                         {"accelerator": "nvidia-tesla-t4"}]


def overlay(tmp: Path, components: list[str]) -> list[dict]:
    """deploy/base with ``components``, rendered from a kustomization in ``tmp`` (paths relative:
    kustomize refuses absolute ones)."""
    rel = lambda p: os.path.relpath(p, tmp)  # noqa: E731
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [rel(DEPLOY / "base")], "components": [rel(DEPLOY / "components" / c) for c in components]}))
    return render(tmp)


@pytest.fixture(scope="module", params=COMPONENTS)
def component(request, tmp_path_factory) -> tuple[str, list[dict]]:
    return request.param, overlay(tmp_path_factory.mktemp(request.param), [request.param])


@pytest.fixture(scope="module")
def all_vendors() -> list[dict]:
    return render("overlays/all-vendors")


def agents(objs: list[dict]) -> dict[str, dict]:
    """Agent DaemonSets by their hetero-exporter.io/agent label (generic or the vendor)."""
    return {ds["spec"]["selector"]["matchLabels"]["hetero-exporter.io/agent"]: ds for ds in daemonsets(objs)}


# --- node selection as the scheduler evaluates it ---------------------------------------------

def expression_holds(e: dict, labels: dict[str, str]) -> bool:
    key, op, values = e["key"], e["operator"], e.get("values", [])
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not used by deploy/")


def selects(ds: dict, labels: dict[str, str]) -> bool:
    """Whether the DaemonSet runs a pod on a node with ``labels`` (nodeSelector and the required
    nodeAffinity; terms are ORed, an empty term matches nothing)."""
    pod = ds["spec"]["template"]["spec"]
    if not pod.get("nodeSelector", {}).items() <= labels.items():
        return False
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(t.get("matchExpressions") and all(expression_holds(e, labels) for e in t["matchExpressions"])
               for t in required["nodeSelectorTerms"])


def _accelerator_rule() -> list[tuple[set[str], set[str]]]:
    """(classes, vendor ids) of each matchAny entry of deploy/base/accelerator-nodes.yaml."""
    doc = yaml.safe_load((DEPLOY / "base" / "accelerator-nodes.yaml").read_text())
    assert doc["kind"] == "NodeFeatureRule" and doc["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1"
    (rule,) = doc["spec"]["rules"]
    assert rule["labels"] == {affinity.ACCELERATOR_LABEL: "true"}
    out = []
    for entry in rule["matchAny"]:
        (feature,) = entry["matchFeatures"]
        assert feature["feature"] == "pci.device"
        m = feature["matchExpressions"]
        assert m["class"]["op"] == m["vendor"]["op"] == "In"
        out.append((set(m["class"]["value"]), set(m["vendor"]["value"])))
    return out


def with_nfd(labels: dict[str, str]) -> dict[str, str]:
    """The node's labels plus what node-feature-discovery adds by the shipped NodeFeatureRule:
    its PCI labels (pci-<class>_<vendor>.present) matched against the rule's entries."""
    pci = [k.removeprefix("feature.node.kubernetes.io/pci-").removesuffix(".present").split("_")
           for k, v in labels.items() if k.startswith("feature.node.kubernetes.io/pci-") and v == "true"]
    hit = any(cls in classes and vid in vids for cls, vid in pci for classes, vids in _accelerator_rule())
    return {**labels, f"feature.node.kubernetes.io/{affinity.ACCELERATOR_LABEL}": "true"} if hit else dict(labels)


def claim_nodes(vendor: str) -> list[dict[str, str]]:
    """One node per label that makes a node this vendor's (each value of a multi-value label)."""
    return [{**LINUX, key: value} for key, values, _ in affinity.claims(vendor) for value in values]


def runs_on(objs: list[dict], labels: dict[str, str]) -> set[str]:
    return {name for name, ds in agents(objs).items() if selects(ds, labels)}


def test_the_selector_evaluator_can_fail():
    terms = [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]},
                                   {"key": "b", "operator": "NotIn", "values": ["1"]}]},
             {"matchExpressions": []}]
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    ds = {"spec": {"template": {"spec": {"affinity": {"nodeAffinity": required}}}}}
    assert selects(ds, {"a": "1"}) and selects(ds, {"a": "1", "b": "2"})
    assert not selects(ds, {"a": "1", "b": "1"}) and not selects(ds, {}) and not selects(ds, {"a": "2"})


# --- the components ------------------------------------------------------------------------

def test_every_vendor_has_a_component_in_the_precedence_order():
    assert set(COMPONENTS) == set(vendors.names()) == set(affinity.ORDER)
    assert len(affinity.ORDER) == len(set(affinity.ORDER))


def test_each_component_renders_and_validates(component):
    _, objs = component
    assert validation_errors(objs) == []


def _vendor_taints(vendor: str) -> tuple[str, ...]:
    """Taint keys a cluster puts on the vendor's nodes: its device resource names."""
    extra = ("huawei.com/Ascend910", "huawei.com/Ascend310P") if vendor == "ascend" else ()
    return (device_resource(vendor, ""), *extra)


def test_each_component_adds_its_vendors_agent_and_nothing_else(component):
    vendor, objs = component
    base = render("base")
    assert set(agents(objs)) == {"generic", vendor}
    ds = agents(objs)[vendor]
    assert ds["metadata"]["name"] == f"hetero-exporter-{vendor}"
    for agent in agents(objs).values():
        assert_agent_daemonset(agent, objs, _vendor_taints(vendor))
    def others(found: list[dict]) -> list[tuple[str, str]]:
        return sorted((o["kind"], o["metadata"]["name"]) for o in found if o["kind"] != "DaemonSet")

    assert others(objs) == others(base)  # the other objects come once, from the overlay's own base
    assert by_kind(objs, "ConfigMap")[0]["metadata"]["name"] == volume(ds, "config")["configMap"]["name"]


def test_each_vendor_agent_has_the_access_its_vendor_needs(component):
    vendor, objs = component
    ds = agents(objs)[vendor]
    pod, c = ds["spec"]["template"]["spec"], container(ds)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert pod["hostPID"] is True  # every vendor's tool reports the host pids of its processes
    if vendor in UNPRIVILEGED:
        assert not c["securityContext"].get("privileged")
        assert pod["runtimeClassName"] == "nvidia"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
        # the kernel log through syslog(2): CAP_SYSLOG without privilege (issue 24)
        assert host_root_arg(ds) is None and "--kernel-log=syslog" in c["args"]
        return
    assert c["securityContext"]["privileged"] is True
    assert host_root_arg(ds) == "/host/root" and KERNEL_LOG_OFF not in c["args"]
    dev = next(m for m in c["volumeMounts"] if m["mountPath"] == "/dev")
    assert volume(ds, dev["name"])["hostPath"]["path"] == "/dev"  # device nodes that appear later too
    assert not any(k.startswith("NVIDIA_") for k in env)
    if vendor == "mthreads":  # mthreads-gmi's libmtml is in the host's libc folder: the runtime mounts it (issue 24)
        assert pod["runtimeClassName"] == "mthreads" and env["MTHREADS_VISIBLE_DEVICES"] == "all"
    else:
        assert "runtimeClassName" not in pod
    if vendor == "amd":  # the amdsmi binding's libamd_smi.so: the host's ROCm, below the host root
        assert env["LD_LIBRARY_PATH"].split(":")[0] == f"{host_root_arg(ds)}/opt/rocm/lib"


def test_each_privileged_component_says_why_in_its_own_patch():
    def sets_privileged(path: Path) -> bool:
        return "privileged: true" in (line.strip() for line in path.read_text().splitlines())

    for vendor in COMPONENTS:
        patch = DEPLOY / "components" / vendor / "agent" / "daemonset-patch.yaml"
        assert sets_privileged(patch) is (vendor not in UNPRIVILEGED), vendor
        assert "device nodes:" in patch.read_text() or vendor in UNPRIVILEGED, f"{vendor}: which device nodes"
    # (the comment above each: tests/test_deploy.py::test_every_host_mount_and_privilege_says_why)
    assert not sets_privileged(DEPLOY / "base" / "daemonset.yaml")
    assert not sets_privileged(DEPLOY / "components" / "_device-access" / "device-access.yaml")


def test_a_components_agent_keeps_to_its_vendors_nodes(component):
    vendor, objs = component
    for labels in claim_nodes(vendor):
        assert runs_on(objs, with_nfd(labels)) == {vendor}, labels
    for labels in NOT_ACCELERATOR_NODES:  # issue 24: no agent at all on a node with no accelerator
        assert runs_on(objs, with_nfd({**LINUX, **labels})) == set(), labels
    for other in affinity.ORDER:
        if other == vendor:
            continue
        for labels in claim_nodes(other):
            # the generic agent where NFD saw the accelerator on the bus (a node known only by a
            # vendor's own label has no NFD label: its vendor's component serves it)
            nfd = with_nfd(labels)
            assert runs_on(objs, nfd) == ({"generic"} if len(nfd) > len(labels) else set()), labels
            # a node of both: the earlier vendor's agent; that vendor's component is not in this
            # overlay, so the node runs none (all-vendors has every component)
            for own in claim_nodes(vendor):
                found = runs_on(objs, with_nfd({**labels, **own}))
                earlier = affinity.ORDER.index(other) < affinity.ORDER.index(vendor)
                assert found == (set() if earlier else {vendor}), (labels, own, found)


def test_the_components_claims_are_their_vendors_pci_ids():
    for vendor in affinity.ORDER:
        ids = {f"{i:04x}" for i in vendors.spec(vendor).pci_vendor_ids}
        seen = set()
        for key, values, _ in affinity.claims(vendor):
            if key.startswith("feature.node.kubernetes.io/pci-"):
                cls, vid = key.removeprefix("feature.node.kubernetes.io/pci-").removesuffix(".present").split("_")
                assert vid in ids and cls[:2] in ("03", "12") and values == ["true"], (vendor, key)
                seen.add(vid)
        assert seen == ids, vendor


def test_the_generated_affinities_are_current(tmp_path):
    assert affinity.stale() == [], "run python deploy/components/affinity.py"
    # and a stale file is found: a copy of one component with an edited affinity
    (tmp_path / "amd" / "agent").mkdir(parents=True)
    for p, text in affinity.files().items():
        if p.parent.name == "agent" and p.parent.parent.name == "amd":
            (tmp_path / "amd" / "agent" / p.name).write_text(text.replace("0380", "0381"))
    saved = affinity.COMPONENTS
    try:
        affinity.COMPONENTS = tmp_path
        assert tmp_path / "amd" / "agent" / "affinity.yaml" in affinity.stale()
    finally:
        affinity.COMPONENTS = saved


# --- the eviction component (issue 35, item 5) ------------------------------------------------

def test_the_eviction_component_grants_evictions_and_nothing_else(tmp_path):
    """deploy/base grants no pods/eviction (evict_pods is off by default); the component adds
    exactly that, to the agent's ServiceAccount, and the base's admission policy still sees it.
    docs/security.md says how to enable it."""
    base = render("base")
    objs = overlay(tmp_path, ["eviction"])
    assert validation_errors(objs) == []
    added = [o for o in objs if (o["kind"], o["metadata"]["name"]) not in
             {(b["kind"], b["metadata"]["name"]) for b in base}]
    assert sorted(o["kind"] for o in added) == ["ClusterRole", "ClusterRoleBinding"]
    role = next(o for o in added if o["kind"] == "ClusterRole")
    binding = next(o for o in added if o["kind"] == "ClusterRoleBinding")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]
    (sa,) = by_kind(objs, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": sa["metadata"]["namespace"]}]
    granted = {r for o in by_kind(base, "ClusterRole") for rule in o["rules"] for r in rule["resources"]}
    assert "pods/eviction" not in granted
    (vap,) = by_kind(objs, "ValidatingAdmissionPolicy")
    assert any("pods/eviction" in r["resources"] for r in vap["spec"]["matchConstraints"]["resourceRules"])
    assert "deploy/components/eviction" in (ROOT / "docs" / "security.md").read_text()


# --- every vendor at once -------------------------------------------------------------------

def test_all_vendors_has_every_vendors_agent_and_no_generic_one(all_vendors):
    assert set(agents(all_vendors)) == set(affinity.ORDER)
    for vendor, ds in agents(all_vendors).items():
        assert_agent_daemonset(ds, all_vendors, _vendor_taints(vendor))


def test_all_vendors_runs_one_agent_per_accelerator_node(all_vendors):
    for vendor in affinity.ORDER:
        for labels in claim_nodes(vendor):
            assert runs_on(all_vendors, labels) == {vendor}, labels
    for labels in NOT_ACCELERATOR_NODES:
        assert runs_on(all_vendors, {**LINUX, **labels}) == set(), labels
    # two vendors on one node: the one earlier in affinity.ORDER, never both (pairwise disjoint)
    for first, second in itertools.combinations(affinity.ORDER, 2):
        for a, b in itertools.product(claim_nodes(first), claim_nodes(second)):
            assert runs_on(all_vendors, {**a, **b}) == {first}, (a, b)


def test_all_vendors_needs_nothing_edited_but_the_registry(all_vendors):
    """The image entry is the one place to edit, and it names the image of every agent."""
    path = DEPLOY / "overlays" / "all-vendors" / "kustomization.yaml"
    kustomization = yaml.safe_load(path.read_text())
    (image,) = kustomization["images"]
    marked = [line for line in path.read_text().splitlines() if "# EDIT" in line]
    assert len(marked) == 1 and "newName:" in marked[0]
    for ds in daemonsets(all_vendors):
        assert container(ds)["image"] == f"{image['newName']}:{image['newTag']}"
    assert not [o for o in all_vendors if o["kind"] == "Deployment"]  # the extender is applied on its own


def test_the_readme_names_every_component_and_the_all_vendors_command():
    deploy_section = (ROOT / "README.md").read_text()
    assert "kubectl apply -k deploy/overlays/all-vendors" in deploy_section
    for vendor in COMPONENTS:
        assert f"`deploy/components/{vendor}`" in deploy_section, vendor
