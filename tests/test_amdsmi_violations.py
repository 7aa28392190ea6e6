"""AMD throttle status (issue 27): amdsmi_get_violation_status as clock_throttle_<reason>, 1 while
the limit holds the clocks; "N/A" from amdsmi (an older ROCm or GPU) is unsupported, never 0."""

from __future__ import annotations

import pytest

from hetero_exporter.model import names as N


@pytest.fixture()
def amdsmi_collector():
    from hetero_exporter.collectors.amd.amdsmi import collector as amdsmi
    from hetero_exporter.sdk.contract import CollectorOptions
    from hetero_exporter.simulate import ManualClock
    from hetero_exporter.simulate.scenario import from_dict
    doc = {"name": "v", "devices": [{"vendor": "amd", "count": 2, "product": "AMD Instinct MI300X",
                                     "memory_total": "192GiB", "pci_address": "0000:05:00.0", "pci_stride": 32,
                                     "values": {"utilization_ratio": 0.5, "memory_used_bytes": "10GiB",
                                                "clock_throttle_power_cap": {"steps": [[0, 0], [100, 1]]},
                                                "clock_throttle_hbm_thermal": 0}}]}
    clock = ManualClock()
    c = amdsmi.create(CollectorOptions(scenario=from_dict(doc, "v"), clock=clock))
    yield c, clock
    c.close()


def test_the_power_cap_is_a_throttle_reason_while_it_holds(amdsmi_collector):
    c, clock = amdsmi_collector
    clock.set_t(50)
    d = c.collect()[0]
    assert d.readings["clock_throttle_power_cap"].value == 0.0
    assert d.readings["clock_throttle_hbm_thermal"].value == 0.0
    assert d.readings["clock_throttle_vr_thermal"].quality.status == "unsupported"  # N/A, not 0
    clock.set_t(150)
    d = c.collect()[0]
    assert d.readings["clock_throttle_power_cap"].value == 1.0
    assert d.readings["clock_throttle_power_cap"].quality.source == "amdsmi_get_violation_status.active_ppt_pwr"
    assert N.metric_for_field("clock_throttle_power_cap") == (N.CLOCK_THROTTLE, ("power_cap",))
