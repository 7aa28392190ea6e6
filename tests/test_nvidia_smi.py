"""The ``nvidia-smi -q -x`` parser on every real capture (several driver generations), with
expectations read from the XML text itself; fuzzing (only ParseError may escape); the
collector over the CLI, and NVML's fallback to it."""

from __future__ import annotations

import io
import json
import re
import stat
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import shared_fixture, shared_fixtures
from hetero_exporter.model import fields as F
from hetero_exporter import profiles
from hetero_exporter.sdk.contract import CollectorOptions, ParseError, Unavailable
from hetero_exporter.collectors.nvidia import common as C
from hetero_exporter.collectors.nvidia.nvidia_smi import collector as nvidia_smi
from hetero_exporter.model import snapshot_to_json

CAPTURES = shared_fixtures("nvidia-smi", "q-x_*.xml")
MIB = 1 << 20


def blocks(text: str) -> list[str]:
    """The text of each <gpu> element, found by plain string search (not by the parser)."""
    starts = [m.start() for m in re.finditer(r'<gpu id="', text)]
    return [text[s:e] for s, e in zip(starts, starts[1:] + [len(text)])]


def find(pattern: str, text: str):
    m = re.search(pattern, text, re.S)
    return None if m is None else m.group(1)


@pytest.mark.skipif(not CAPTURES, reason="../shared/fixtures/nvidia-smi absent")
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_capture_parses_to_what_its_text_says(path: Path):
    text = path.read_text()
    snap = nvidia_smi.parse(text)
    gpus = [d for d in snap.devices if d.identity.parent is None]
    assert len(gpus) == len(blocks(text)) == int(find(r"<attached_gpus>(\d+)</attached_gpus>", text))
    driver = find(r"<driver_version>([^<]+)</driver_version>", text)
    for d, block in zip(gpus, blocks(text)):
        ident = d.identity
        assert ident.uuid == find(r"<uuid>([^<]+)</uuid>", block)
        bus = find(r'<gpu id="([^"]+)"', block)
        assert ident.pci_address == (bus[-12:]).lower()  # 8-digit domain -> 4 digits
        assert ident.model == profiles.normalize_model("nvidia", find(r"<product_name>([^<]+)<", block))
        assert ident.driver_version == driver
        fb = find(r"<fb_memory_usage>(.*?)</fb_memory_usage>", block)
        assert d.value(F.MEMORY_TOTAL) == int(find(r"<total>(\d+) MiB</total>", fb)) * MIB
        assert d.value(F.MEMORY_USED) == int(find(r"<used>(\d+) MiB</used>", fb)) * MIB
        assert d.value(F.TEMP_CORE) == float(find(r"<gpu_temp>(\d+) C</gpu_temp>", block))
        power = find(r"<average_power_draw>([^<]+)</average_power_draw>", block) or \
            find(r"<power_draw>([^<]+)</power_draw>", block)
        if power.endswith(" W"):
            assert d.value(F.POWER) == pytest.approx(float(power[:-2]))
        else:  # N/A on this board: absent, never 0
            assert d.value(F.POWER) is None and d.readings[F.POWER].quality.status == "unsupported"
        sm = find(r"<clocks>.*?<sm_clock>(\d+) MHz</sm_clock>", block)
        assert d.value(F.CLOCK_COMPUTE) == float(sm) * 1e6
        util = find(r"<gpu_util>(\d+) %</gpu_util>", block)
        assert d.value(F.UTILIZATION) == pytest.approx(int(util) / 100)
        assert len(d.processes) == block.count("<process_info>")
        for p in d.processes:
            assert f"<pid>{p.pid}</pid>" in block
        width = find(r"<current_link_width>(\d+)x<", block)
        assert d.value(C.PCIE_WIDTH) == float(width)
        gen = find(r"<current_link_gen>(\d+)<", block)
        assert d.value(C.PCIE_GEN) == float(gen)
    json.loads(snapshot_to_json(snap))  # finite, schema-1 encodable


