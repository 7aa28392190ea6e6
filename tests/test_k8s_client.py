"""k8s/client.py: where credentials come from, and how API failures reach callers."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("kubernetes")
from kubernetes import client as kclient  # noqa: E402

from hetero_exporter.k8s.client import K8sError, call, connect, decode_json  # noqa: E402


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


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=10)
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                     max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_an_answer_decodes_as_json_decodes_it(doc):
    """decode_json (msgspec where installed) gives what json.loads gives for any JSON the API
    server can send: integers past 64 bits, any text, floats."""
    for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False)):
        assert decode_json(text.encode()) == json.loads(text)


@pytest.mark.parametrize("data", [b'{"a": NaN}', b'{"a": 1e400}', b"{", b"[" * 100_000, b'"\xff"', b""])
def test_what_is_not_json_is_a_value_error(data):
    with pytest.raises(ValueError):
        decode_json(data)


def test_without_msgspec_answers_decode_with_json(monkeypatch):
    from hetero_exporter.k8s import client as k8s_client
    monkeypatch.setitem(sys.modules, "msgspec", None)  # import msgspec -> ImportError
    k8s_client._json_decoder.cache_clear()
    try:
        assert k8s_client._json_decoder() is json.loads
        assert decode_json(b'{"items": [1]}') == {"items": [1]}
    finally:
        k8s_client._json_decoder.cache_clear()
