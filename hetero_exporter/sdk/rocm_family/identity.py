"""One uuid per device whichever tool of the rocm-smi family (or the vendor's library) reads it.

The library and rocm-smi (and its forks) both print the ASIC's 64-bit unique id read from the
driver (sysfs ``unique_id``): amdsmi as ``amdsmi_get_gpu_asic_info().asic_serial``
(``0x7E8F7E20764E2714``), rocm-smi as ``--showuniqueid`` "Unique ID" (``0x5c88007d760374f3``,
a fork without the ``0x``). ``device_uuid`` turns that value into the model's uuid (16 lower-case
hex digits); where a device has none (older parts, masked captures), the board serial, then the
PCI address, then the KFD GUID, then the index stand in, spelled the same for every tool.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from hetero_exporter.sdk import pciaddr, values


def unique_id(text: Optional[str]) -> Optional[str]:
    """``0x7E8F7E20764E2714`` / ``7100fa8866904061`` -> ``7e8f7e20764e2714``; None for NA, zero
    or anything that is not hexadecimal."""
    if values.is_na(text):
        return None
    s = str(text).strip().lower().removeprefix("0x")
    if not re.fullmatch(r"[0-9a-f]{1,32}", s) or int(s, 16) == 0:
        return None
    return s.zfill(16)


def device_uuid(vendor: str, index: int, unique: Optional[str] = None, serial: Optional[str] = None,
                pci: Optional[str] = None, guid: Optional[str] = None) -> str:
    """The device's uuid: its unique id, else ``<vendor>-<board serial>``, else
    ``<vendor>-pci-<address>``, else ``<vendor>-guid-<KFD GUID>``, else ``<vendor>-card<index>``."""
    uid = unique_id(unique)
    if uid:
        return uid
    if serial and not values.is_na(serial) and serial.strip() != "0" and re.fullmatch(r"[\w\-.]+", serial.strip()):
        return f"{vendor}-{serial.strip()}"
    bus = pciaddr.normalize(pci)
    if bus:
        return f"{vendor}-pci-{bus}"
    if guid and guid.strip().isdigit():
        return f"{vendor}-guid-{guid.strip()}"
    return f"{vendor}-card{index}"


def simulated_unique_id(spec: Any) -> int:
    """The 64-bit unique id a simulated device's fakes print (amdsmi's asic_serial, rocm-smi's
    and hy-smi's Unique ID): the first 16 hex digits of the scenario uuid."""
    digits = re.sub(r"[^0-9a-f]", "", str(spec.uuid).lower())[:16]
    return int(digits or "1", 16) or 1
