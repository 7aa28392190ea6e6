"""``nvidia-smi nvlink -s`` (``--status``): each GPU's NVLinks and the speed each runs at.

Layout: the ``-L`` line of a GPU (``GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)``), then one
indented line per link, ``Link 0: 25 GB/s`` (``26.562 GB/s`` on H100) or ``Link 3: <inactive>``.
nvidia-smi prints the speed NVML gives per link and direction (nvmlDeviceGetFieldValues
``NVML_FI_DEV_NVLINK_SPEED_MBPS_L<n>``, MB/s) in GB/s, decimal: 25 GB/s is an A100 link's four
50 Gbit/s lanes one way.

Readings per GPU (base units: bytes/s, as the catalogue's other rates):

- ``interconnect_nvlink_link_<n>_speed_bytes_per_second``: each link's speed (JSON only);
- ``interconnect_nvlink_speed_bytes_per_second``: the active links together, one direction
  (12 x 25 GB/s = 300 GB/s on an A100); a link down or trained slower lowers it;
- ``interconnect_nvlink_links_active`` / ``_inactive``: the links by state.

Resolution is the step the speed is printed in (``25`` -> 1 GB/s, ``26.562`` -> 1 MB/s).
The GPU's identity is the ``-L`` line's (index, uuid, model); health is not shown:
``unknown``. A link line before any GPU, a speed that is not ``<number> GB/s`` / ``MB/s`` or
``<inactive>``, or a GPU listed twice is a ParseError.
"""

from __future__ import annotations

import re
from typing import Optional

from hetero_exporter import profiles
from hetero_exporter.collectors.nvidia.nvidia_smi.layout_common import VENDOR, snapshot
from hetero_exporter.collectors.nvidia.nvidia_smi.listing import GPU_LINE
from hetero_exporter.model import DeviceIdentity, DeviceSample, Health, NodeSnapshot, Quality, Reading
from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError

TOOL = "nvidia-smi nvlink -s"
LINK_TYPE = "nvlink"
MAX_LINKS = 64  # 18 on H100/B200; a GPU line with more is no real output
_LINK = re.compile(r"^Link\s+(\d{1,3})\s*:\s*(.{1,60})$", re.I)
_SPEED = re.compile(r"^(\d{1,6})(?:\.(\d{1,6}))?\s*([GM])B/s$", re.I)
_INACTIVE = re.compile(r"^<?\s*(inactive|down|disabled)\s*>?$", re.I)


def link_speed_field(link: int, link_type: str = LINK_TYPE) -> str:
    return f"interconnect_{link_type}_link_{link}_speed_bytes_per_second"


SPEED_FIELD = f"interconnect_{LINK_TYPE}_speed_bytes_per_second"
ACTIVE_FIELD, INACTIVE_FIELD = (f"interconnect_{LINK_TYPE}_links_{s}" for s in ("active", "inactive"))


def looks_like(text: str) -> bool:
    """A ``GPU N: ... (UUID: ...)`` line followed by a ``Link N: ...`` line."""
    head = [ln.strip() for ln in text[:4096].splitlines() if ln.strip()][:2]
    return len(head) == 2 and GPU_LINE.match(head[0]) is not None and _LINK.match(head[1]) is not None


def speed(text: str) -> Optional[tuple[float, float]]:
    """``25 GB/s`` -> (25e9, 1e9): bytes/s and the step printed; None for an inactive link;
    ValueError for anything else."""
    t = text.strip()
    if _INACTIVE.match(t):
        return None
    m = _SPEED.match(t)
    if m is None:
        raise ValueError(f"expected '<number> GB/s' or '<inactive>', got {t[:30]!r}")
    scale = 1e9 if m.group(3).upper() == "G" else 1e6
    decimals = len(m.group(2) or "")
    return float(f"{m.group(1)}.{m.group(2) or '0'}") * scale, scale / 10 ** decimals


def _readings(links: dict[int, tuple[Optional[float], float]]) -> dict[str, Reading]:
    r: dict[str, Reading] = {}
    active = [(v, res) for v, res in links.values() if v is not None]
    for n, (v, res) in links.items():
        q = Quality(f"{TOOL}: Link {n}", "measured", None, res)
        r[link_speed_field(n)] = Reading(v, q) if v is not None else Reading(None, q.with_status("unsupported"))
    count = Quality(f"{TOOL}: Link lines", "measured", None, 1.0)
    r[ACTIVE_FIELD] = Reading(float(len(active)), count)
    r[INACTIVE_FIELD] = Reading(float(len(links) - len(active)), count)
    if active:
        r[SPEED_FIELD] = Reading(sum(v for v, _ in active),
                                 Quality(f"{TOOL}: sum of the active links' speeds", "measured", None,
                                         min(res for _, res in active)))
    return r


def parse(text: str) -> NodeSnapshot:
    """One device per GPU, its links' speeds as readings."""
    gpus: list[tuple[DeviceIdentity, dict[int, tuple[Optional[float], float]]]] = []
    seen: set[str] = set()
    for n, s in tables.stripped_lines(text, TOOL):
        g = GPU_LINE.match(s)
        if g is not None:
            name, uuid = g.group(2), g.group(3)
            if uuid in seen:
                raise ParseError(TOOL, f"GPU {uuid[:60]} listed twice", n)
            seen.add(uuid)
            gpus.append((DeviceIdentity(vendor=VENDOR, kind="gpu", index=int(g.group(1)), uuid=uuid,
                                        model=profiles.normalize_model(VENDOR, name), name=name), {}))
            tables.check_devices(len(gpus), TOOL, n)
            continue
        m = _LINK.match(s)
        if m is None:
            raise ParseError(TOOL, f"neither a 'GPU N: ... (UUID: ...)' nor a 'Link N: ...' line: {s[:60]!r}", n)
        if not gpus:
            raise ParseError(TOOL, "a link before any GPU", n)
        links = gpus[-1][1]
        link = int(m.group(1))
        if link in links or len(links) >= MAX_LINKS:
            raise ParseError(TOOL, f"link {link} listed twice, or more than {MAX_LINKS} links", n)
        try:
            got = speed(m.group(2))
        except ValueError as e:
            raise ParseError(TOOL, f"Link {link}: {e}", n) from None
        links[link] = (None, 1.0) if got is None else got
    if not gpus:
        raise ParseError(TOOL, "no GPU line")
    unknown = Health("unknown")
    return snapshot(DeviceSample(identity=ident, timestamp=0.0, readings=_readings(links), health=unknown)
                    for ident, links in gpus)
