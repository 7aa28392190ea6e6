"""ExtenderArgs of node-cache mode off the wire with no Python per node name (issue 39).

kube-scheduler sends /filter every node name for every pod (the same ~150 KB at 5,000 nodes,
each time) and /prioritize the names that passed. ``split`` decodes the top-level object only,
each value left as its JSON text (msgspec.Raw); ``NamesCache`` maps the text of a NodeNames
array to one decoded list, handed out again for the same bytes: a byte compare instead of
decoding, type-checking and hashing thousands of names, and the same list object, whose rows
the node table keeps by identity (columns.Rows). /filter puts the names it passed under the
bytes it answered them as, which are those kube-scheduler sends back to /prioritize.

The caller decodes the other values through ``jsonsafe`` and takes the whole-body path for
anything this one does not (a refused value, a NodeNames that is not a list of strings, no
msgspec), so answers and refusals are those of the whole-body path.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Optional

try:
    import msgspec
except ModuleNotFoundError:  # pragma: no cover - the extender extra is not installed
    msgspec = None  # type: ignore[assignment]

ENTRIES = 16  # name lists kept
MAX_BYTES = 32 << 20  # estimated bytes of the lists kept (text + list; the names are shared with requests)
PER_NAME = 72  # estimated bytes a name costs besides its text: its str object and the list's pointer

_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw]) if msgspec is not None else None
_NAMES = msgspec.json.Decoder(list[str]) if msgspec is not None else None


def split(body: bytes) -> Optional[dict[str, bytes]]:
    """The top-level JSON object of ``body``, each value as its JSON text; None if it is not
    an object, msgspec refuses it, or msgspec is not installed (the caller decodes it whole)."""
    if _TOP is None:
        return None
    try:
        top = _TOP.decode(body)
    except (msgspec.MsgspecError, RecursionError, UnicodeError):
        return None
    return {k: bytes(v) for k, v in top.items()}


@dataclass(frozen=True)
class NameList:
    """A decoded NodeNames array (never changed once made), its longest name (or a bound on it)
    and its total characters (the /explain ring's estimate)."""

    names: list[str]
    longest: int
    chars: int


class NamesCache:
    """JSON text of a NodeNames array -> its NameList; least recently used out past ``entries``
    lists or ``max_bytes`` (estimated). Thread-safe."""

    def __init__(self, entries: int = ENTRIES, max_bytes: int = MAX_BYTES):
        self.entries, self.max_bytes = entries, max_bytes
        self.bytes = 0
        self._lists: "collections.OrderedDict[bytes, tuple[NameList, int]]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lists)

    def get(self, text: bytes) -> Optional[NameList]:
        """The list ``text`` encodes, decoded once; None if it is not an array of strings."""
        with self._lock:
            got = self._lists.get(text)
            if got is not None:
                self._lists.move_to_end(text)
                return got[0]
        if _NAMES is None:
            return None
        try:
            names = _NAMES.decode(text)
        except (msgspec.MsgspecError, RecursionError, UnicodeError):
            return None
        return self.put(text, names)

    def put(self, text: bytes, names: list[str], longest: Optional[int] = None) -> NameList:
        """Keep ``names`` (never changed after) as what ``text`` decodes to. ``longest``: a
        bound on its longest name already known (a subset of a NameList: that list's)."""
        if longest is None:
            longest = max(map(len, names), default=0)
        listed = NameList(names, longest, len("".join(names)))
        cost = len(text) + PER_NAME * len(names)
        if cost > self.max_bytes // 4:  # a huge list is not worth the memory: decoded each time
            return listed
        with self._lock:
            old = self._lists.pop(text, None)
            if old is not None:
                self.bytes -= old[1]
            self._lists[text] = (listed, cost)
            self.bytes += cost
            while len(self._lists) > self.entries or self.bytes > self.max_bytes:
                _, (_, dropped) = self._lists.popitem(last=False)
                self.bytes -= dropped
        return listed
