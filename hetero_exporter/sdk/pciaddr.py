"""One PCI-address normalizer for every vendor's spelling.

Tools print a device's address as ``00000000:3B:00.0`` (an 8-digit domain),
``0000:3b:00.0`` (sysfs and most tools), ``3b:00.0`` (no domain), ``PCI:0000:3b:00`` (kernel log,
no function) or with surrounding spaces. The model's form is ``0000:3b:00.0``: a 4-digit
domain (the low 16 bits: Linux domains fit them), lower case, function included.
"""

from __future__ import annotations

import re
from typing import Optional

_PCI = re.compile(r"(?:PCI:)?(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?")


def normalize(text: Optional[str], *, default_function: Optional[int] = 0) -> Optional[str]:
    """``0000:3b:00.0`` for any accepted spelling; None for anything else (NA, garbage).

    ``default_function``: the function assumed when the text has none (kernel-log ``PCI:``
    addresses omit it); None makes an address without a function unacceptable."""
    if not text:
        return None
    m = _PCI.fullmatch(text.strip())
    if m is None:
        return None
    fn = m.group(4)
    if fn is None:
        if default_function is None:
            return None
        fn = str(default_function)
    domain = int(m.group(1), 16) & 0xFFFF if m.group(1) else 0
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{fn}"


def bus_key(text: Optional[str]) -> Optional[str]:
    """``0000:3b:00`` (no function): how two spellings of one device compare when one of
    them omits the function."""
    full = normalize(text)
    return full.rsplit(".", 1)[0] if full else None