def capture(name: str) -> str:
    return shared_fixture("nvidia-smi", name).read_text()


def test_layouts_of_different_driver_generations():
    old = nvidia_smi.parse(capture("q-x_quadro-p400_418.43.xml")).devices[0]  # R418: power N/A, old ECC
    assert old.readings[F.POWER_LIMIT].quality.status == "unsupported"
    assert old.readings[F.ECC_CORRECTED].quality.status == "unsupported"
    assert old.readings[F.ECC_CORRECTED].quality.source.endswith("single_bit/total")
    assert C.REMAP_PENDING not in old.readings  # R418 prints no remapped_rows element at all
    assert old.value(C.clock_reason_field("idle")) == 1.0
    a10g = nvidia_smi.parse(capture("q-x_a10g_515.105.01_v11.xml")).devices[0]
    assert a10g.value(F.ECC_CORRECTED) == 0 and a10g.value(C.REMAPPED_CORRECTABLE) == 0
    assert a10g.value(C.REMAP_PENDING) == 0 and a10g.value(C.REMAP_FAILED) == 0
    assert a10g.value(F.POWER_LIMIT) == 300.0  # enforced_power_limit (R515 layout)
    # the capture's link trained at x8 of x16: a degraded signal
    assert (a10g.value(C.PCIE_WIDTH), a10g.value(C.PCIE_WIDTH_MAX)) == (8, 16)
    assert a10g.health.state == "degraded"
    assert [(r.code, r.action) for r in a10g.health.reasons] == [("pcie-width-degraded", "contact-support")]
    rtx = nvidia_smi.parse(capture("q-x_rtx3060_570.124.04_v12.xml")).devices[0]  # R570
    assert rtx.readings[C.REMAPPED_CORRECTABLE].quality.status == "unsupported"  # <remapped_rows>N/A
    assert rtx.value(C.RECOVERY_ACTION) == 0 and rtx.value(F.POWER_LIMIT) == 170.0
    assert rtx.readings[F.POWER].quality.source == "nvidia-smi -q -x: gpu_power_readings/average_power_draw"
    assert rtx.value(F.MEMORY_USED) == 116 * MIB  # used excludes the 368 MiB reserved
    assert rtx.identity.serial is None  # "N/A"
    dual = nvidia_smi.parse(capture("q-x_dual-rtx-a5000_v13.xml"))  # R590, DTD v13
    assert [d.identity.index for d in dual.devices] == [0, 1]
    assert dual.devices[0].processes[0].name == "/root/src/llama.cpp/build/bin/llama-server"
    assert dual.devices[0].processes[0].memory_bytes == 22430 * MIB


