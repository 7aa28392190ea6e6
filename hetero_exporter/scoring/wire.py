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
from typing import Generic, Optional, TypeVar

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


V = TypeVar("V")


class _Kept(Generic[V]):
    """JSON text -> what it was decoded to, least recently used first out. Thread-safe."""

    def __init__(self, entries: int, max_bytes: int):
        self.entries, self.max_bytes = entries, max_bytes
        self._lists: "collections.OrderedDict[bytes, V]" = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lists)

    def _kept(self, text: bytes) -> Optional[V]:
        with self._lock:
            got = self._lists.get(text)
            if got is not None:
                self._lists.move_to_end(text)
            return got


class NamesCache(_Kept[tuple[NameList, int]]):
    """JSON text of a NodeNames array -> its NameList; least recently used out past ``entries``
    lists or ``max_bytes`` (estimated)."""

    def __init__(self, entries: int = ENTRIES, max_bytes: int = MAX_BYTES):
        super().__init__(entries, max_bytes)
        self.bytes = 0

    def get(self, text: bytes) -> Optional[NameList]:
        """The list ``text`` encodes, decoded once; None if it is not an array of strings."""
        got = self._kept(text)
        if got is not None:
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


VALUES_KEPT = 64  # top-level values kept by their text (a pod's /filter and /prioritize send one Pod)
VALUE_BYTES = 16 << 10  # ... if at most this long (a pod's spec is ~1-3 KB)


@dataclass
class Decoded:
    """A top-level value decoded from its JSON text (shared: never changed) and what the
    extender read of it (the Pod's Request or its refusal; None until read)."""

    value: object
    read: Optional[tuple] = None


class ValueCache(_Kept[Decoded]):
    """JSON text of a request's top-level value -> ``Decoded``, least recently used out past
    ``entries`` (values longer than ``max_bytes`` are not kept): kube-scheduler sends a pod's
    /filter and /prioritize the same Pod bytes, which are then decoded and read once."""

    def __init__(self, entries: int = VALUES_KEPT, max_bytes: int = VALUE_BYTES):
        super().__init__(entries, max_bytes)

    def get(self, text: bytes) -> Optional[Decoded]:
        return self._kept(text)

    def put(self, text: bytes, value: object) -> Decoded:
        """``value`` (decoded from ``text``) kept if ``text`` is short enough."""
        got = Decoded(value)
        if len(text) <= self.max_bytes:
            with self._lock:
                self._lists[text] = got
                while len(self._lists) > self.entries:
                    self._lists.popitem(last=False)
        return got
