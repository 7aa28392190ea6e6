"""k8s/client.py: where credentials come from, and how API failures reach callers."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client as kclient  # noqa: E402

from hetero_exporter.k8s.client import K8sError, call, connect  # noqa: E402


def test_no_credentials_turns_kubernetes_features_off():
    cluster = connect(None, env={})
    assert not cluster.enabled
    assert cluster.reason.startswith("Kubernetes features off:")
    assert "KUBECONFIG" in cluster.reason


def test_unreadable_kubeconfig_says_why(tmp_path):
    cluster = connect(str(tmp_path / "absent"), env={})
    assert not cluster.enabled and "absent" in cluster.reason


def test_flag_wins_over_environment(kube_api, tmp_path):
    good = kube_api.write_kubeconfig(tmp_path / "good")
    cluster = connect(good, env={"KUBECONFIG": str(tmp_path / "absent")})
    assert cluster.enabled and cluster.source == f"kubeconfig {good}"
    kube_api.seed_node("n1")
    node = call(kclient.CoreV1Api(cluster.api_client).read_node, "n1")
    assert node["metadata"]["name"] == "n1" and isinstance(node, dict)


def test_kubeconfig_from_environment(kube_api, tmp_path):
    path = kube_api.write_kubeconfig(tmp_path / "kc")
    cluster = connect(None, env={"KUBECONFIG": path})
    assert cluster.enabled and cluster.source.startswith("KUBECONFIG=")


def test_in_cluster_without_service_account_is_off():
    cluster = connect(None, env={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    # the test machine has no /var/run/secrets/kubernetes.io/serviceaccount
    assert not cluster.enabled and "in-cluster" in cluster.reason


def test_errors_carry_status_reason_and_retryability(kube_api):
    core = kclient.CoreV1Api(kube_api.api_client())
    with pytest.raises(K8sError) as e:
        call(core.read_node, "absent")
    assert e.value.status == 404 and e.value.not_found and not e.value.retryable
    kube_api.seed_node("n1")
    rv = kube_api.node("n1")["metadata"]["resourceVersion"]
    kube_api.mutate_node("n1", lambda n: n["metadata"]["labels"].update(x="1"))
    with pytest.raises(K8sError) as e:
        call(core.patch_node, "n1", {"metadata": {"resourceVersion": rv, "labels": {"y": "2"}}})
    assert e.value.conflict and e.value.reason == "Conflict" and e.value.retryable
    kube_api.fail_next(1, 503)
    with pytest.raises(K8sError) as e:
        call(core.read_node, "n1")
    assert e.value.status == 503 and e.value.retryable


def test_timeout_is_a_transport_error(kube_api):
    kube_api.seed_node("n1")
    kube_api.delay_next(1, 2.0, methods=["PATCH"])
    core = kclient.CoreV1Api(kube_api.api_client())
    with pytest.raises(K8sError) as e:
        call(core.patch_node, "n1", {"metadata": {"labels": {"a": "b"}}}, timeout=0.3)
    assert e.value.status is None and e.value.retryable
    assert "no answer" in str(e.value)
