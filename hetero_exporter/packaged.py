"""The packaged YAML tables, parsed ahead of time: the agent reads them without PyYAML.

Every start reads YAML the package ships (the vendors' fault, kernel-log and profile tables, the
health policy, the simulated scenarios). PyYAML costs 1.7 MiB of resident memory once imported
(BENCHMARKS.md "The agent's footprint"), so ``collectors/generate.py`` writes ``tables.jsonl``
beside this module: one line per distinct packaged file, ``<sha256 of its text>\\t<its path in
the checkout>\\t<its parse as compact JSON>``. ``parsed`` answers by the text's digest alone, so it
is a cache of the YAML parse and nothing else: a table edited since the bundle was written (or a
user's file) misses and is parsed as YAML, giving the same answer the bundle would have given.
The generator parses with ``validate``'s strict loader and refuses a table whose parse JSON
cannot carry exactly (a date, a key that is not a string), so a hit is the parse itself.

This module imports nothing of the project, so every layer may use it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Optional

BUNDLE = Path(__file__).with_name("tables.jsonl")


class NotCarried(ValueError):
    """A table whose parse JSON cannot carry exactly (the generator's error, naming the file)."""


def digest(text: str) -> str:
    """The key of ``text`` in the bundle: the sha256 of its UTF-8 bytes, in hex."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def parsed(text: str, bundle: Path = BUNDLE) -> Optional[tuple[Any]]:
    """``(the parse,)`` of ``text`` when the bundle holds a file with exactly this text (a new
    object each call: callers may change it), else None (no bundle, or not a packaged table)."""
    key = digest(text) + "\t"
    try:
        with open(bundle, encoding="utf-8") as f:
            for line in f:
                if line.startswith(key):
                    return (json.loads(line.split("\t", 2)[2]),)
    except OSError:
        return None  # an install without the bundle: YAML parses it
    return None


def bundle_text(tables: Iterable[tuple[str, str, Any]]) -> str:
    """The bundle's text for ``(path in the checkout, text, its parse)`` of each packaged file,
    in the order given; a text seen before is written once. NotCarried when a parse would not
    come back from JSON equal, of the same types."""
    lines: list[str] = []
    seen: set[str] = set()
    for path, text, doc in tables:
        key = digest(text)
        if key in seen:
            continue
        seen.add(key)
        try:
            encoded = json.dumps(doc, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise NotCarried(f"{path}: its parse cannot be written as JSON ({e})") from None
        if not _same(json.loads(encoded), doc):
            raise NotCarried(f"{path}: its parse does not come back from JSON as it was (a key that is not a string?)")
        if "\t" in path or "\n" in path:
            raise NotCarried(f"{path!r}: a tab or a newline in the path")
        lines.append(f"{key}\t{path}\t{encoded}\n")
    return "".join(lines)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True for ``==`` alone)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)