def test_mig_devices_and_their_processes():
    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>590.48.01</driver_version>
    <gpu id="00000000:00:09.0"><product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>GPU-00000000-0000-0000-0000-000000000000</uuid>
    <mig_mode><current_mig>Enabled</current_mig></mig_mode>
    <mig_devices>
      <mig_device><index>0</index><gpu_instance_id>2</gpu_instance_id><compute_instance_id>0</compute_instance_id>
        <fb_memory_usage><total>40448 MiB</total><used>26 MiB</used></fb_memory_usage></mig_device>
      <mig_device><index>1</index><gpu_instance_id>3</gpu_instance_id><compute_instance_id>0</compute_instance_id>
        <uuid>MIG-00000001-0000-0000-0000-000000000001</uuid>
        <fb_memory_usage><total>20096 MiB</total><used>N/A</used></fb_memory_usage></mig_device>
    </mig_devices>
    <fb_memory_usage><total>81559 MiB</total><used>N/A</used></fb_memory_usage>
    <processes><process_info><gpu_instance_id>3</gpu_instance_id><compute_instance_id>0</compute_instance_id>
      <pid>21181</pid><type>C</type><process_name>memhog</process_name><used_memory>1272 MiB</used_memory>
    </process_info></processes></gpu></nvidia_smi_log>"""
    gpu, m0, m1 = nvidia_smi.parse(xml).devices
    assert gpu.readings[F.MEMORY_USED].quality.status == "unsupported"  # N/A on the parent under MIG
    assert m0.identity.parent == m1.identity.parent == gpu.identity.uuid
    assert m0.identity.uuid == "GPU-00000000-0000-0000-0000-000000000000/mig-gi2-ci0"  # no <uuid> printed
    assert m1.identity.uuid == "MIG-00000001-0000-0000-0000-000000000001"
    assert m0.value(F.MEMORY_TOTAL) == 40448 * MIB and m0.identity.model == "H100-SXM5-80GB-MIG-40gb"
    assert [p.pid for p in m1.processes] == [21181] and gpu.processes == ()


@pytest.mark.parametrize("text, where", [
    ("", "not well-formed"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "not well-formed"),
    ("<nvidia_smi_log><gpu id='x'>", "not well-formed"),
    ("<html><body>502</body></html>", "expected <nvidia_smi_log>"),
    ("<nvidia_smi_log><gpu><product_name>X</product_name></gpu></nvidia_smi_log>", "neither a <uuid>"),
    ('<!DOCTYPE a [<!ENTITY x "y">]><nvidia_smi_log/>', "entity"),
])
def test_bad_documents_raise_a_clear_parse_error(text, where):
    with pytest.raises(ParseError, match=where) as e:
        nvidia_smi.parse(text)
    assert e.value.tool == "nvidia-smi -q -x"


def test_a_garbled_value_is_an_error_reading_not_a_crash():
    text = capture("q-x_rtx3060_570.124.04_v12.xml").replace("<gpu_temp>42 C</gpu_temp>", "<gpu_temp>hot</gpu_temp>")
    d = nvidia_smi.parse(text).devices[0]
    assert d.readings[F.TEMP_CORE].quality.status == "error" and d.value(F.TEMP_CORE) is None
    assert d.value(F.POWER) == pytest.approx(11.6)  # the rest is read


# ---------------------------------------------------------------- fuzzing

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _only_parse_errors(text: str) -> None:
    try:
        snap = nvidia_smi.parse(text)
    except ParseError:
        return
    json.loads(snapshot_to_json(snap))  # whatever parsed is finite and encodable


@FUZZ
@given(st.text(max_size=400))
def test_fuzz_arbitrary_text(text):
    _only_parse_errors(text)


@pytest.mark.skipif(not CAPTURES, reason="../shared/fixtures/nvidia-smi absent")
@FUZZ
@given(st.data())
def test_fuzz_mutated_captures(data):
    text = data.draw(st.sampled_from(CAPTURES)).read_text()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 200)))
        text = text[:i] + data.draw(st.text(max_size=30)) + text[j:]
    _only_parse_errors(text)


@pytest.mark.skipif(not CAPTURES, reason="../shared/fixtures/nvidia-smi absent")
@FUZZ
@given(st.data())
def test_fuzz_values_keep_the_structure(data):
    """Every value text replaced at random: structure intact, so parsing succeeds and each
    reading is a finite value, unsupported or error."""
    text = data.draw(st.sampled_from(CAPTURES)).read_text()
    values = list(re.finditer(r">([^<>\n]+)</", text))
    picks = data.draw(st.lists(st.integers(0, len(values) - 1), max_size=25, unique=True))
    out, last = [], 0
    for k in sorted(picks):
        m = values[k]
        repl = data.draw(st.one_of(st.text(max_size=12), st.from_regex(r"-?[0-9]{1,400}(\.[0-9]+)? ?(MiB|W|C|%|MHz|x)?", fullmatch=True)))
        repl = repl.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        out += [text[last:m.start(1)], repl]
        last = m.end(1)
    text = "".join(out) + text[last:]
    try:
        snap = nvidia_smi.parse(text)
    except ParseError:
        return  # e.g. the uuid and the bus id both garbled, or a control character
    for d in snap.devices:
        for r in d.readings.values():
            assert (r.value is None) == (r.quality.status != "ok")
    json.loads(snapshot_to_json(snap))


# ---------------------------------------------------------------- the collector


def test_collector_counts_a_condition_once_per_episode():
    text = capture("q-x_a10g_515.105.01_v11.xml")
    c = nvidia_smi.NvidiaSmiCollector(lambda timeout: text, clock=lambda: 1000.0)
    for _ in range(3):
        d = c.collect()[0]
    assert d.health.state == "degraded"
    assert [(f.code, f.count) for f in d.faults] == [("pcie-width-degraded", 1)]
    assert c.calls == 3


def test_collector_passes_tool_failures_to_the_sampler():
    from hetero_exporter.sdk.runner import CliTimeout

    def hung(timeout):
        raise CliTimeout("nvidia-smi: no answer within 4.5 s; killed its process group")

    with pytest.raises(CliTimeout):
        nvidia_smi.NvidiaSmiCollector(hung).collect()
    with pytest.raises(ParseError):
        nvidia_smi.NvidiaSmiCollector(lambda t: "Unable to determine the device handle").collect()


def fake_tool(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_nvml_falls_back_to_the_cli_when_nvml_cannot_load(tmp_path, monkeypatch):
    pytest.importorskip("pynvml")
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    xml = shared_fixture("nvidia-smi", "q-x_dual-rtx-a5000_v13.xml")
    exe = fake_tool(tmp_path, f"cat '{xml}'")
    c = nvml.create(CollectorOptions(settings={"path": exe}, timeout_seconds=5.0))
    if isinstance(c, nvml.NvmlCollector):
        pytest.skip("NVML works on this machine: no fallback to exercise")
    assert c.name == "nvidia_smi"
    devices = c.collect()
    assert [d.identity.uuid for d in devices] == ["GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                                                  "GPU-12345678-aaaa-bbbb-cccc-0123456789cd"]
    assert devices[0].readings[F.POWER].quality.source.startswith("nvidia-smi -q -x: ")


def test_without_nvml_and_without_the_cli_the_reason_names_both(tmp_path):
    pytest.importorskip("pynvml")
    from hetero_exporter.collectors.nvidia.nvml import collector as nvml
    missing = str(tmp_path / "no-such-nvidia-smi")
    try:
        c = nvml.create(CollectorOptions(settings={"path": missing}))
    except Unavailable as e:
        assert "nvmlInit failed" in str(e) and "nvidia-smi fallback" in str(e)
    else:
        assert isinstance(c, nvml.NvmlCollector)  # a machine with a working NVML


def test_a_hanging_cli_cannot_stand_in(tmp_path):
    exe = fake_tool(tmp_path, "sleep 30")
    c = nvidia_smi.create(CollectorOptions(settings={"path": exe}, timeout_seconds=0.5))
    with pytest.raises(Unavailable):
        c.probe()


def test_parse_command_prints_the_schema_1_document():
    from hetero_exporter import cli
    path = shared_fixture("nvidia-smi", "q-x_a10g_515.105.01_v11.xml")
    out = io.StringIO()
    with redirect_stdout(out):
        assert cli.main(["parse", "nvidia-smi", str(path), "--json"]) == 0
    doc = json.loads(out.getvalue())
    assert doc["schema"] == 1 and doc["devices"][0]["identity"]["uuid"].startswith("GPU-9a9a6c50")
    assert doc["devices"][0]["readings"]["memory_total_bytes"]["value"] == 23028 * MIB


def test_simulated_cli_renders_the_scenario(tmp_path):
    pytest.importorskip("pynvml")
    from hetero_exporter.simulate import ManualClock, load
    from conftest import ROOT
    scenario = load(str(ROOT / "fixtures" / "scenarios" / "nvidia-mig.yaml"))
    c = nvidia_smi.create(CollectorOptions(scenario=scenario, clock=ManualClock()))
    devices = c.collect()
    assert [d.identity.parent is None for d in devices] == [True, False, False, False, False, True]
    assert devices[1].value(F.MEMORY_TOTAL) == 40448 * MIB
    assert [p.pid for p in devices[1].processes] == [21180]

