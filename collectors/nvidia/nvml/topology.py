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

from hetero_exporter.model import DeviceIdentity, Link


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def normalize_bus_id(bus_id: Any) -> str:
    """NVML's '00000000:18:00.0' -> '0000:18:00.0' (lower case, 4-digit domain)."""
    s = _text(bus_id).strip().lower()
    domain, _, rest = s.partition(":")
    if rest and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}:{rest}" if rest else s


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
    def __init__(self, nv: Any):
        self._nv = nv
        self._nvlinks: dict[str, _NvLinks] = {}
        self._ancestors: dict[frozenset, Optional[str]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ NVLink
    def _field(self, h: Any, fid: Optional[int]) -> Optional[float]:
        nv = self._nv
        if fid is None:
            return None
        try:
            v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
        except nv.NVMLError as e:
            if isinstance(e, nv.NVMLError_GpuIsLost):
                raise
            return None
        if v.nvmlReturn != nv.NVML_SUCCESS:
            return None
        return float(v.value.uiVal)

    def _discover(self, uuid: str, h: Any) -> _NvLinks:
        nv = self._nv
        info = _NvLinks()
        count = self._field(h, getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", None))
        limit = int(count) if count is not None else int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
        switch_type = getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        for link in range(limit):
            try:
                nv.nvmlDeviceGetNvLinkState(h, link)
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
                if count is None:
                    break  # probing: first link NVML does not know ends the list
                info.remote_pci.append(None)
                info.remote_switch.append(False)
                continue
            pci = None
            try:
                pci = normalize_bus_id(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
            except nv.NVMLError as e:
                if isinstance(e, nv.NVMLError_GpuIsLost):
                    raise
            is_switch = False
            try:
                is_switch = int(nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)) == switch_type
            except (nv.NVMLError, AttributeError) as e:
                if isinstance(e, nv.NVMLError_GpuIsLost):
                    raise
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
        nv = self._nv
        states = []
        for link in range(count):
            try:
                states.append(bool(nv.nvmlDeviceGetNvLinkState(h, link)))
            except nv.NVMLError as e:
                if isinstance(e, nv.NVMLError_GpuIsLost):
                    raise
                states.append(False)
        return states

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
        try:
            kind = ancestor_type(nv, int(nv.nvmlDeviceGetTopologyCommonAncestor(a[1], b[1])))
        except nv.NVMLError as e:
            if isinstance(e, nv.NVMLError_GpuIsLost):
                return None  # not cached: ask again once the GPU is back
            kind = None
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
        for uuid, (n, active, speed) in switch.items():
            for peer, (pn, pactive, _ps) in switch.items():
                if peer == uuid:
                    continue
                bw = min(active, pactive) * speed if speed else None
                flags = [True] * min(active, pactive) + [False] * (min(n, pn) - min(active, pactive))
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
