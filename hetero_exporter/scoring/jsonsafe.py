"""Bounded JSON decoding of what comes from outside: extender request bodies, pod request
annotations and node device annotations.

``loads`` is ``json.loads`` that refuses, with one ``JSONRefused`` (a ValueError) whose message
says what is wrong: text that is not UTF-8 JSON, nesting deeper than ``max_depth`` (measured
before decoding, so the decoder never recurses that deep: no RecursionError), ``NaN`` /
``Infinity`` (also a number too large for a float, like ``1e999``), and integers longer than
Python converts (``sys.get_int_max_str_digits()``, 4300 digits by default).

With msgspec installed (the extender extra) text is decoded by it first: it refuses NaN,
Infinity and numbers out of range itself, keeps integers exact and stops at its own recursion
limit; the depth limit is then checked on the decoded tree (containers only, level by level).
Anything msgspec refuses, or a tree too deep, goes through the checked path above, so the
answer and the reason are the same with or without it (msgspec refuses a few texts json takes,
like a lone surrogate escape: those decode as json decodes them).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any, Optional

try:
    import msgspec
except ModuleNotFoundError:  # pragma: no cover - the extender extra is not installed
    msgspec = None  # type: ignore[assignment]

MAX_DEPTH = 64  # Kubernetes objects and our schema-1 documents nest ~15 deep

# Brackets outside strings, all of one kind: the structure whose depth is measured.
_SKELETON = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKET = bytes(set(range(256)) - set(b"[]{}"))
_RUN = re.compile(rb"\(+|\)+")
_WALK_BELOW = 16  # walk what is left once under 1 in 16 of its brackets is an innermost pair


class JSONRefused(ValueError):
    """The text is not JSON we accept (the message says why, without the text itself)."""


def _outside_strings(data: bytes) -> bytes:
    """The brackets of UTF-8 JSON ``data`` that are not inside a string, as ``(`` and ``)``
    (a byte of a multi-byte UTF-8 character is never a quote, backslash or bracket)."""
    # escapes first: an escaped backslash, then an escaped quote (neither ends a string)
    unescaped = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(unescaped.split(b'"')[::2])  # even pieces lie between strings
    return outside.translate(_SKELETON, _NOT_BRACKET)


def nesting_over(data: bytes, limit: int) -> bool:
    """Whether some point of the UTF-8 JSON ``data`` lies inside more than ``limit`` open arrays/objects.

    All in C but the last step: the innermost pairs are removed round by round (each round
    peels one level off every subtree) while that removes a good share, then what is left is
    walked run by run of like brackets, which are then few. Each round removes at least 2 in
    ``_WALK_BELOW`` of what is left and the walk sees at most 2 runs per innermost pair, so
    the cost is linear. An unmatched close ends the walk (a decoder stops there); unmatched
    opens count as open: an upper bound is what matters."""
    skeleton = _outside_strings(data)
    if b"(" * (limit + 1) in skeleton:
        return True
    peeled = 0
    while peeled + len(skeleton) > limit:
        pairs = skeleton.count(b"()")
        if pairs == 0 or pairs * _WALK_BELOW < len(skeleton):
            break
        skeleton, peeled = skeleton.replace(b"()", b""), peeled + 1
    if peeled + len(skeleton) <= limit:  # fewer brackets left than levels allowed
        return False
    depth = deepest = 0
    for run in _RUN.finditer(skeleton):
        start, end = run.span()
        if skeleton[start] == 40:  # "("
            depth += end - start
            deepest = max(deepest, depth)
        else:
            depth -= end - start
            if depth < 0:
                break
    return peeled + deepest > limit


def _refuse_constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONRefused(f"number {text[:40]} is too large")
    return value


_DECODER = msgspec.json.Decoder() if msgspec is not None else None
_CONTAINERS = frozenset((dict, list))


def depth_within(doc: Any, limit: int) -> bool:
    """Whether a decoded JSON tree nests at most ``limit`` arrays/objects deep."""
    level = [doc] if type(doc) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return False
        inner: list[Any] = []
        for node in level:
            values = node.values() if type(node) is dict else node
            if not _CONTAINERS.isdisjoint(map(type, values)):  # in C: most values are scalars
                inner.extend(v for v in values if type(v) in _CONTAINERS)
        level = inner
    return True


def loads(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Decode ``data`` (str, or UTF-8 bytes); ``JSONRefused`` on anything refused."""
    if _DECODER is not None:
        try:
            doc = _DECODER.decode(data)
        except (msgspec.MsgspecError, RecursionError, UnicodeError):
            pass  # the checked path says why, or takes what json takes and msgspec does not
        else:
            if depth_within(doc, max_depth):
                return doc
    return checked_loads(data, max_depth=max_depth)


def checked_loads(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``loads`` by the standard json module alone: the depth measured on the text first."""
    if isinstance(data, str):
        text, raw = data, data.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JSONRefused(f"not UTF-8 at byte {e.start}") from None
    if nesting_over(raw, max_depth):
        raise JSONRefused(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except JSONRefused:
        raise
    except json.JSONDecodeError as e:
        raise JSONRefused(str(e)) from None
    except ValueError as e:  # int() of a number of more digits than sys.get_int_max_str_digits()
        if "digits" in str(e):
            raise JSONRefused(f"a number has more than {sys.get_int_max_str_digits()} digits") from None
        raise JSONRefused(str(e)[:200]) from None


_ENCODER = msgspec.json.Encoder() if msgspec is not None else None


def encode(doc: Any) -> Optional[bytes]:
    """``dumps`` by msgspec alone: None where it does not write ``doc`` (see ``dumps``) or is
    not installed. Answers assembled from pieces encode each piece so, and the whole by
    ``dumps`` if one is None: the bytes are then those ``dumps`` gives of the whole."""
    if _ENCODER is None:
        return None
    try:
        return _ENCODER.encode(doc)
    except (TypeError, OverflowError, UnicodeEncodeError):
        return None


def dumps(doc: Any) -> bytes:
    """Compact JSON bytes of ``doc`` (an answer built from decoded requests: str keys, finite
    numbers). msgspec when installed: the /filter answer of body mode echoes every passing Node,
    ~4x faster than json.dumps; non-ASCII is written as UTF-8 rather than escaped, both valid JSON.
    A value msgspec will not write (an int beyond 64 bits, a lone surrogate such as "\\udc00",
    which a request's \\u escape can carry and UTF-8 cannot hold) is written by json, escaped."""
    got = encode(doc)
    if got is not None:
        return got
    return json.dumps(doc, separators=(",", ":")).encode()
