"""Value parsing shared by the CLI parsers: the NA spellings and numbers with units.

Vendor tools print a missing value as ``N/A``, ``NA``, ``-``, ``--``, ``[N/A]``, ``Not
Supported``... and a quantity as ``81559 MiB``, ``300.00 W``, ``1980 MHz``, ``45 C``, ``12 %``.
``number`` and ``quantity`` turn them into floats in base units (bytes, watts, hertz, celsius,
ratios) or None for NA; anything else raises ``ValueError`` with the text, which parsers turn
into a ParseError naming the tool, field and line. ``integer`` reads an index, pid or count
(ASCII digits, at most ``MAX_DIGITS``: ``int()`` of a 4,300-digit string raises a ValueError of
its own, and ``str.isdigit`` passes digits ``int()`` refuses, such as ``²``).

The ``checked_*`` readers are what a parser calls on a cell: the value in base units, None for
NA, or a ParseError naming the tool, the field and the line (the one exception a parser lets
escape); ``present`` is a text field (None for NA), ``decoded`` a binding's string.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, Optional

from hetero_exporter.sdk import pciaddr
from hetero_exporter.sdk.contract import ParseError

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
    "c": 1.0, "°c": 1.0, "℃": 1.0, "degc": 1.0, "celsius": 1.0,
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


def present(text: object) -> Optional[str]:
    """A text field (a name, serial, state; a binding's bytes as UTF-8) stripped; None for None
    and NA."""
    if text is None:
        return None
    got = decoded(text).strip()
    return None if is_na(got) else got


def decoded(value: object) -> str:
    """A binding's string: bytes as UTF-8 (a bad byte replaced, never an exception), else ``str``."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def checked_number(text: Optional[str], tool: str, what: str, line: Optional[int] = None) -> Optional[float]:
    """A plain number (``12``, ``-3.5``, ``1e3``: no unit, ASCII digits) of a cell; None for NA;
    ParseError otherwise, a non-finite one included."""
    t = "" if text is None else text.strip()
    if is_na(t):
        return None
    if _NUMBER.fullmatch(t) is None:
        raise ParseError(tool, f"{what}: expected a number or NA, got {t[:40]!r}", line)
    v = float(t)
    if not math.isfinite(v):
        raise ParseError(tool, f"{what}: not a finite number: {t[:40]!r}", line)
    return v


def checked_quantity(text: Optional[str], unit: str, tool: str, what: str,
                     line: Optional[int] = None) -> Optional[float]:
    """``quantity(text, unit)`` of a cell; None for NA, also followed by ``unit`` (``N/A %``);
    ParseError for text that is no quantity and for one out of range once in base units
    (``1e308 MiB`` overflows as bytes)."""
    t = "" if text is None else text.strip()
    if unit and t[-len(unit):].lower() == unit.lower() and is_na(t[:-len(unit)]):
        return None
    try:
        v = quantity(text, unit)
    except ValueError as e:
        raise ParseError(tool, f"{what}: {e}", line) from None
    if v is not None and not math.isfinite(v):
        raise ParseError(tool, f"{what}: {str(text).strip()[:20]!r} is out of range", line)
    return v


def checked_index(text: Optional[str], tool: str, what: str, line: Optional[int] = None,
                  digits: int = 6) -> int:
    """A device index, pid or count in ASCII digits (at most ``digits``: an index has a few);
    ParseError for anything else, NA included."""
    got = integer(text, digits)
    if got is None:
        raise ParseError(tool, f"{what}: expected a whole number (a device index, pid or count), got "
                                f"{str(text).strip()[:20]!r}", line)
    return got


def checked_integer(text: Optional[str], tool: str, what: str, line: Optional[int] = None,
                    digits: int = MAX_DIGITS) -> Optional[int]:
    """``checked_index`` of a cell that may be NA (None)."""
    return None if is_na(text) else checked_index(text, tool, what, line, digits)


def checked_pci(text: Optional[str], tool: str, what: str, line: Optional[int] = None, *,
                default_function: Optional[int] = 0) -> Optional[str]:
    """A PCI address in the model's form (sdk.pciaddr); None for NA; ParseError otherwise.
    ``default_function``: as ``pciaddr.normalize`` (None: an address without one is refused)."""
    if text is None or is_na(text):
        return None
    bus = pciaddr.normalize(text, default_function=default_function)
    if bus is None:
        raise ParseError(tool, f"{what}: not a PCI address: {text.strip()[:30]!r}", line)
    return bus


def halves(text: str) -> Optional[tuple[str, str]]:
    """The two texts of ``used / total``; None when the whole is NA; ValueError unless there are
    exactly two. The slash of an NA spelling (``N/A / 350W``, ``93W / [N/A]``) splits nothing."""
    if is_na(text):
        return None
    parts: list[str] = []
    for piece in text.split("/"):
        if parts and not is_na(parts[-1]) and is_na(parts[-1] + "/" + piece):
            parts[-1] += "/" + piece
        else:
            parts.append(piece)
    if len(parts) != 2:
        raise ValueError(f"expected 'USED / TOTAL', got {text.strip()[:40]!r}")
    return parts[0], parts[1]


def unit_after_number(text: str) -> str:
    """The letters after the leading number of ``32768 MB`` (``MB``); "" when there are none or
    the text is no number and letters. Read by index: the number's ``e`` is also a letter, and a
    pattern for both would try each split of a long run of them."""
    n = len(text) - len(text.lstrip("-+0123456789.eE"))
    rest = text[n:].strip()
    return rest if n and _LETTERS.fullmatch(rest) else ""


_LETTERS = re.compile(r"[A-Za-z]+")


def checked_pair(text: str, unit: str, tool: str, what: str, line: Optional[int] = None, *,
                 shared_unit: bool = False) -> tuple[Optional[float], Optional[float]]:
    """``116MiB / 32768MiB``, ``93W / N/A``: (used, total) by ``checked_quantity``, None for an NA
    half (both for an NA whole). ``shared_unit``: the unit printed after the total applies to
    the used value when that prints none (``810 / 65536 MiB``); else ``unit`` does."""
    try:
        got = halves(text)
    except ValueError as e:
        raise ParseError(tool, f"{what}: {e}", line) from None
    if got is None:
        return None, None
    used, total = got
    used_unit = (unit_after_number(total.strip()) or unit) if shared_unit else unit
    return (checked_quantity(used, used_unit, tool, what, line),
            checked_quantity(total, unit, tool, what, line))


@dataclass(frozen=True)
class Cells:
    """The ``checked_*`` readers bound to one tool's name (``CELLS = values.Cells(TOOL)`` in a
    parser module), so a call names only the cell: ``CELLS.quantity(text, "MiB", "Memory", line)``."""

    tool: str

    def number(self, text: Optional[str], what: str, line: Optional[int] = None) -> Optional[float]:
        return checked_number(text, self.tool, what, line)

    def quantity(self, text: Optional[str], unit: str, what: str, line: Optional[int] = None) -> Optional[float]:
        return checked_quantity(text, unit, self.tool, what, line)

    def pair(self, text: str, unit: str, what: str, line: Optional[int] = None, *,
             shared_unit: bool = False) -> tuple[Optional[float], Optional[float]]:
        return checked_pair(text, unit, self.tool, what, line, shared_unit=shared_unit)

    def index(self, text: Optional[str], what: str, line: Optional[int] = None, digits: int = 6) -> int:
        return checked_index(text, self.tool, what, line, digits)

    def integer(self, text: Optional[str], what: str, line: Optional[int] = None,
                digits: int = MAX_DIGITS) -> Optional[int]:
        return checked_integer(text, self.tool, what, line, digits)

    def pci(self, text: Optional[str], what: str, line: Optional[int] = None, *,
            default_function: Optional[int] = 0) -> Optional[str]:
        return checked_pci(text, self.tool, what, line, default_function=default_function)
