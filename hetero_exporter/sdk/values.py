"""Value parsing shared by the CLI parsers: the NA spellings and numbers with units.

Vendor tools print a missing value as ``N/A``, ``NA``, ``-``, ``--``, ``[N/A]``, ``Not
Supported``... and a quantity as ``81559 MiB``, ``300.00 W``, ``1980 MHz``, ``45 C``, ``12 %``.
``number`` and ``quantity`` turn them into floats in base units (bytes, watts, hertz, celsius,
ratios) or None for NA; anything else raises ``ValueError`` with the text, which parsers turn
into a ParseError naming the tool, field and line. ``integer`` reads an index, pid or count
(ASCII digits, at most ``MAX_DIGITS``: ``int()`` of a 4,300-digit string raises a ValueError of
its own, and ``str.isdigit`` passes digits ``int()`` refuses, such as ``²``).
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Optional

NA = frozenset({"", "n/a", "na", "-", "--", "[n/a]", "not supported", "[not supported]", "unknown",
                "none", "null", "not available", "[unknown error]", "unavailable", "unsupported"})

MAX_DIGITS = 20  # 2**64 has 20 digits: any index, pid or count a tool prints
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")

# unit (lower case) -> factor to the base unit
UNITS: Mapping[str, float] = {
    # memory: vendors print binary multiples with either spelling ("MiB" by some tools, "MB" by others)
    "b": 1.0, "byte": 1.0, "bytes": 1.0,
    "kib": 1024.0, "kb": 1024.0, "k": 1024.0,
    "mib": 1024.0 ** 2, "mb": 1024.0 ** 2, "m": 1024.0 ** 2,
    "gib": 1024.0 ** 3, "gb": 1024.0 ** 3, "g": 1024.0 ** 3,
    "tib": 1024.0 ** 4, "tb": 1024.0 ** 4,
    # power, frequency, temperature, ratio
    "w": 1.0, "mw": 1e-3, "kw": 1e3,
    "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9,
    "c": 1.0, "°c": 1.0, "degc": 1.0, "celsius": 1.0,
    "%": 0.01,
    "j": 1.0, "mj": 1e-3, "kj": 1e3, "uj": 1e-6, "µj": 1e-6,
}


def is_na(text: Optional[str]) -> bool:
    """True for every spelling of 'no value' (case-insensitive, surrounding space ignored)."""
    return text is None or text.strip().lower() in NA


def _leading(text: str, *, anywhere: bool) -> tuple[float, str]:
    """The first number of ``text`` (at its start unless ``anywhere``) and what follows it."""
    m = (_NUMBER.search if anywhere else _NUMBER.match)(text)
    if m is None:
        raise ValueError(f"expected a number or N/A, got {text[:40]!r}")
    v = float(m.group(0))
    if not math.isfinite(v):
        raise ValueError(f"expected a finite number, got {text[:40]!r}")
    return v, text[m.end():]


def number(text: Optional[str]) -> Optional[float]:
    """The number ``text`` holds (leading and trailing unit words ignored), None for NA.
    Raises ValueError for text with no number, or a non-finite one."""
    if is_na(text):
        return None
    return _leading(str(text).strip(), anywhere=True)[0]


def quantity(text: Optional[str], default_unit: str = "", units: Mapping[str, float] = UNITS) -> Optional[float]:
    """``81559 MiB`` -> bytes, ``300.00 W`` -> watts, ``1980 MHz`` -> hertz, ``12 %`` -> 0.12;
    ``default_unit`` applies when the text has no unit. None for NA; ValueError otherwise
    (an unknown unit included)."""
    if is_na(text):
        return None
    t = str(text).strip()
    v, rest = _leading(t, anywhere=False)
    unit = rest.strip().lower() or default_unit.lower()
    if not unit:
        return v
    factor = units.get(unit)
    if factor is None:
        raise ValueError(f"unknown unit {unit!r} in {t[:40]!r}")
    return v * factor


def ratio(text: Optional[str]) -> Optional[float]:
    """A percentage (``45 %``, ``45``) as a ratio 0..1; None for NA."""
    v = number(text)
    return None if v is None else v / 100.0


def integer(text: Optional[str], limit: int = MAX_DIGITS) -> Optional[int]:
    """The non-negative integer ``text`` writes in ASCII digits (blanks around it ignored);
    None for anything else: NA, a sign, a fraction, other digits, more than ``limit`` digits."""
    t = text.strip() if isinstance(text, str) else ""
    if not 0 < len(t) <= limit or not t.isascii() or not t.isdigit():
        return None
    return int(t)
