"""The nvidia-smi collector (NVML's CLI fallback) on its detail schedule (issue 40 §1): the NVLink
speeds (``nvlink -s``) and the MIG partition inventory (``mig -lgip/-lgipp/-lgi/-lci``) added to
its GPUs, through a fake nvidia-smi (a shell script answering by its arguments) over the real
captures; slow calls at their own cadence, a failing one keeps the previous answer."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import shared_fixture
from hetero_exporter.collectors.nvidia.nvidia_smi import collector as nvidia_smi
from hetero_exporter.collectors.nvidia.nvidia_smi import details, nvlink_status as NV
from hetero_exporter.sdk.contract import CollectorOptions

XML = "q-x_dual-rtx-a5000_v13.xml"  # two GPUs, index 0 and 1
NVLINK = "nvidia-smi-nvlink-s_8x-A100-SXM4-80GB_12-links.txt"
MIG = {"-lgip": "nvidia-smi-mig-lgip_1x-RTX-PRO-6000-Blackwell-Server_610.43.02_gfx-me-profiles.txt",
       "-lgipp": "nvidia-smi-mig-lgipp_1x-RTX-PRO-6000-Blackwell-Server_610.43.02.txt",
       "-lgi": "nvidia-smi-mig-lgi_1x-RTX-PRO-6000-Blackwell-Server_610.43.02_4x-1g.24gb.txt",
       "-lci": "nvidia-smi-mig-lci_1x-RTX-PRO-6000-Blackwell-Server_610.43.02_4x-1g.24gb.txt"}
A100 = ["GPU-5269b708-678a-b1a8-60f0-c90406537486", "GPU-a7605225-d684-1f65-4ad4-ee2ab39338b4"]
XML_UUIDS = ["GPU-12345678-aaaa-bbbb-cccc-0123456789ab", "GPU-12345678-aaaa-bbbb-cccc-0123456789cd"]


def _text(name: str) -> str:
    return shared_fixture("nvidia-smi", name).read_text(encoding="utf-8")


def fake_nvidia_smi(tmp_path: Path, answers: dict[str, str], log: bool = True) -> str:
    """A shell nvidia-smi: ``-q -x``, ``nvlink -s``, ``mig -lgi``... each prints its file; the
    calls are appended to calls.log."""
    lines = ["#!/bin/sh", f'echo "$*" >> "{tmp_path}/calls.log"' if log else "", 'case "$*" in']
    for n, (args, text) in enumerate(answers.items()):
        f = tmp_path / f"answer{n}.txt"
        f.write_text(text, encoding="utf-8")
        lines.append(f'  "{args}") cat "{f}" ;;')
    lines += ['  *) echo "unknown arguments $*" >&2; exit 2 ;;', "esac"]
    exe = tmp_path / "nvidia-smi"
    exe.write_text("\n".join(lines) + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def real_node(tmp_path: Path, **override: str) -> str:
    """The dual RTX A5000 XML with the A100 capture's first two uuids (nvlink -s joins by uuid),
    the A100 nvlink -s and the Blackwell MIG listings (GPU 0) as captured."""
    xml = _text(XML)
    for old, new in zip(XML_UUIDS, A100):
        xml = xml.replace(old, new)
    answers = {"-q -x": xml, "nvlink -s": _text(NVLINK), **{f"mig {k}": _text(v) for k, v in MIG.items()}}
    answers.update(override)
    return fake_nvidia_smi(tmp_path, answers)


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def collector(exe: str, clock: Clock) -> nvidia_smi.NvidiaSmiCollector:
    c = nvidia_smi.create(CollectorOptions(settings={"path": exe}, timeout_seconds=10.0, interval_seconds=10.0,
                                           clock=clock))
    c.clock = clock
    return c


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_links_with_their_rates_and_the_mig_partitions_on_the_gpus(tmp_path):
    clock = Clock()
    devices = collector(real_node(tmp_path), clock).collect()
    gpus = [d for d in devices if d.identity.parent is None]
    assert [d.identity.uuid for d in gpus] == A100
    for d in gpus:
        assert [d.value(NV.link_speed_field(n)) for n in range(12)] == [25e9] * 12
        assert d.value(NV.SPEED_FIELD) == 300e9 and d.value(NV.ACTIVE_FIELD) == 12
        assert d.readings[NV.SPEED_FIELD].quality.source.startswith("nvidia-smi nvlink -s")
    # the MIG listings name GPU 0: its four 1g.24gb GPU instances; GPU 1 is not listed (MIG off)
    assert gpus[0].value(details.PARTITIONS) == 4 and details.PARTITIONS not in gpus[1].readings
    assert gpus[0].readings[details.PARTITIONS].quality.source == "nvidia-smi mig -lgi: GPU instances"
    assert sorted(calls(tmp_path)) == sorted(["-q -x", "nvlink -s", "mig -lgip", "mig -lgipp", "mig -lgi",
                                              "mig -lci"])


def test_the_inventory_is_kept_whole(tmp_path):
    c = collector(real_node(tmp_path), Clock())
    c.collect()
    mig = c.details.mig
    assert mig is not None and mig.inventory is not None
    inv = mig.inventory
    assert inv.listings == ("-lgip", "-lgipp", "-lgi", "-lci")
    assert (len(inv.profiles), len(inv.placements), len(inv.gpu_instances), len(inv.compute_instances)) == \
        (11, 11, 4, 4)
    assert [(g.gpu_instance, g.start, g.size) for g in inv.gpu_instances] == [(3, 0, 3), (4, 3, 3), (5, 6, 3),
                                                                             (6, 9, 3)]


def test_slow_calls_run_on_their_schedule_not_every_cycle(tmp_path):
    clock = Clock()
    exe = real_node(tmp_path)
    c = collector(exe, clock)
    for _ in range(5):  # five cycles within the minute: the details once
        d = c.collect()[0]
        clock.t += 10.0
    log = calls(tmp_path)
    assert log.count("-q -x") == 5 and log.count("nvlink -s") == 1 and log.count("mig -lgi") == 1
    # the answer is kept between calls, aged from its call
    assert d.value(NV.SPEED_FIELD) == 300e9 and d.readings[NV.SPEED_FIELD].quality.age_seconds == 40.0
    clock.t += 30.0  # past the interval: asked again
    c.collect()
    assert calls(tmp_path).count("nvlink -s") == 2


def test_a_failing_detail_call_keeps_the_previous_answer_and_never_fails_the_cycle(tmp_path):
    clock = Clock()
    good = collector(real_node(tmp_path), clock)
    good.collect()
    # the tool now refuses nvlink -s (exit 2) and prints garbage for -lgi
    (tmp_path / "broken").mkdir()
    broken = real_node(tmp_path / "broken",
                       **{"nvlink -s": "GPU 0: x (UUID: GPU-1)\n\tLink 0: fast\n", "mig -lgi": "garbage\n"})
    good.cli.exe = broken
    clock.t += 120.0
    d = good.collect()[0]
    assert d.value(NV.SPEED_FIELD) == 300e9 and d.readings[NV.SPEED_FIELD].quality.age_seconds == 120.0
    assert d.value(details.PARTITIONS) == 4
    st_ = good.details.schedule.state(details.NVLINK)
    assert st_ is not None and st_.failures == 1 and not st_.disabled


def test_no_mig_and_no_nvlink_add_nothing(tmp_path):
    exe = fake_nvidia_smi(tmp_path, {"-q -x": _text(XML), "nvlink -s": "",
                                     **{f"mig {k}": "No MIG-enabled devices found.\n" for k in MIG}})
    c = collector(exe, Clock())
    devices = c.collect()
    assert all(details.PARTITIONS not in d.readings and NV.SPEED_FIELD not in d.readings for d in devices)
    mig = c.details.mig
    assert mig is not None and mig.inventory is None  # answered: no MIG-enabled GPU
    assert calls(tmp_path).count("mig -lgip") == 1 and "mig -lgipp" not in calls(tmp_path)


def test_mig_on_with_no_instance_is_zero_partitions(tmp_path):
    exe = fake_nvidia_smi(tmp_path, {"-q -x": _text(XML), "nvlink -s": "",
                                     "mig -lgip": _text(MIG["-lgip"]), "mig -lgipp": _text(MIG["-lgipp"]),
                                     "mig -lgi": "No GPU instances found: Not Found\n",
                                     "mig -lci": "No compute instances found: Not Found\n"})
    d0, d1 = [d for d in collector(exe, Clock()).collect() if d.identity.parent is None]
    assert d0.value(details.PARTITIONS) == 0 and details.PARTITIONS not in d1.readings


def test_the_simulation_and_a_callable_source_make_no_detail_call():
    text = _text(XML)
    seen: list[str] = []
    c = nvidia_smi.NvidiaSmiCollector(lambda timeout: seen.append("x") or text, clock=lambda: 1000.0)
    c.collect()
    assert seen == ["x"] and c.calls == 1


FUZZ = settings(max_examples=40, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@FUZZ
@given(st.text(max_size=300), st.text(max_size=300))
def test_fuzz_detail_answers_never_break_the_cycle(nvlink, lgi):
    answers = {("nvlink", "-s"): nvlink, ("mig", "-lgi"): lgi, ("mig", "-lgip"): "x\n", ("mig", "-lgipp"): "y\n",
               ("mig", "-lci"): "z\n"}
    d = details.Details(lambda args, deadline: answers[tuple(args)], 10.0)
    d.refresh(1000.0, float("inf"))
    for job in (details.NVLINK, details.MIG):
        st_ = d.schedule.state(job)
        assert st_ is not None and st_.seen
