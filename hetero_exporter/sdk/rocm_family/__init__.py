"""The rocm-smi family: ``rocm-smi`` and the tools forked from it, which print its formats with
keys of their own (``--json``, the Concise Info table, keyed lines, ``--showpidgpus``,
``--showtopo``). Read (parse.py), turned into the model (devices.py), collected (collector.py)
and simulated (fake.py) once here; the uuid rule its tools share with the vendor's library is
identity.py. A vendor package declares its tool as a ``Member`` (and its fake's card keys as a
``fake.Style``) and stands on these modules: nothing here names a vendor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection

# Options every rocm-smi since ROCm 4 and its forks accept, and what each shows in --json.
FULL_ARGS = ("--showid", "--showproductname", "--showuniqueid", "--showserial", "--showbus", "--showvbios",
             "--showdriverversion", "--showtemp", "--showuse", "--showmemuse", "--showpower", "--showmaxpower",
             "--showclocks", "--showreplaycount", "--showpids", "--showtoponuma", "--showmeminfo", "vram", "--json")
# The set gpustack runs on forks and older rocm-smi: the fallback when the tool rejects an
# option of FULL_ARGS (argparse exits with status 2).
MINIMAL_ARGS = ("-i", "--showmeminfo", "vram", "--showpower", "--showserial", "--showuse", "--showtemp",
                "--showproductname", "--showuniqueid", "--json")
TOPO_ARGS = ("--showtopo", "--json")  # link type, hops and weight of every pair (and NUMA)


@dataclass(frozen=True)
class CardVendor:
    """Whose a card is, by what the tool prints of it: ``names`` a pattern (lower case) of its
    ``Card Vendor`` text; ``device_words`` the word the tool names such devices with instead of
    ``GPU`` (a table's first column, ``DCU use (%)``), when it has one."""

    vendor: str
    kind: str
    names: str
    device_words: tuple[str, ...] = ()


@dataclass(frozen=True)
class Member:
    """One tool of the family as its vendor package declares it: the tool, whose devices it
    reports by default (``vendor``, ``kind``), where it is installed (``search_dirs``, and what
    its absence usually means), and ``cards``: the vendors whose cards it may list, in the order
    their ``Card Vendor`` text is tried (a tool of the family runs on its forks' cards too)."""

    tool: str
    vendor: str
    kind: str
    search_dirs: tuple[str, ...] = ()
    why_missing: str = ""
    cards: tuple[CardVendor, ...] = ()

    def card_vendor(self, vendor_text: str, device_words: Collection[str] = ()) -> CardVendor:
        """The card's vendor: by its ``Card Vendor`` text, else by a word the output names its
        devices with (``device_words``, upper case, as ``DCU`` in ``DCU use (%)``), else this tool's."""
        text = vendor_text.lower()
        for cv in self.cards:
            if re.search(cv.names, text):
                return cv
        for cv in self.cards:
            if any(w in cv.device_words for w in device_words):
                return cv
        return CardVendor(self.vendor, self.kind, "")
