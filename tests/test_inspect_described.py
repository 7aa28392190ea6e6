"""Every device of the default simulated node is fully described (issue: vendor packages).

`inspect --simulate --json` is what an operator and the scheduler see; these checks hold for
every vendor at once: a runtime version on every top-level device, a resolution on every
reading, a window on every sampled reading, and fabric links between the devices of each
vendor whose tool shows a topology.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def document() -> dict:
    proc = subprocess.run([sys.executable, "-m", "hetero_exporter", "inspect", "--simulate", "--json"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _top(doc: dict) -> list[dict]:
    return [d for d in doc["devices"] if d["identity"].get("parent") is None]


def test_every_top_level_device_has_a_runtime_version(document):
    missing = [(d["identity"]["vendor"], d["identity"]["index"]) for d in _top(document)
               if not d["identity"].get("runtime_version")]
    assert not missing, f"devices without runtime_version: {missing}"


def test_every_reading_declares_its_resolution_and_sampled_ones_their_window(document):
    no_resolution, no_window = set(), set()
    for d in document["devices"]:
        vendor = d["identity"]["vendor"]
        for name, r in d["readings"].items():
            q = r["quality"]
            if q.get("resolution") is None:
                no_resolution.add((vendor, name))
            if q.get("method") == "sampled" and q.get("window_seconds") is None:
                no_window.add((vendor, name))
    assert not no_resolution, f"readings without a resolution: {sorted(no_resolution)}"
    assert not no_window, f"sampled readings without a window: {sorted(no_window)}"


@pytest.mark.parametrize("vendor,link_type", [("ascend", "hccs"), ("cambricon", "mlulink")])
def test_fabric_links_between_the_devices_of_a_vendor(document, vendor, link_type):
    devs = [d for d in _top(document) if d["identity"]["vendor"] == vendor]
    assert len(devs) >= 2, f"the default node has {len(devs)} {vendor} devices"
    uuids = {d["identity"]["uuid"] for d in devs}
    for d in devs:
        peers = {link["peer"] for link in d.get("links") or () if link["type"] == link_type}
        assert peers & (uuids - {d["identity"]["uuid"]}), f"{d['identity']['uuid']}: no {link_type} link to a peer"
