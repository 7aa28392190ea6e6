"""What the node's sources say about pods: the pods the Kubernetes API (or a scenario) describes
and the devices the kubelet's PodResources API says each container holds. Shared by the sources
that read them (attribution, podresources, k8s) and the simulation that stands in for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional


@dataclass(frozen=True)
class PodInfo:
    """A pod as the Kubernetes API (or a scenario) describes it. ``containers`` maps a bare
    container id (no ``containerd://`` prefix) to the container name."""

    uid: str
    namespace: str
    name: str
    containers: Mapping[str, str] = field(default_factory=dict)
    qos_class: Optional[str] = None


@dataclass(frozen=True)
class ContainerDevices:
    """One (container, resource) of a PodResources ``List`` answer."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]
