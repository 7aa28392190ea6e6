"""One fault-onset counter in the SDK (issue 26): the CLI base's FaultEpisodes and NVIDIA's
ConditionTracker count a fault once per episode the same way, over the ledger they are given."""

from __future__ import annotations

from hetero_exporter.model import Fault
from hetero_exporter.sdk.cli_collector import FaultEpisodes
from hetero_exporter.sdk.ledger import FaultLedger


def _width(n: int) -> Fault:
    return Fault(code="pcie-width-degraded", severity="warning", message=f"PCIe link x{n} of x16")


def test_an_episode_counts_once_keeps_its_first_sighting_and_says_the_latest_message():
    ep = FaultEpisodes()
    (first,) = ep.update("U0", [_width(8)], 10.0)
    (again,) = ep.update("U0", [_width(4)], 20.0)
    assert (first.count, again.count) == (1, 1) and again.first_seen == 10.0
    assert again.message == "PCIe link x4 of x16"
    assert ep.update("U0", [], 30.0) == ()
    (third,) = ep.update("U0", [_width(8)], 40.0)  # a new episode
    assert third.count == 2


def test_nvidia_conditions_count_over_the_ledger_they_share():
    from hetero_exporter.collectors.nvidia.common import ConditionTracker
    ledger = FaultLedger()
    tracker = ConditionTracker(ledger, "nvml")
    for t in (1.0, 2.0, 3.0):  # one episode over three polls
        (f,) = tracker.update("GPU-0", [("pcie-width-degraded", f"PCIe link x8 of x16 at {t}")], t)
    assert f.count == 1 and f.message.endswith("at 3.0")
    assert [g.count for g in ledger.faults("GPU-0")] == [1]
    tracker.update("GPU-0", [], 4.0)
    (f,) = tracker.update("GPU-0", [("pcie-width-degraded", "again")], 5.0)
    assert f.count == 2
