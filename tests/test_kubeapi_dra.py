"""The loopback API server's issue-15 surface (tests/kubeapi.py) against the real `kubernetes`
client: discovery with and without DRA, DeviceTaintRule / ResourceSlice / Lease decoding (400)
and validation (422 naming the field), the strategies (generation, timeAdded), DeleteOptions
preconditions, paging, pod eviction with PodDisruptionBudgets, pod conditions and field selectors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from hetero_exporter.k8s.api import Api  # noqa: E402
from hetero_exporter.k8s.client import K8sError  # noqa: E402
from kubeapi import (DEVICE_TAINT_RULES, LEASES, PDBS, PODS, RESOURCE_SLICES, KubeAPIServer,  # noqa: E402
                     resource_slice)

GPU = {"name": "gpu-0", "attributes": {"uuid": {"string": "GPU-1"}, "index": {"int": 0}}}


def rule(name: str = "r1", **spec) -> dict:
    spec.setdefault("taint", {"key": "hetero-exporter.io/unhealthy", "value": "xid79", "effect": "NoSchedule"})
    spec.setdefault("deviceSelector", {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"})
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "hetero-exporter"}}, "spec": spec}


def refusal(fn, *args, **kwargs) -> tuple[int, dict]:
    with pytest.raises(ApiException) as e:
        fn(*args, **kwargs)
    return e.value.status, json.loads(e.value.body)


def refused(server: KubeAPIServer, method: str, path: str, body: dict, query=None) -> tuple[int, dict]:
    """Send ``body`` as it is (the typed client would refuse it before sending; the agent's
    plain-JSON calls would not): the status and Status body of the refusal."""
    with pytest.raises(K8sError) as e:
        Api(server.api_client()).request(method, path, body=body, query=query)
    return e.value.status, e.value.body


RULES = "/apis/resource.k8s.io/v1/devicetaintrules"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


def fields(body: dict) -> list[str]:
    return [c["field"] for c in body["details"]["causes"]]


@pytest.fixture
def resource(kube_api):
    return client.ResourceV1Api(kube_api.api_client())


@pytest.fixture
def core(kube_api):
    return client.CoreV1Api(kube_api.api_client())


# --------------------------------------------------------------------------- discovery


def test_discovery_lists_groups_resources_and_subresources(kube_api):
    api_client = kube_api.api_client()
    groups = {g.name: g for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"resource.k8s.io", "coordination.k8s.io", "policy", "events.k8s.io"} <= set(groups)
    assert groups["resource.k8s.io"].preferred_version.group_version == "resource.k8s.io/v1"
    dra = {r.name: r for r in client.ResourceV1Api(api_client).get_api_resources().resources}
    assert set(dra) == {"resourceslices", "devicetaintrules", "devicetaintrules/status"}
    assert dra["devicetaintrules"].namespaced is False and dra["devicetaintrules"].kind == "DeviceTaintRule"
    assert dra["devicetaintrules"].singular_name == "devicetaintrule" and "patch" in dra["devicetaintrules"].verbs
    core = {r.name: r for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert core["pods/eviction"].kind == "Eviction" and core["pods/eviction"].verbs == ["create"]
    assert core["pods/status"].verbs == ["get", "patch", "update"]
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]


def test_a_cluster_without_dra_serves_no_resource_group():
    with KubeAPIServer(dra=False) as server:
        api_client = server.api_client()
        assert "resource.k8s.io" not in {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
        status, body = refusal(client.ResourceV1Api(api_client).get_api_resources)
        assert (status, body["reason"]) == (404, "NotFound")
        assert refusal(client.ResourceV1Api(api_client).list_resource_slice)[0] == 404
        assert refusal(client.ResourceV1Api(api_client).create_device_taint_rule, rule())[0] == 404
        assert client.CoordinationV1Api(api_client).list_namespaced_lease("default").items == []


def test_a_cluster_serving_only_v1beta2_answers_at_that_version():
    with KubeAPIServer(dra_versions=("v1beta2",)) as server:
        api_client = server.api_client()
        assert refusal(client.ResourceV1Api(api_client).list_device_taint_rule)[0] == 404
        group = next(g for g in client.ApisApi(api_client).get_api_versions().groups if g.name == "resource.k8s.io")
        assert group.preferred_version.version == "v1beta2"
        beta = client.ResourceV1beta2Api(api_client)
        created = beta.create_device_taint_rule({**rule(), "apiVersion": "resource.k8s.io/v1beta2"})
        assert created.api_version == "resource.k8s.io/v1beta2"
        assert [r.api_version for r in beta.list_device_taint_rule().items] == ["resource.k8s.io/v1beta2"]


def test_unserved_group_version_is_404(kube_api):
    status, body = refusal(client.CoordinationV1beta1Api(kube_api.api_client()).get_api_resources)
    assert status == 404 and body["kind"] == "Status"


# --------------------------------------------------------------------------- DeviceTaintRule


BAD_RULES = {
    "spec.taint.key": {"taint": {"effect": "NoSchedule"}},
    "spec.taint.key-invalid": {"taint": {"key": "not a key", "effect": "NoSchedule"}},
    "spec.taint.value": {"taint": {"key": "a/b", "value": "v" * 64, "effect": "NoSchedule"}},
    "spec.taint.effect": {"taint": {"key": "a/b"}},
    "spec.taint.effect-unsupported": {"taint": {"key": "a/b", "effect": "PreferNoSchedule"}},
    "spec.deviceSelector.driver": {"deviceSelector": {"driver": "Not_A_Domain"}},
    "spec.deviceSelector.pool": {"deviceSelector": {"pool": "n1/UPPER"}},
    "spec.deviceSelector.device": {"deviceSelector": {"device": "gpu.0"}},
}


@pytest.mark.parametrize("case", sorted(BAD_RULES))
def test_device_taint_rule_validation_names_the_field(kube_api, case):
    status, body = refused(kube_api, "POST", RULES, rule(**BAD_RULES[case]))
    assert (status, body["reason"]) == (422, "Invalid")
    assert fields(body) == [case.split("-")[0]]
    assert body["message"].startswith('DeviceTaintRule.resource.k8s.io "r1" is invalid: ' + case.split("-")[0])
    assert kube_api.list(DEVICE_TAINT_RULES) == []


def test_device_taint_rule_name_and_labels_are_validated(resource):
    status, body = refusal(resource.create_device_taint_rule, rule("x" * 254))
    assert status == 422 and fields(body) == ["metadata.name"]
    bad_label = rule()
    bad_label["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "not valid!"}
    status, body = refusal(resource.create_device_taint_rule, bad_label)
    assert status == 422 and fields(body) == ["metadata.labels[app.kubernetes.io/managed-by]"]


@pytest.mark.parametrize("removed", ["deviceClassName", "selectors"])
def test_selector_fields_removed_before_v1_are_refused(kube_api, removed):
    body = rule(deviceSelector={"driver": "gpu.example.com", removed: "gpu.example.com"})
    status, answer = refused(kube_api, "POST", RULES, body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert f'unknown field "spec.deviceSelector.{removed}"' in answer["message"]
    assert kube_api.list(DEVICE_TAINT_RULES) == []


def test_field_validation_warn_drops_unknown_fields_with_a_warning(kube_api):
    resp = Api(kube_api.api_client()).open("POST", RULES, query={"fieldValidation": "Warn"},
                                           body=rule(deviceSelector={"driver": "gpu.example.com", "deviceClassName": "x"}))
    assert resp.status == 201 and 'unknown field \\"spec.deviceSelector.deviceClassName\\"' in resp.headers["Warning"]
    assert kube_api.get(DEVICE_TAINT_RULES, None, "r1")["spec"]["deviceSelector"] == {"driver": "gpu.example.com"}


def test_a_value_of_the_wrong_type_is_a_decoding_error(kube_api):
    status, body = refused(kube_api, "POST", RULES, rule(taint={"key": "a/b", "effect": 1}))
    assert (status, body["reason"]) == (400, "BadRequest")
    assert "spec.taint.effect of type string" in body["message"]


def test_time_added_and_generation_follow_the_strategy(kube_api, resource):
    created = kube_api.create(DEVICE_TAINT_RULES, None, rule())
    added = created["spec"]["taint"]["timeAdded"]
    assert created["metadata"]["generation"] == 1 and added.endswith("Z")
    merge = "application/merge-patch+json"
    kube_api.mutate(DEVICE_TAINT_RULES, None, "r1", lambda o: o["spec"]["taint"].update(timeAdded="2020-01-01T00:00:00Z"))
    resource.patch_device_taint_rule("r1", {"spec": {"taint": {"value": "xid48"}}}, _content_type=merge)
    after_value = kube_api.get(DEVICE_TAINT_RULES, None, "r1")
    assert after_value["spec"]["taint"]["timeAdded"] == "2020-01-01T00:00:00Z"  # same effect: same time
    assert after_value["metadata"]["generation"] == 3  # the mutate and the patch changed the spec
    resource.patch_device_taint_rule("r1", {"spec": {"taint": {"effect": "NoExecute"}}}, _content_type=merge)
    after_effect = kube_api.get(DEVICE_TAINT_RULES, None, "r1")
    assert after_effect["spec"]["taint"]["timeAdded"] != "2020-01-01T00:00:00Z"  # a new effect: a new time
    assert after_effect["metadata"]["generation"] == 4
    resource.patch_device_taint_rule("r1", {"metadata": {"labels": {"x": "y"}}}, _content_type=merge)
    resource.patch_device_taint_rule_status("r1", {"status": {"conditions": [
        {"type": "EvictionInProgress", "status": "False", "reason": "NoEffect", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, _content_type=merge)
    final = kube_api.get(DEVICE_TAINT_RULES, None, "r1")
    assert final["metadata"]["generation"] == 4 and final["status"]["conditions"][0]["type"] == "EvictionInProgress"


def test_a_stale_resource_version_in_a_merge_patch_is_409(kube_api, resource):
    old = kube_api.create(DEVICE_TAINT_RULES, None, rule())["metadata"]["resourceVersion"]
    resource.patch_device_taint_rule("r1", {"spec": {"taint": {"value": "a"}}},
                                     _content_type="application/merge-patch+json")
    status, body = refusal(resource.patch_device_taint_rule, "r1",
                           {"metadata": {"resourceVersion": old}, "spec": {"taint": {"value": "b"}}},
                           _content_type="application/merge-patch+json")
    assert (status, body["reason"]) == (409, "Conflict")


# --------------------------------------------------------------------------- DeleteOptions preconditions


def test_delete_preconditions_on_uid_and_resource_version(kube_api, resource):
    obj = kube_api.create(DEVICE_TAINT_RULES, None, rule())
    uid, rv = obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]
    for pre in (client.V1Preconditions(uid="someone-else"), client.V1Preconditions(resource_version="1")):
        status, body = refusal(resource.delete_device_taint_rule, "r1", body=client.V1DeleteOptions(preconditions=pre))
        assert (status, body["reason"]) == (409, "Conflict") and "Precondition failed" in body["message"]
    assert kube_api.list(DEVICE_TAINT_RULES) != []
    resource.delete_device_taint_rule("r1", body=client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=uid, resource_version=rv)))
    assert kube_api.list(DEVICE_TAINT_RULES) == []
    assert kube_api.requests[-1].body == {"preconditions": {"resourceVersion": rv, "uid": uid}}


# --------------------------------------------------------------------------- ResourceSlice


def bad_slice(case: str) -> dict:
    s = resource_slice("s1", "n1", [dict(GPU)])
    spec, dev = s["spec"], s["spec"]["devices"][0]
    if case == "spec.driver":
        del spec["driver"]
    elif case == "spec.pool.name":
        spec["pool"]["name"] = ""
    elif case == "spec.pool.resourceSliceCount":
        spec["pool"]["resourceSliceCount"] = 0
    elif case == "spec-none":
        del spec["nodeName"]
    elif case == "spec-two":
        spec["allNodes"] = True
    elif case == "spec.nodeName":
        spec["nodeName"] = "Node_1"
    elif case == "spec.devices[0].name":
        dev["name"] = "GPU 0"
    elif case == "spec.devices[1].name":
        spec["devices"].append(dict(GPU))
    elif case == "spec.devices[0].attributes[uuid]":
        dev["attributes"] = {"uuid": {"string": "GPU-1", "int": 1}}
    elif case == "spec.devices[0].attributes[uuid]-none":
        dev["attributes"] = {"uuid": {}}
    elif case == "spec.devices[0].attributes[uuid].string":
        dev["attributes"] = {"uuid": {"string": "x" * 65}}
    elif case == "spec.devices[0].attributes[driverVersion].version":
        dev["attributes"] = {"driverVersion": {"version": "550.54"}}
    elif case == "spec.devices[0].attributes[1bad]":
        dev["attributes"] = {"1bad": {"bool": True}}
    elif case == "spec.devices[0].nodeName":
        dev["nodeName"] = "n1"
    return s


SLICE_CASES = ["spec.driver", "spec.pool.name", "spec.pool.resourceSliceCount", "spec-none", "spec-two",
               "spec.nodeName", "spec.devices[0].name", "spec.devices[1].name", "spec.devices[0].attributes[uuid]",
               "spec.devices[0].attributes[uuid]-none", "spec.devices[0].attributes[uuid].string",
               "spec.devices[0].attributes[driverVersion].version", "spec.devices[0].attributes[1bad]",
               "spec.devices[0].nodeName"]


@pytest.mark.parametrize("case", SLICE_CASES)
def test_resource_slice_validation_names_the_field(kube_api, case):
    status, body = refused(kube_api, "POST", SLICES, bad_slice(case))
    assert (status, body["reason"]) == (422, "Invalid")
    assert fields(body) == [case.split("-")[0]]
    assert kube_api.list(RESOURCE_SLICES) == []


def test_resource_slice_types_are_decoded(kube_api):
    s = resource_slice("s1", "n1", [dict(GPU)])
    s["spec"]["pool"]["generation"] = "1"
    status, body = refused(kube_api, "POST", SLICES, s)
    assert status == 400 and "spec.pool.generation of type int64" in body["message"]
    s = resource_slice("s1", "n1", [{"name": "gpu-0", "attributes": {"index": {"int": True}}}])
    status, body = refused(kube_api, "POST", SLICES, s)
    assert status == 400 and "spec.devices[0].attributes[index].int" in body["message"]


def test_resource_slice_field_selectors_and_paging(kube_api, resource):
    for i in range(5):
        kube_api.seed_resource_slice(f"s{i}", f"n{i % 2}", [dict(GPU)], driver="gpu.example.com" if i else "b.example.com")
    assert kube_api.get(RESOURCE_SLICES, None, "s0")["metadata"]["generation"] == 1
    names = lambda items: [s.metadata.name for s in items]  # noqa: E731
    assert names(resource.list_resource_slice(field_selector="spec.nodeName=n0").items) == ["s0", "s2", "s4"]
    assert names(resource.list_resource_slice(field_selector="spec.driver=b.example.com").items) == ["s0"]
    assert names(resource.list_resource_slice(field_selector="spec.nodeName=n0,spec.driver=gpu.example.com").items) == ["s2", "s4"]
    status, body = refusal(resource.list_resource_slice, field_selector="spec.devices=x")
    assert status == 400 and '"spec.devices" is not a known field selector' in body["message"]
    first = resource.list_resource_slice(limit=2)
    assert names(first.items) == ["s0", "s1"] and first.metadata.remaining_item_count == 3
    second = resource.list_resource_slice(limit=2, _continue=first.metadata._continue)
    third = resource.list_resource_slice(limit=2, _continue=second.metadata._continue)
    assert names(second.items) == ["s2", "s3"] and names(third.items) == ["s4"] and third.metadata._continue is None
    assert second.metadata.resource_version == first.metadata.resource_version
    kube_api.compact()
    assert refusal(resource.list_resource_slice, limit=2, _continue=first.metadata._continue)[0] == 410


# --------------------------------------------------------------------------- Lease


def lease(**spec) -> dict:
    return {"metadata": {"name": "budget"}, "spec": {"holderIdentity": "agent-n1", "leaseDurationSeconds": 30,
                                                     "renewTime": "2026-12-01T10:00:00.000001Z", **spec}}


def test_lease_micro_times_are_stored_in_utc(kube_api):
    leases = client.CoordinationV1Api(kube_api.api_client())
    leases.create_namespaced_lease("kube-system", lease(acquireTime="2026-12-01T11:00:00.500000+01:00"))
    spec = kube_api.get(LEASES, "kube-system", "budget")["spec"]
    assert spec["acquireTime"] == "2026-12-01T10:00:00.500000Z" and spec["renewTime"] == "2026-12-01T10:00:00.000001Z"


@pytest.mark.parametrize("spec,code,named", [
    ({"leaseDurationSeconds": 0}, 422, "spec.leaseDurationSeconds"),
    ({"leaseTransitions": -1}, 422, "spec.leaseTransitions"),
    ({"holderIdentity": 7}, 400, "spec.holderIdentity"),
    ({"leaseDurationSeconds": "30"}, 400, "spec.leaseDurationSeconds"),
    ({"renewTime": "2026-12-01T10:00:00Z"}, 400, "spec.renewTime"),
    ({"acquireTime": "yesterday"}, 400, "spec.acquireTime"),
])
def test_lease_validation(kube_api, spec, code, named):
    status, body = refused(kube_api, "POST", LEASES_PATH, lease(**spec))
    assert status == code
    assert (fields(body) == [named]) if code == 422 else (named in body["message"])
    assert kube_api.list(LEASES) == []


def test_lease_delete_honours_preconditions(kube_api):
    leases = client.CoordinationV1Api(kube_api.api_client())
    made = leases.create_namespaced_lease("kube-system", lease())
    leases.patch_namespaced_lease("budget", "kube-system", {"spec": {"holderIdentity": "agent-n2"}})
    status, _ = refusal(leases.delete_namespaced_lease, "budget", "kube-system",
                        body={"kind": "DeleteOptions", "apiVersion": "v1",
                              "preconditions": {"resourceVersion": made.metadata.resource_version}})
    assert status == 409 and kube_api.list(LEASES) != []


# --------------------------------------------------------------------------- eviction


def eviction(name: str, ns: str = "ml") -> dict:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}


def pods(kube_api, n: int, *, app: str = "train", phases=None) -> None:
    for i in range(n):
        kube_api.seed_pod("ml", f"{app}-{i}", "n1", labels={"app": app},
                          phase=(phases or {}).get(i, "Running"))


def test_eviction_without_a_budget_deletes_the_pod(kube_api, core):
    pods(kube_api, 1)
    core.create_namespaced_pod_eviction("train-0", "ml", eviction("train-0"))
    assert kube_api.list(PODS) == []
    rec = kube_api.requests[-1]
    assert (rec.method, rec.path, rec.status) == ("POST", "/api/v1/namespaces/ml/pods/train-0/eviction", 201)


def test_eviction_blocked_by_min_available(kube_api, core):
    pods(kube_api, 2)
    kube_api.seed_pdb("ml", "train-pdb", {"matchLabels": {"app": "train"}}, min_available=2)
    status, body = refusal(core.create_namespaced_pod_eviction, "train-0", "ml", eviction("train-0"))
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [{"reason": "DisruptionBudget", "message":
                                          "The disruption budget train-pdb needs 2 healthy pods and has 2 currently"}]
    assert len(kube_api.list(PODS)) == 2 and kube_api.requests[-1].status == 429


def test_eviction_allowed_while_min_available_is_kept(kube_api, core):
    pods(kube_api, 3)
    kube_api.seed_pdb("ml", "train-pdb", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["train"]}]},
                      min_available="60%")
    core.create_namespaced_pod_eviction("train-0", "ml", eviction("train-0"))  # 60% of 3, rounded up: 2
    status, body = refusal(core.create_namespaced_pod_eviction, "train-1", "ml", eviction("train-1"))  # of 2: 2
    assert status == 429 and "needs 2 healthy pods and has 2 currently" in body["details"]["causes"][0]["message"]
    assert sorted(p["metadata"]["name"] for p in kube_api.list(PODS)) == ["train-1", "train-2"]


def test_eviction_blocked_by_max_unavailable_percent(kube_api, core):
    pods(kube_api, 4, phases={3: "Pending"})  # 3 healthy of 4: 25% (1) already unavailable
    kube_api.seed_pdb("ml", "train-pdb", {"matchLabels": {"app": "train"}}, max_unavailable="25%")
    status, body = refusal(core.create_namespaced_pod_eviction, "train-0", "ml", eviction("train-0"))
    assert status == 429 and "needs 3 healthy pods and has 3 currently" in body["details"]["causes"][0]["message"]
    core.create_namespaced_pod_eviction("train-3", "ml", eviction("train-3"))  # a Pending pod ignores budgets
    assert len(kube_api.list(PODS)) == 3


def test_eviction_spends_a_budget_the_controller_wrote(kube_api, core):
    pods(kube_api, 5)
    kube_api.seed_pdb("ml", "train-pdb", {"matchLabels": {"app": "train"}}, max_unavailable=1,
                      status={"disruptionsAllowed": 1, "desiredHealthy": 4, "currentHealthy": 5})
    core.create_namespaced_pod_eviction("train-0", "ml", eviction("train-0"))
    assert kube_api.get(PDBS, "ml", "train-pdb")["status"]["disruptionsAllowed"] == 0
    assert refusal(core.create_namespaced_pod_eviction, "train-1", "ml", eviction("train-1"))[0] == 429


def test_eviction_refusals(kube_api, core):
    pods(kube_api, 1)
    assert refusal(core.create_namespaced_pod_eviction, "absent", "ml", eviction("absent"))[0] == 404
    assert refusal(core.create_namespaced_pod_eviction, "train-0", "ml", eviction("other"))[0] == 400
    kube_api.seed_pdb("ml", "a", {"matchLabels": {"app": "train"}}, min_available=0)
    kube_api.seed_pdb("ml", "b", {}, min_available=0)  # an empty selector selects every pod
    assert refusal(core.create_namespaced_pod_eviction, "train-0", "ml", eviction("train-0"))[0] == 500
    assert [r.status for r in kube_api.requests[-3:]] == [404, 400, 500]


def test_pdb_validation(kube_api):
    policy = client.PolicyV1Api(kube_api.api_client())
    body = {"metadata": {"name": "p"}, "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {}}}
    status, answer = refusal(policy.create_namespaced_pod_disruption_budget, "ml", body)
    assert status == 422 and fields(answer) == ["spec"]
    body["spec"] = {"minAvailable": "half", "selector": {}}
    status, answer = refusal(policy.create_namespaced_pod_disruption_budget, "ml", body)
    assert status == 422 and fields(answer) == ["spec.minAvailable"]


# --------------------------------------------------------------------------- pods


def test_pod_condition_of_our_domain_merges_by_type(kube_api, core):
    kube_api.seed_pod("ml", "p", "n1")
    kube_api.mutate(PODS, "ml", "p", lambda p: p["status"].update(conditions=[
        {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]))
    ours = {"type": "hetero-exporter.io/AcceleratorHealthy", "status": "False", "reason": "NvidiaXid79",
            "message": "GPU 2 (GPU-abc) fell off the bus"}
    core.patch_namespaced_pod_status("p", "ml", {"status": {"conditions": [ours]}})
    core.patch_namespaced_pod_status("p", "ml", {"status": {"conditions": [{**ours, "status": "True"}]}})
    conds = kube_api.get(PODS, "ml", "p")["status"]["conditions"]
    assert [c["type"] for c in conds] == ["Ready", "PodScheduled", "hetero-exporter.io/AcceleratorHealthy"]
    assert conds[2]["status"] == "True"
    status, body = refusal(core.patch_namespaced_pod_status, "p", "ml",
                           {"status": {"conditions": [{"type": "bad type!", "status": "True"}]}})
    assert status == 422 and fields(body) == ["status.conditions[3].type"]


def test_pods_by_phase_field_selector(kube_api, core):
    kube_api.seed_pod("ml", "ok", "n1")
    kube_api.seed_pod("ml", "rejected", "n1", phase="Failed")
    kube_api.seed_pod("ml", "elsewhere", "n2", phase="Failed")
    got = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1,status.phase=Failed").items
    assert [p.metadata.name for p in got] == ["rejected"]


def test_paging_of_any_list_and_a_bad_token(kube_api, core):
    for i in range(3):
        kube_api.seed_node(f"n{i}")
    first = core.list_node(limit=2)
    assert len(first.items) == 2 and first.metadata._continue
    assert [n.metadata.name for n in core.list_node(limit=2, _continue=first.metadata._continue).items] == ["n2"]
    assert refusal(core.list_node, limit=2, _continue="garbage")[0] == 400
