"""The Kubernetes keys hetero-exporter reads and writes, all derived from one domain
(DESIGN.md "Kubernetes surface": one domain, configurable; its default is DEFAULT_DOMAIN).

The domain is spelled here and nowhere else in the code; every module takes its keys from a
``Keys`` of the configured domain (``health.domain``, ``--domain``), so a site that renames the
domain renames every taint, condition, annotation and label at once.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DOMAIN = "hetero-exporter.io"


@dataclass(frozen=True)
class Keys:
    domain: str = DEFAULT_DOMAIN

    def key(self, name: str) -> str:
        """``<domain>/<name>``: an annotation, label or taint key of ours."""
        return f"{self.domain}/{name}"

    @property
    def taint(self) -> str:
        """The node taint (and each DeviceTaintRule's taint): ``=<fault class>:NoSchedule``."""
        return self.key("accelerator-unhealthy")

    @property
    def pod_condition(self) -> str:
        """The condition type written on the pods that hold a failed device."""
        return self.key("AcceleratorHealthy")

    @property
    def devices(self) -> str:
        """The node annotation holding the compact snapshot (the scorer's input)."""
        return self.key("devices")

    @property
    def agent_state(self) -> str:
        """The node annotation holding the health loop's book (what it wrote, for restarts)."""
        return self.key("agent-state")

    @property
    def health_override(self) -> str:
        """The node annotation holding operators' overrides of device health (``health override``)."""
        return self.key("health-override")

    @property
    def accelerator(self) -> str:
        """The node label ``=true`` on a node with accelerators."""
        return self.key("accelerator")

    @property
    def request(self) -> str:
        """The pod annotation a workload states its accelerator request in (the scorer's input)."""
        return self.key("request")

    @property
    def node(self) -> str:
        """The label and annotation naming the node a DeviceTaintRule was written for."""
        return self.key("node")

    @property
    def device(self) -> str:
        """The DeviceTaintRule annotation naming the device's uuid."""
        return self.key("device")

    @property
    def message(self) -> str:
        """The DeviceTaintRule annotation saying why."""
        return self.key("message")

    @property
    def budget(self) -> str:
        """The label of the fleet budget's slot Leases."""
        return self.key("budget")
