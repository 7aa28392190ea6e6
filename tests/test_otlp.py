"""OTLP export (issue 28): the all-vendors simulated node, through the OpenTelemetry SDK and its
OTLP exporters, to a real receiver built from the opentelemetry-proto messages (gRPC and HTTP):
every family /metrics serves arrives, under hw.* where the conventions have a name, with its
device and quality attributes; failures are counted; nothing is imported without the section."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.metrics", reason="the otlp extra (OpenTelemetry SDK) is not installed")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.metric_exporter")

from agent_proc import Agent  # noqa: E402
from otlp_receiver import Receiver, exported_snapshot  # noqa: E402

from hetero_exporter import config as config_mod  # noqa: E402
from hetero_exporter.app.settings import OtlpSettings  # noqa: E402
from hetero_exporter.exposition.collector import build_families  # noqa: E402
from hetero_exporter.exposition.export import ExportFailures  # noqa: E402
from hetero_exporter.exposition.export import otlp_map  # noqa: E402
from hetero_exporter.exposition.export.otlp import OtlpExporter, http_endpoint  # noqa: E402
from hetero_exporter.model import HEALTH_STATES, names as N  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ALL_VENDORS = ROOT / "fixtures" / "scenarios" / "all-vendors.yaml"
OTEL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-/]{0,254}$")  # the API's instrument-name rule
HW_NAMES = {"hw.gpu.utilization", "hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.gpu.memory.utilization",
            "hw.power", "hw.energy", "hw.temperature", "hw.errors", "hw.status", "hw.gpu.io"}


@pytest.fixture(scope="module")
def snapshot():
    return exported_snapshot(ALL_VENDORS)


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


def _settings(**kw) -> OtlpSettings:
    return OtlpSettings.parse(config_mod.from_dict({"otlp": kw}).otlp)


def _export_once(snapshot, settings) -> ExportFailures:
    failures = ExportFailures()
    exporter = OtlpExporter(settings, lambda: snapshot, "gpu-node-1", failures, version="0.1.0")
    exporter.start()
    try:
        assert exporter._provider.force_flush(timeout_millis=20_000)
    finally:
        exporter.close()
    return failures


def test_every_family_has_a_valid_instrument_and_the_hw_names_follow_the_conventions():
    insts = {i.name: i for i in otlp_map.instruments()}
    assert all(OTEL_NAME.match(n) for n in insts), [n for n in insts if not OTEL_NAME.match(n)]
    assert HW_NAMES <= set(insts)
    assert insts["hw.gpu.memory.usage"].kind == "updowncounter" and insts["hw.gpu.memory.usage"].unit == "By"
    assert insts["hw.energy"].kind == "counter" and insts["hw.energy"].unit == "J"
    assert insts["hw.temperature"].unit == "Cel" and insts["hw.status"].kind == "updowncounter"
    # the rest: accelerator.<family> without the prefix and the unit suffix
    assert otlp_map.generic(N.FAN_SPEED) == otlp_map.Instrument("accelerator.fan_speed", "gauge", "1", N.FAN_SPEED.help)
    assert otlp_map.generic(N.PCIE_THROUGHPUT).name == "accelerator.pcie_throughput"
    assert otlp_map.generic(N.PCIE_THROUGHPUT).unit == "By/s"
    assert otlp_map.generic(N.FAULT_EVENTS).kind == "counter" and otlp_map.generic(N.FAULT_EVENTS).name == \
        "accelerator.fault_events"
    # every family of the model reaches some instrument
    for m in N.ALL:
        assert otlp_map.generic(m).name in insts or m.name in otlp_map.HW, m.name


def test_points_carry_hw_identity_quality_and_the_conventions_attributes(snapshot):
    pts = otlp_map.by_instrument(otlp_map.points(snapshot, now=snapshot.time))
    util = pts["hw.gpu.utilization"]
    kinds = {d.identity.uuid: d.identity.kind for d in snapshot.devices}
    general = [p for p in util if p.attributes["hw.gpu.task"] == "general"]
    gpus = [d for d in snapshot.devices if d.identity.kind == "gpu"]
    assert len(general) == sum(1 for d in gpus if d.value("utilization_ratio") is not None)
    for p in general:
        assert p.attributes["hw.type"] == kinds[p.attributes["hw.id"]] == "gpu"
        assert p.attributes["hw.vendor"] and p.attributes["hw.model"]
        assert p.attributes["accelerator.quality.status"] == "ok" and p.attributes["accelerator.quality.method"]
    # the other kinds: their own namespace for what only a GPU has under hw.gpu.*, generic hw.* for the rest
    others = {p.attributes["hw.type"] for p in pts["accelerator.utilization"]}
    assert others == {"npu", "mlu", "dcu", "gcu", "xpu"}
    assert {p.attributes["hw.type"] for p in pts["hw.power"]} >= {"gpu", "npu", "mlu", "dcu", "gcu", "xpu"}
    assert {p.attributes["hw.state"] for p in pts["hw.status"]} == {"ok", "degraded", "failed"}
    assert {p.attributes["state"] for p in pts["accelerator.health_status"]} == set(HEALTH_STATES)
    temps = pts["hw.temperature"]
    assert {p.attributes["hw.sensor_location"] for p in temps} >= {"core"}
    assert all(p.attributes["hw.type"] == "temperature" and p.attributes["hw.parent"] in kinds
               and p.attributes["hw.id"] == f"{p.attributes['hw.parent']}/temperature/"
               f"{p.attributes['hw.sensor_location']}" for p in temps)
    assert all(p.attributes["error.type"] in ("corrected", "uncorrected") for p in pts["hw.errors"])
    # the engines the conventions have no task for stay apart, with the engine named
    assert all(p.attributes["engine"] not in ("encoder", "decoder") or p.attributes["hw.type"] != "gpu"
               for p in pts["accelerator.engine_utilization"])
    # no empty attribute values (no pod is no attribute, not "")
    assert all(v != "" for ps in pts.values() for p in ps for v in p.attributes.values())


def _received(receiver) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in receiver.points():
        out.setdefault(p.metric, []).append(p)
    return out


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_every_family_of_the_all_vendors_node_arrives(snapshot, receiver, protocol):
    port = receiver.grpc_port if protocol == "grpc" else receiver.http_port
    settings = _settings(endpoint=f"127.0.0.1:{port}", protocol=protocol, interval=60, timeout=10,
                         tls={"insecure": True}, resource={"k8s.cluster.name": "lab"},
                         headers={"X-Tenant": "ml"})
    failures = _export_once(snapshot, settings)
    assert failures.value("otlp") == 0
    got = _received(receiver)
    expected = otlp_map.by_instrument(otlp_map.points(snapshot, now=snapshot.time))
    assert set(expected) - set(got) == set(), "instruments that did not arrive"
    assert HW_NAMES <= set(got)
    for name, pts in expected.items():
        sent = {json.dumps(p.attributes, sort_keys=True) for p in pts}
        arrived = {json.dumps(p.attributes, sort_keys=True) for p in got[name]}
        assert sent == arrived, name
    # values and kinds survive the trip
    energy = got["hw.energy"]
    assert energy[0].kind == "sum" and energy[0].monotonic is True and energy[0].unit == "J"
    assert got["hw.gpu.memory.usage"][0].kind == "sum" and got["hw.gpu.memory.usage"][0].monotonic is False
    assert got["hw.power"][0].kind == "gauge"
    io = got["hw.gpu.io"]  # the NVLink and xGMI byte counters, received and transmitted
    assert {p.kind for p in io} == {"sum"} and {p.monotonic for p in io} == {True} and io[0].unit == "By"
    assert {p.attributes["network.io.direction"] for p in io} == {"receive", "transmit"}
    assert {p.attributes["link_type"] for p in io} == {"nvlink", "xgmi"}
    assert {p.attributes["hw.type"] for ps in got.values() for p in ps if p.metric.startswith("hw.gpu.")} == {"gpu"}
    by_uuid = {(p.attributes["hw.id"], p.attributes["hw.gpu.task"]): p.value for p in got["hw.gpu.utilization"]}
    others = {p.attributes["hw.id"]: p.value for p in got["accelerator.utilization"]}
    for d in snapshot.devices:
        if d.value("utilization_ratio") is not None and d.identity.kind != "gpu":
            assert others[d.identity.uuid] == pytest.approx(d.value("utilization_ratio"))
        elif d.value("utilization_ratio") is not None:
            assert by_uuid[(d.identity.uuid, "general")] == pytest.approx(d.value("utilization_ratio"))
    resource = got["hw.power"][0].resource
    assert resource["service.name"] == "hetero-exporter" and resource["k8s.node.name"] == "gpu-node-1"
    assert resource["k8s.cluster.name"] == "lab" and resource["host.name"]


def test_every_family_a_scrape_serves_is_exported(snapshot):
    """The same families: what build_families gives /metrics, otlp_map renames, none dropped."""
    scraped = {s.name for fam in build_families(snapshot) for s in fam.samples}
    exported = {p.instrument.name for p in otlp_map.points(snapshot)}
    for name in scraped:
        m = N.BY_NAME[name]
        names = {otlp_map.generic(m).name} | {h.name for h in otlp_map.HW.get(name, ())}
        assert names & exported, name


def test_a_refusing_receiver_is_counted_and_said_once(snapshot, receiver, caplog):
    caplog.set_level(logging.INFO, logger="hetero_exporter")
    receiver.refuse = True
    settings = _settings(endpoint=f"http://127.0.0.1:{receiver.http_port}", protocol="http", interval=60, timeout=10)
    failures = ExportFailures()
    exporter = OtlpExporter(settings, lambda: snapshot, "n1", failures)
    exporter.start()
    try:
        exporter._provider.force_flush(timeout_millis=20_000)
        first = [r.name for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
        exporter._provider.force_flush(timeout_millis=20_000)
        later = [r.name for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
        assert failures.value("otlp") == 2
        receiver.refuse = False
        exporter._provider.force_flush(timeout_millis=20_000)
    finally:
        exporter.close()
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("otlp export failed") == 1 and messages.count("otlp export recovered") == 1
    assert first and later == first  # the SDK's own lines: the first failure only
    assert failures.value("otlp") == 2 and receiver.requests


def test_the_failure_counter_is_served_at_zero_from_the_start():
    failures = ExportFailures()
    OtlpExporter(_settings(endpoint="127.0.0.1:4317"), lambda: None, "n1", failures)
    fam = list(failures.collect())
    assert [(s.name, s.labels, s.value) for s in fam[0].samples] == [
        ("accelerator_export_failures_total", {"exporter": "otlp"}, 0.0)]


@pytest.mark.parametrize("endpoint, insecure, url", [
    ("http://c:4318", False, "http://c:4318/v1/metrics"),
    ("https://c:4318/custom/path", False, "https://c:4318/custom/path"),
    ("c:4318", True, "http://c:4318/v1/metrics"),
    ("c:4318", False, "https://c:4318/v1/metrics"),
])
def test_http_endpoint(endpoint, insecure, url):
    assert http_endpoint(endpoint, insecure) == url


@pytest.mark.parametrize("doc, field", [
    ({}, "otlp.endpoint"), ({"endpoint": "ftp://c"}, "otlp.endpoint"), ({"endpoint": "c:70000"}, "otlp.endpoint"),
    ({"endpoint": "c:4317", "protocol": "thrift"}, "otlp.protocol"),
    ({"endpoint": "c:4317", "interval": 0}, "otlp.interval"),
    ({"endpoint": "c:4317", "headers": {"bad header": "x"}}, "otlp.headers"),
    ({"endpoint": "c:4317", "headers": {"a": "x\r\nInjected: 1"}}, "otlp.headers.a"),
    ({"endpoint": "c:4317", "tls": {"cert_file": "/c.pem"}}, "otlp.tls"),
    ({"endpoint": "c:4317", "tls": {"verify": False}}, "otlp.tls"),
    ({"endpoint": "c:4317", "nope": 1}, "otlp"),
])
def test_a_bad_otlp_section_is_one_config_error_naming_the_key(doc, field):
    with pytest.raises(config_mod.ConfigError) as e:
        config_mod.from_dict({"otlp": doc})
    assert e.value.field == field and "\n" not in str(e.value)


def test_the_agent_exports_to_the_receiver_and_serves_the_failure_counter(tmp_path, receiver):
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(json.dumps({"otlp": {"endpoint": f"http://127.0.0.1:{receiver.http_port}", "protocol": "http",
                                        "interval": 1}}))
    with Agent(["--simulate", str(ALL_VENDORS), "--interval", "1", "--config", str(cfg)]) as agent:
        assert receiver.arrived.wait(60), "no export reached the receiver"
        text = agent.wait_metrics(lambda t: 'accelerator_export_failures_total{exporter="otlp"}' in t)
        # the first export may carry the first snapshot only (no energy counter yet): wait for a later one
        deadline = time.monotonic() + 120  # a bound, not a speed claim
        while not HW_NAMES - {"hw.errors"} <= set(_received(receiver)) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert 'accelerator_export_failures_total{exporter="otlp"} 0.0' in text
    got = _received(receiver)
    assert HW_NAMES - {"hw.errors"} <= set(got), sorted(got)
    assert {p.resource["service.name"] for ps in got.values() for p in ps} == {"hetero-exporter"}


def test_without_the_section_the_sdk_is_never_imported():
    code = textwrap.dedent(f"""
        import sys
        from hetero_exporter.cli import main
        main(["inspect", "--simulate", {str(ALL_VENDORS)!r}])
        print("LOADED", sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "LOADED []"


def test_the_mapping_table_in_the_docs_is_the_one_in_the_code():
    text = (ROOT / "docs" / "opentelemetry.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `accelerator_")]
    documented = {(re.match(r"\| `([a-z_]+)", r).group(1), re.search(r"\| `(hw\.[a-z.]+)` \|", r).group(1))
                  for r in rows if "`hw." in r}
    in_code = {(fam, hw.name) for fam, hws in otlp_map.HW.items() for hw in hws}
    assert documented == in_code
