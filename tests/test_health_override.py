"""Issue 38, §3: an operator's override of a device's health (``hetero-exporter health override``).

- The annotation is read as hostile input: oversized, not JSON, another version, a malformed or
  far-future entry, past the device bound: ignored with a reason; an expired entry is kept marked.
- The judge honours an override until it expires: ``ok`` lifts a failed verdict (the reason says
  "overridden by ... until ..."), ``failed`` fails an ok device; the rules' own state is untouched.
- The command's flags: a bad duration, a missing flag, --clear with --state: one line, exit 2; no
  cluster or an API refusal: one line, exit 1.
- End to end against the loopback API server with deploy/base's RBAC and admission policy: an
  Xid 79 taints the node; the operator's override (a merge patch guarded by resourceVersion, its
  Event) lifts it, the agent honours it (its Event, /metrics) and, once it expires, the device is
  failed again (its Event); ``health --dry-run`` says "overridden by ... until ..."; the agent's
  own token may not write the annotation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from hetero_exporter import cli
from hetero_exporter.health.detect import override as ov
from hetero_exporter.model import Fault
from hetero_exporter.model.evaluation import OVERRIDE_CODE, OverrideNote, Verdict

NOW = 1764400000.0
KEY = "hetero-exporter.io/health-override"


def doc(devices: dict, v: int = 1) -> str:
    return json.dumps({"v": v, "devices": devices})


def entry(state="ok", until=NOW + 3600, reason="RMA says fine", by="alice", at=NOW) -> dict:
    return {"state": state, "until": ov.rfc3339(until), "reason": reason, "by": by, "at": ov.rfc3339(at)}


# --------------------------------------------------------------------------- the document, hostile


def test_a_well_formed_annotation_round_trips():
    note = OverrideNote("GPU-1", "failed", NOW + 7200, "flaky under load", "bob", NOW)
    parsed = ov.parse(ov.to_json({"GPU-1": note}), NOW)
    assert parsed.notes == {"GPU-1": note} and parsed.problems == ()


@pytest.mark.parametrize("text, problem", [
    ("x" * (ov.MAX_BYTES + 1), "larger than"),
    ("{not json", "not JSON"),
    (doc({"GPU-1": entry()}, v=2), "version 1"),
    (json.dumps(["GPU-1"]), "version 1"),
])
def test_a_broken_annotation_is_ignored_whole_with_a_reason(text, problem):
    parsed = ov.parse(text, NOW)
    assert parsed.notes == {} and len(parsed.problems) == 1 and problem in parsed.problems[0]


@pytest.mark.parametrize("raw, problem", [
    (entry(state="healthy"), "state must be"),
    ({**entry(), "until": "tomorrow"}, "until (and at) must be times"),
    ({**entry(), "until": 1764403600}, "until (and at) must be times"),
    (entry(until=NOW + 40 * 86400), "more than 30 days ahead"),
    (entry(reason="two\nlines"), "one line of text"),
    (entry(reason="x" * (ov.MAX_REASON + 1)), "one line of text"),
    (entry(by=""), "one line of text"),
    ("ok", "not an object"),
])
def test_a_malformed_entry_is_ignored_alone_with_a_reason(raw, problem):
    parsed = ov.parse(doc({"GPU-bad": raw, "GPU-good": entry()}), NOW)
    assert set(parsed.notes) == {"GPU-good"}
    assert len(parsed.problems) == 1 and problem in parsed.problems[0] and "GPU-bad" in parsed.problems[0]


def test_entries_past_the_bound_are_ignored_and_an_expired_one_is_kept_marked():
    many = {f"GPU-{i}": entry() for i in range(ov.MAX_DEVICES + 5)}
    parsed = ov.parse(doc(many), NOW)
    assert len(parsed.notes) == ov.MAX_DEVICES and "the rest ignored" in parsed.problems[-1]
    expired = ov.parse(doc({"GPU-1": entry(until=NOW - 1)}), NOW)
    assert expired.notes["GPU-1"].expired and expired.problems == ()


# --------------------------------------------------------------------------- the verdict


def _verdicts() -> dict:
    lost = Fault(code="79", fault_class="device-lost", action="reset-device", severity="critical")
    return {"GPU-1": Verdict("GPU-1", "failed", (lost,), node_level=True), "GPU-2": Verdict("GPU-2", "ok"),
            "GPU-3": Verdict("GPU-3", "unknown")}


def test_an_override_changes_the_verdict_until_it_expires():
    notes = {"GPU-1": OverrideNote("GPU-1", "ok", NOW + 60, "RMA says fine", "alice", NOW),
             "GPU-2": OverrideNote("GPU-2", "failed", NOW + 60, "flaky", "bob", NOW),
             "GPU-3": OverrideNote("GPU-3", "ok", NOW + 60, "x", "bob", NOW)}
    out = ov.apply(_verdicts(), notes, NOW + 1)
    assert out["GPU-1"].state == "ok" and not out["GPU-1"].node_level
    (reason,) = out["GPU-1"].reasons
    assert reason.code == OVERRIDE_CODE and reason.last_seen == NOW + 60
    assert reason.message == "overridden by alice until 2025-11-29T07:07:40Z: RMA says fine"
    assert out["GPU-2"].state == "failed" and out["GPU-2"].reasons[0].severity == "critical"
    assert out["GPU-3"].state == "unknown" and out["GPU-3"].override is notes["GPU-3"]  # nothing was read of it
    assert ov.apply(_verdicts(), notes, NOW + 60) == _verdicts()  # expired: the rules' verdicts again


# --------------------------------------------------------------------------- the command's flags


def _args(**kw) -> argparse.Namespace:
    base = dict(node="gpu-node-7", device="GPU-1", state="ok", for_="2h", reason="r", clear=False,
                domain="hetero-exporter.io", kubeconfig=None)
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400),
                                           ("1h30m", 5400), ("30d", 30 * 86400)])
def test_durations(text, seconds):
    from hetero_exporter.app.override import duration
    assert duration(text) == seconds


@pytest.mark.parametrize("argv, message", [
    (["--state", "ok", "--for", "5x", "--reason", "r"], "--for: not a duration"),
    (["--state", "ok", "--for", "31d", "--reason", "r"], "--for: 31d is out of range"),
    (["--state", "ok", "--for", "0s", "--reason", "r"], "out of range"),
    (["--state", "fine", "--for", "2h", "--reason", "r"], "--state"),
    (["--state", "ok", "--for", "2h"], "--reason missing"),
    (["--clear", "--state", "ok"], "--clear takes no --state"),
    (["--state", "ok", "--for", "2h", "--reason", "a\nb"], "--reason: one line"),
])
def test_a_bad_flag_is_one_line_and_exit_2(capsys, argv, message):
    rc = cli.main(["health", "override", "--node", "n", "--device", "GPU-1", *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and message in err, err


def test_no_cluster_is_one_line_and_exit_1(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    rc = cli.main(["health", "override", "--node", "n", "--device", "GPU-1", "--clear"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "Kubernetes features off" in err


def test_health_without_dry_run_or_override_is_a_usage_error(capsys):
    assert cli.main(["health"]) == 2
    assert "--dry-run" in capsys.readouterr().err


# --------------------------------------------------------------------------- end to end


pytest.importorskip("kubernetes")


def _scenario(tmp_path: Path) -> str:
    """health-xid79 without its reset: GPU 5 falls off the bus at t=60 and stays failed."""
    from health_agent import SCENARIOS
    doc_ = yaml.safe_load((SCENARIOS / "health-xid79.yaml").read_text())
    doc_["faults"] = [f for f in doc_["faults"] if f.get("kind") != "reset"]
    path = tmp_path / "xid79-stays.yaml"
    path.write_text(yaml.safe_dump(doc_))
    return str(path)


def _taint(kube_api, node) -> list:
    return [t for t in kube_api.node(node)["spec"].get("taints") or []
            if t["key"] == "hetero-exporter.io/accelerator-unhealthy"]


def _cycles(agent, ts, until):
    """Run cycles at ``ts`` until ``until()`` holds (bounded by the times given)."""
    for t in ts:
        agent.cycle(t)
        if until():
            return t
    raise AssertionError(f"not reached by t={ts[-1]}")


def _override(kubeconfig, clock, **kw):
    from hetero_exporter.app import override
    return override.run(override.check(_args(kubeconfig=kubeconfig, **kw)), clock=clock)


def test_override_end_to_end(kube_api, tmp_path, capsys):
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    from admission import deploy_objects, install
    from health_agent import HealthAgent
    from prometheus_client.core import Metric  # noqa: F401 - prometheus_client is there
    from hetero_exporter.exposition.collector import build_families
    from hetero_exporter.model import names as N
    token = install(kube_api, deploy_objects(), "gpu-node-7")
    agent = HealthAgent(_scenario(tmp_path), kube_api.write_kubeconfig(tmp_path / "agent", token=token),
                        health={"resync_seconds": 1})
    admin = kube_api.write_kubeconfig(tmp_path / "admin")  # a cluster operator (system:masters)
    try:
        kube_api.seed_node(agent.node)
        _cycles(agent, range(0, 200, 10), lambda: bool(_taint(kube_api, agent.node)))
        uuid = next(u for u, v in agent.verdicts.verdicts.items() if v.state == "failed")
        # the operator: the device is fine for two hours
        t0 = agent.clock()
        assert _override(admin, agent.clock, device=uuid, state="ok", for_="2h", reason="RMA says fine") == 0
        assert "overridden by kubernetes-admin until" in capsys.readouterr().out
        node = kube_api.node(agent.node)
        stored = ov.parse(node["metadata"]["annotations"][KEY], agent.clock()).notes[uuid]
        assert (stored.state, stored.by, stored.until) == ("ok", "kubernetes-admin", t0 + 7200)
        patch = [r for r in kube_api.writes(path=rf"/nodes/{agent.node}$") if r.user == "kubernetes-admin"][-1]
        assert patch.content_type.startswith("application/merge-patch+json")
        assert patch.body["metadata"]["resourceVersion"]  # guarded by the version read
        assert "AcceleratorOverrideSet" in {e["reason"] for e in kube_api.events(involved_name=agent.node)}
        # the agent honours it: taint gone, its event, /metrics
        _cycles(agent, range(200, 400, 10), lambda: not _taint(kube_api, agent.node))
        v = agent.verdicts.verdicts[uuid]
        assert v.state == "ok" and v.reasons[0].message.startswith("overridden by kubernetes-admin until ")
        honoured = [e for e in kube_api.events(involved_name=agent.node) if e["reason"] == "AcceleratorOverrideHonoured"]
        assert len(honoured) == 1 and "RMA says fine" in honoured[0]["message"]
        fams = {f.name: f for f in build_families(agent.last_snapshot)}
        (sample,) = fams[N.HEALTH_OVERRIDE_UNTIL.name].samples
        assert sample.labels == {"vendor": "nvidia", "uuid": uuid, "state": "ok"} and sample.value == t0 + 7200
        # more cycles: honoured once
        for t in range(400, 460, 10):
            agent.cycle(t)
        assert len([e for e in kube_api.events(involved_name=agent.node)
                    if e["reason"] == "AcceleratorOverrideHonoured"]) == 1
        # it expires: failed again (the Xid 79 is sticky), tainted again, its event
        _cycles(agent, range(7400, 7800, 10), lambda: bool(_taint(kube_api, agent.node)))
        assert agent.verdicts.verdicts[uuid].state == "failed"
        assert "AcceleratorOverrideExpired" in {e["reason"] for e in kube_api.events(involved_name=agent.node)}
        fams = {f.name for f in build_families(agent.last_snapshot)}
        assert N.HEALTH_OVERRIDE_UNTIL.name not in fams
        # every write of the agent was admitted
        assert [r for r in kube_api.requests if r.status == 403] == []
        # cleared: the annotation goes (the expired entry with it)
        assert _override(admin, agent.clock, device=uuid, clear=True, state=None, for_=None, reason=None) == 0
        assert KEY not in kube_api.node(agent.node)["metadata"]["annotations"]
        assert "AcceleratorOverrideCleared" in {e["reason"] for e in kube_api.events(involved_name=agent.node)}
    finally:
        agent.close()


def test_failed_override_fails_an_ok_device_and_the_agent_cannot_write_it(kube_api, tmp_path, capsys):
    pytest.importorskip("celpy", reason="cel-python evaluates the policy's CEL (pip install cel-python)")
    from admission import deploy_objects, install
    from health_agent import HealthAgent
    from hetero_exporter.k8s.api import Api
    from hetero_exporter.k8s.client import K8sError, connect
    token = install(kube_api, deploy_objects(), "gpu-node-7")
    agent_cfg = kube_api.write_kubeconfig(tmp_path / "agent", token=token)
    agent = HealthAgent("health-xid79.yaml", agent_cfg, health={"resync_seconds": 1})
    admin = kube_api.write_kubeconfig(tmp_path / "admin")
    try:
        kube_api.seed_node(agent.node)
        agent.cycle(0)
        uuid = sorted(agent.verdicts.verdicts)[2]
        assert _override(admin, agent.clock, device=uuid, state="failed", for_="1h", reason="flaky under load") == 0
        _cycles(agent, range(10, 50, 10), lambda: agent.verdicts.verdicts[uuid].state == "failed")
        assert agent.verdicts.verdicts[uuid].reasons[0].message.endswith(": flaky under load")
        # health --dry-run against that Node says so (it runs on the wall clock: an override set by it)
        import time
        from health_agent import SCENARIOS
        other = sorted(agent.verdicts.verdicts)[3]
        assert _override(admin, time.time, device=other, state="failed", for_="1h", reason="burn-in pending") == 0
        capsys.readouterr()
        assert cli.main(["health", "--dry-run", "--simulate", str(SCENARIOS / "health-xid79.yaml"),
                         "--at", str(agent.clock.t()), "--kubeconfig", admin, "--log-level", "error"]) == 0
        out = capsys.readouterr().out
        line = next(x for x in out.splitlines() if f"({other})" in x)
        assert " failed " in line and "overridden by kubernetes-admin until " in line, out
        assert "burn-in pending" in line, out
        # the agent's own token: the annotation is the operators'
        api = Api(connect(agent_cfg, env={}).api_client)
        for body in ({"metadata": {"annotations": {KEY: None}}},
                     {"metadata": {"annotations": {KEY: doc({uuid: entry(state="ok")})}}},
                     {"metadata": {"annotations": {"hetero-exporter.io/recovery-evidence": "{}"}}}):
            with pytest.raises(K8sError) as e:
                api.patch("/api/v1/nodes/{name}", {"name": agent.node}, body=body)
            assert e.value.status == 403 and "only operators write them" in str(e.value)
        assert KEY in kube_api.node(agent.node)["metadata"]["annotations"]
    finally:
        agent.close()


def test_an_operator_without_rbac_is_refused_in_one_line(kube_api, tmp_path, capsys):
    from admission import deploy_objects, install
    install(kube_api, deploy_objects(), "gpu-node-7")
    kube_api.add_user("alice-token", "alice")
    kube_api.seed_node("gpu-node-7")
    rc = cli.main(["health", "override", "--node", "gpu-node-7", "--device", "GPU-1", "--state", "ok", "--for", "1h",
                   "--reason", "r", "--kubeconfig", kube_api.write_kubeconfig(tmp_path / "alice", token="alice-token")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "403" in err and "gpu-node-7" in err, err


def test_an_unknown_device_is_refused_when_the_node_lists_its_devices(kube_api, tmp_path, capsys):
    kube_api.seed_node("gpu-node-7", annotations={
        "hetero-exporter.io/devices": json.dumps({"schema": 1, "devices": [{"identity": {"uuid": "GPU-1"}}]})})
    rc = cli.main(["health", "override", "--node", "gpu-node-7", "--device", "GPU-9", "--state", "ok", "--for", "1h",
                   "--reason", "r", "--kubeconfig", kube_api.write_kubeconfig(tmp_path / "admin")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "GPU-9 is not a device of node gpu-node-7" in err
    assert "annotations" not in kube_api.node("gpu-node-7")["metadata"] or \
        KEY not in kube_api.node("gpu-node-7")["metadata"]["annotations"]
