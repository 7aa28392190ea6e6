"""Issue 26: the Kubernetes domain is spelled once (model/keys.py) and every key derives from it."""

from __future__ import annotations

from conftest import ROOT
from hetero_exporter.health.plan.device_taints import DeviceTaintSettings
from hetero_exporter.health.plan.config import RemedyConfig
from hetero_exporter.health.plan.pod_signals import PodSignalSettings
from hetero_exporter.model.keys import DEFAULT_DOMAIN, Keys


def test_the_domain_literal_is_spelled_once_in_the_code():
    spelled = [(str(p.relative_to(ROOT)), n) for folder in ("hetero_exporter", "collectors")
               for p in sorted((ROOT / folder).rglob("*.py"))
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if DEFAULT_DOMAIN in line]
    assert [path for path, _line in spelled] == ["hetero_exporter/model/keys.py"], spelled


def test_every_key_follows_the_configured_domain():
    keys = Keys("gpu.example.com")
    named = {name: getattr(keys, name) for name in dir(Keys) if isinstance(getattr(Keys, name), property)}
    assert len(named) >= 10 and all(v.startswith("gpu.example.com/") for v in named.values()), named
    assert len(set(named.values())) == len(named)  # no two keys collide
    assert RemedyConfig(domain="gpu.example.com").taint_key == keys.taint
    assert PodSignalSettings(domain="gpu.example.com").condition_type == keys.pod_condition
    assert DeviceTaintSettings(domain="gpu.example.com").taint_key == keys.taint
    assert Keys().devices == "hetero-exporter.io/devices"  # DESIGN.md's default, unchanged
