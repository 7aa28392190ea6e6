"""``key : value`` blocks, read by structure (the per-device detail outputs of the vendor
tools: their ``info``, ``-q`` and ``-t`` reports).

- Blocks: a blank line ends one (``blank_separates``), and a line that ``block_start``
  matches (``Card 0``) starts one and is its ``header`` (repeated blocks per chip or card).
- Sections: a key with no value (``Physical Memory Usage :``), or a bare line followed by
  deeper-indented ``key : value`` lines (``PCI``), opens a section for the lines indented
  under it; an entry's ``path`` is its sections and its key.
- Continuations: a line that is not a new key belongs to the value above it. That is a line
  with no ``key :`` start at all (``80C98000`` under ``Error Code``), or any line indented
  deeper than a key that has a value (``  node type=HBMC, time: 12:00:01`` under ``Error
  Information``). Tools print such multi-line health and error fields on real nodes; a
  continuation joins its value with a newline.

Keys are normalized (lower case, single spaces); values are kept as printed, stripped.
Only contract.ParseError escapes (a first line that is no key, an over-long line, sections
nested deeper than MAX_DEPTH).

Time and memory are linear in the text: the line pattern cannot backtrack over a long value,
the next non-blank line is found from a table built once, continuation lines are joined once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Pattern, Sequence

from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.sdk.tables import lines_of

MAX_LINE = 4096
MAX_DEPTH = 32  # nested sections; the tools nest 3 deep (a deeper text would make every path long)
# a key starts with a letter and holds no '=' ',' ';' ':' (those are in continuation text); the
# value is everything after the blanks that follow the colon, stripped by the caller (a lazy
# value followed by a trailing-blank test would try every split of a long blank run)
KV = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z][^:=,;]{0,80}?)\s*:(?:\s+(?P<value>.*))?$")
_BARE = re.compile(r"^\s*[A-Za-z][\w .()/%+-]{0,60}$")


def norm_key(key: str) -> str:
    return re.sub(r"\s+", " ", key.strip()).lower()


@dataclass(frozen=True)
class Entry:
    path: tuple[str, ...]  # sections, then the key (normalized)
    value: str
    line: int
    indent: int

    @property
    def key(self) -> str:
        return self.path[-1]


@dataclass(frozen=True)
class Block:
    entries: tuple[Entry, ...]
    header: Optional[str] = None  # the block_start line that opened it
    line: int = 0

    def first(self, *keys: str) -> Optional[Entry]:
        """The first entry whose key is one of ``keys`` (normalized), in printing order."""
        for e in self.entries:
            if e.key in keys:
                return e
        return None

    def get(self, *keys: str) -> Optional[str]:
        e = self.first(*keys)
        return None if e is None else e.value

    def as_dict(self) -> dict[str, str]:
        """key -> value of the keys that have one, the first occurrence winning."""
        out: dict[str, str] = {}
        for e in self.entries:
            if e.value != "" or e.key not in out:
                out.setdefault(e.key, e.value)
        return {k: v for k, v in out.items()}

    def paths(self) -> dict[str, str]:
        """``section/sub/key`` -> value, in printing order, the first occurrence winning."""
        out: dict[str, str] = {}
        for e in self.entries:
            if e.value != "":
                out.setdefault("/".join(e.path), e.value)
        return out


@dataclass
class _Open:
    entries: list = field(default_factory=list)
    header: Optional[str] = None
    line: int = 0


def key_of(line: str) -> Optional[str]:
    """The normalized key of a ``key : value`` line, else None (detectors use it)."""
    m = KV.match(line)
    return norm_key(m.group("key")) if m else None


def _next_nonblank(lines: Sequence[str]) -> list[int]:
    """For each line, the index of the first non-blank line after it (len(lines) if none)."""
    out = [len(lines)] * len(lines)
    nxt = len(lines)
    for i in range(len(lines) - 1, -1, -1):
        out[i] = nxt
        if lines[i].strip():
            nxt = i
    return out


def read_blocks(text: str, tool: str, *, blank_separates: bool = True,
                block_start: Optional[Pattern[str]] = None) -> list[Block]:
    """The blocks of ``text`` (see the module docstring); empty blocks are dropped."""
    raw_lines = lines_of(text.expandtabs(8), tool)  # at most sdk.tables.MAX_LINES lines
    following: Optional[list[int]] = None  # built at the first bare line
    blocks: list[_Open] = [_Open()]
    sections: list[tuple[int, str]] = []  # (indent, name)
    last: Optional[list] = None  # [path, value parts, line, indent] of the entry above, while open
    for i, raw in enumerate(raw_lines):
        lineno = i + 1
        if len(raw) > MAX_LINE:
            raise ParseError(tool, f"a line of {len(raw)} characters; {tool} prints short lines", lineno)
        if not raw.strip():
            if blank_separates and blocks[-1].entries:
                blocks.append(_Open())
                sections = []
            last = None
            continue
        if block_start is not None and block_start.match(raw):
            if blocks[-1].entries or blocks[-1].header is not None:
                blocks.append(_Open())
            blocks[-1].header, blocks[-1].line = raw.strip(), lineno
            sections, last = [], None
            continue
        indent = len(raw) - len(raw.lstrip())
        m = KV.match(raw)
        if last is not None and last[1] and indent > last[3]:
            last[1].append(raw.strip())  # deeper than a key with a value: its continuation
            continue
        if m is None:
            if following is None:
                following = _next_nonblank(raw_lines)
            j = following[i]
            nxt = raw_lines[j] if j < len(raw_lines) else ""
            nxt_indent = len(nxt) - len(nxt.lstrip())
            # a section title: deeper-indented keys (or a deeper title: ECC / DDR / ...) follow
            if _BARE.match(raw) and nxt_indent > indent and (KV.match(nxt) or _BARE.match(nxt)):
                _open_section(sections, indent, norm_key(raw), tool, lineno)  # a bare title ("PCI")
                last = None
                continue
            if last is not None:
                last[1].append(raw.strip())  # the value (or the first line of an empty one)
                continue
            raise ParseError(tool, f"not a 'key : value' line: {raw.strip()[:60]!r}", lineno)
        while sections and sections[-1][0] >= indent:
            sections.pop()
        key, value = norm_key(m.group("key")), (m.group("value") or "").strip()
        path = tuple(s for _, s in sections) + (key,)
        last = [path, [value] if value else [], lineno, indent]
        blocks[-1].entries.append(last)
        if value == "":
            _open_section(sections, indent, key, tool, lineno)
    out = []
    for b in blocks:
        if b.entries or b.header is not None:
            out.append(Block(tuple(Entry(p, "\n".join(v), ln, ind) for p, v, ln, ind in b.entries), b.header,
                             b.line or (b.entries[0][2] if b.entries else 0)))
    return out


def _open_section(sections: list[tuple[int, str]], indent: int, name: str, tool: str, lineno: int) -> None:
    while sections and sections[-1][0] >= indent:
        sections.pop()
    if len(sections) >= MAX_DEPTH:
        raise ParseError(tool, f"sections nested more than {MAX_DEPTH} deep; {tool} nests a few", lineno)
    sections.append((indent, name))


def merged(blocks: Sequence[Block]) -> Mapping[str, str]:
    """Every block's keys in one map (the first occurrence winning)."""
    out: dict[str, str] = {}
    for b in blocks:
        for k, v in b.as_dict().items():
            out.setdefault(k, v)
    return out
