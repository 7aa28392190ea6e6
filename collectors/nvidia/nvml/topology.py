"""Topology of the NVIDIA GPUs of a node through NVML -> ``Link``s of the model.

- NVLink: per GPU the links (``NVML_FI_DEV_NVLINK_LINK_COUNT``, else probe link ids until
  NVML says InvalidArgument/NotSupported), each link's remote end
  (``nvmlDeviceGetNvLinkRemotePciInfo`` + ``nvmlDeviceGetNvLinkRemoteDeviceType``) and its
  state (``nvmlDeviceGetNvLinkState``, read every cycle). Links to another GPU become one
  ``nvlink`` Link per peer (lanes = links to that peer); links to an NVSwitch make every
  other switch-attached GPU an ``nvswitch`` peer.
- PCIe: ``nvmlDeviceGetTopologyCommonAncestor`` for every pair of GPUs, mapped to
  ``pcie-switch`` (same board / single or multiple switches), ``pcie-hostbridge``,
  ``numa`` (same NUMA node, across host bridges) or ``cross-numa`` (across the SMP
  interconnect).

Wiring and ancestors do not change while the driver is loaded: they are discovered once
per GPU (per pair) and cached. Bandwidth is per direction: active links x the per-link speed
(``NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON``, MB/s), absent when NVML does not report it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from hetero_exporter.sdk import values
from hetero_exporter.collectors.nvidia.nvml.funnel import LOST, UNSUPPORTED, Failed, Funnel
from hetero_exporter.model import DeviceIdentity, Link
from hetero_exporter.sdk import pciaddr



def normalize_bus_id(bus_id: Any) -> str:
    """NVML's '00000000:18:00.0' -> '0000:18:00.0' (sdk.pciaddr; text it cannot read is kept,
    lower case, so two spellings of one odd id still compare)."""
    s = values.decoded(bus_id)
    return pciaddr.normalize(s) or s.strip().lower()


@dataclass
class _NvLinks:
    count: int = 0
    remote_pci: list = field(default_factory=list)  # per link: '0000:..' or None
    remote_switch: list = field(default_factory=list)  # per link: True when the far end is an NVSwitch
    speed_bytes: Optional[float] = None  # per link, per direction


# NVML_TOPOLOGY_* level -> model link type
def ancestor_type(nv: Any, level: int) -> Optional[str]:
    if level <= getattr(nv, "NVML_TOPOLOGY_MULTIPLE", 20):  # INTERNAL, SINGLE, MULTIPLE
        return "pcie-switch"
    if level <= getattr(nv, "NVML_TOPOLOGY_HOSTBRIDGE", 30):
        return "pcie-hostbridge"
    if level <= getattr(nv, "NVML_TOPOLOGY_NODE", 40):
        return "numa"
    if level <= getattr(nv, "NVML_TOPOLOGY_SYSTEM", 50):
        return "cross-numa"
    return None


class Topology:
    def __init__(self, nv: Any, funnel: Optional[Funnel] = None):
        self._nv = nv
        self._f = funnel or Funnel(nv)
        self._nvlinks: dict[str, _NvLinks] = {}
        self._ancestors: dict[frozenset, Optional[str]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ NVLink
    def _field(self, h: Any, fid: Optional[int]) -> Optional[float]:
        if fid is None:
            return None
        got = self._f.call(self._nv.nvmlDeviceGetFieldValues, h, [fid])
        if not got.ok:
            return None
        v = got.value[0]
        return float(v.value.uiVal) if v.nvmlReturn == self._f.SUCCESS else None

    def _discover(self, uuid: str, h: Any) -> _NvLinks:
        nv, f = self._nv, self._f
        info = _NvLinks()
        count = self._field(h, getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", None))
        limit = int(count) if count is not None else int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
        switch_type = getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        for link in range(limit):
            got = f.call(nv.nvmlDeviceGetNvLinkState, h, link)
            if got.status == UNSUPPORTED or got.code == f.INVALID_ARGUMENT:
                if count is None:
                    break  # probing: first link NVML does not know ends the list
                info.remote_pci.append(None)
                info.remote_switch.append(False)
                continue
            if not got.ok:
                raise Failed(got)
            remote = f.value(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            pci = normalize_bus_id(remote.busId) if remote is not None else None
            remote_type = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)  # R460+ bindings
            kind = f.value(remote_type, h, link) if remote_type is not None else None
            is_switch = kind is not None and int(kind) == switch_type
            info.remote_pci.append(pci)
            info.remote_switch.append(is_switch)
        info.count = len(info.remote_pci)
        speed = self._field(h, getattr(nv, "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", None)) if info.count else None
        info.speed_bytes = speed * 1e6 if speed else None
        return info

    def discover(self, uuid: str, h: Any) -> int:
        """Learn the GPU's NVLinks once; returns how many it has (0: no NVLink)."""
        with self._lock:
            info = self._nvlinks.get(uuid)
        if info is None:
            info = self._discover(uuid, h)
            with self._lock:
                self._nvlinks[uuid] = info
        return info.count

    def nvlink_states(self, uuid: str, h: Any) -> Optional[list[bool]]:
        """Active flag of each NVLink of the GPU, one nvmlDeviceGetNvLinkState call per
        link; None when it has no NVLink. (The collector reads the states in its batched
        field-value call where the driver has NVML_FI_DEV_NVLINK_GET_STATE.)"""
        count = self.discover(uuid, h)
        if not count:
            return None
        nv, f = self._nv, self._f
        return [bool(f.value(nv.nvmlDeviceGetNvLinkState, h, link, default=False)) for link in range(count)]

    def nvlink_count(self, uuid: str) -> int:
        info = self._nvlinks.get(uuid)
        return info.count if info else 0

    # ------------------------------------------------------------------ PCIe
    def _ancestor(self, a: tuple[DeviceIdentity, Any], b: tuple[DeviceIdentity, Any]) -> Optional[str]:
        key = frozenset((a[0].uuid, b[0].uuid))
        with self._lock:
            if key in self._ancestors:
                return self._ancestors[key]
        nv = self._nv
        got = self._f.attempt(nv.nvmlDeviceGetTopologyCommonAncestor, a[1], b[1])
        if got.status == LOST:
            return None  # not cached: ask again once the GPU is back
        kind = ancestor_type(nv, int(got.value)) if got.ok else None
        with self._lock:
            self._ancestors[key] = kind
        return kind

    # ------------------------------------------------------------------ links
    def links(self, gpus: Sequence[tuple[DeviceIdentity, Any]],
              states: dict[str, list[bool]]) -> dict[str, tuple[Link, ...]]:
        """Links of every GPU in ``gpus`` (readable, top-level GPUs of this cycle)."""
        by_pci = {g[0].pci_address: g[0].uuid for g in gpus}
        out: dict[str, list[Link]] = {g[0].uuid: [] for g in gpus}
        switch: dict[str, tuple[int, int, Optional[float]]] = {}  # uuid -> (links, active, speed)
        for ident, _h in gpus:
            info = self._nvlinks.get(ident.uuid)
            st = states.get(ident.uuid)
            if not info or not info.count or st is None:
                continue
            per_peer: dict[str, list[bool]] = {}
            sw_links = sw_active = 0
            for link in range(info.count):
                active = st[link] if link < len(st) else False
                if info.remote_switch[link]:
                    sw_links += 1
                    sw_active += active
                    continue
                peer = by_pci.get(info.remote_pci[link])
                if peer is None:
                    # remote PCI not a GPU we know: an NVSwitch on drivers without the
                    # remote device type call, or a GPU that is gone
                    if info.remote_pci[link] is not None and info.remote_pci[link] not in by_pci:
                        sw_links += 1
                        sw_active += active
                    continue
                per_peer.setdefault(peer, []).append(active)
            for peer, flags in per_peer.items():
                out[ident.uuid].append(Link(
                    peer=peer, type="nvlink", lanes=len(flags),
                    bandwidth_bytes_per_second=(sum(flags) * info.speed_bytes) if info.speed_bytes else None,
                    state=_state(flags)))
            if sw_links:
                switch[ident.uuid] = (sw_links, sw_active, info.speed_bytes)
        for uuid, (n, up, speed) in switch.items():
            for peer, (pn, pup, _ps) in switch.items():
                if peer == uuid:
                    continue
                bw = min(up, pup) * speed if speed else None
                flags = [True] * min(up, pup) + [False] * (min(n, pn) - min(up, pup))
                out[uuid].append(Link(peer=peer, type="nvswitch", lanes=n, bandwidth_bytes_per_second=bw,
                                      state=_state(flags)))
        for i, a in enumerate(gpus):
            for b in gpus[i + 1:]:
                kind = self._ancestor(a, b)
                if kind is None:
                    continue
                out[a[0].uuid].append(Link(peer=b[0].uuid, type=kind))
                out[b[0].uuid].append(Link(peer=a[0].uuid, type=kind))
        return {u: tuple(v) for u, v in out.items()}


def _state(flags: list[bool]) -> str:
    if flags and all(flags):
        return "up"
    if any(flags):
        return "degraded"
    return "down"
