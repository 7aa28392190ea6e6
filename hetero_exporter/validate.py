"""One validation layer for what comes from outside: flags, the config file, scenario files.

Each helper checks one value at a ``path`` (``interval``, ``collectors.nvml.enabled``,
``devices[0].count``, ``--interval``) and returns it converted, or raises ValidationError,
whose message is one line: ``FIELD: what is wrong; allowed: ...``. Nothing is coerced from a
string: ``enabled: "false"`` (as Helm's ``quote`` writes it) is refused, not read as true.
This module imports only the floor's smallfile and packaged, so every layer may use it.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar, Union

from hetero_exporter import packaged, smallfile
from hetero_exporter.errors import InputError

T = TypeVar("T")

_SHOWN = 60  # characters of a refused value quoted in a message


class ValidationError(InputError):
    """A value that cannot be used. ``field`` is its path ("" when ``problem`` names it),
    ``source`` the file it came from, if any; str() is the one-line message."""

    def __init__(self, field: str, problem: str = "", allowed: Union[None, str, Iterable[Any]] = None,
                 source: str = ""):
        self.field, self.problem, self.source = field, problem, source
        self.allowed = allowed if allowed is None or isinstance(allowed, str) else ", ".join(map(str, allowed))
        super().__init__(self.line())

    def line(self) -> str:
        text = ": ".join(p for p in (self.source, self.field, self.problem) if p)
        text = f"{text}; allowed: {self.allowed}" if self.allowed else text
        return re.sub(r"\s*[\r\n]+\s*", " ", text)  # one line, whatever a wrapped message (a YAML error) held

    def rebased(self, cls: type, source: str = "") -> "ValidationError":
        """The same error as ``cls`` (a subclass), from ``source``."""
        return cls(self.field, self.problem, self.allowed, source or self.source)


def describe(value: Any) -> str:
    """A value as a message quotes it: its type in words, then the value, shortened."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        text = value if len(value) <= _SHOWN else value[:_SHOWN] + "..."
        return "the string " + json.dumps(text, ensure_ascii=False)
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, Mapping):
        return f"a mapping of {len(value)} key(s)"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    return f"a {type(value).__name__}"


def join(path: str, key: Any) -> str:
    """``path.key`` (``key`` alone at the top)."""
    return f"{path}.{key}" if path else str(key)


def _bound(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(v)


def number(path: str, value: Any, *, minimum: Optional[float] = None, maximum: Optional[float] = None,
           integer: bool = False, unit: str = "") -> Any:
    """A finite number (an int when ``integer``) within [minimum, maximum]."""
    what = "an integer" if integer else "a number"
    if minimum is not None and maximum is not None:
        limits = f" from {_bound(minimum)} to {_bound(maximum)}"
    else:
        limits = f" >= {_bound(minimum)}" if minimum is not None else f" <= {_bound(maximum)}" if maximum is not None else ""
    allowed = f"{what}{limits}{' ' + unit if unit else ''}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(path, f"expected {what}, got {describe(value)}", allowed)
    if isinstance(value, int) and not -1e300 < value < 1e300:  # YAML integers have no size limit
        raise ValidationError(path, f"out of range: an integer of {value.bit_length()} bits", allowed)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(path, f"expected a finite number, got {value!r}", allowed)
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ValidationError(path, f"expected an integer, got {value!r}", allowed)
        value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValidationError(path, f"out of range: {value!r}", allowed)
    return value if integer else float(value)


def boolean(path: str, value: Any) -> bool:
    """true or false, never a string that looks like one."""
    if not isinstance(value, bool):
        raise ValidationError(path, f"expected a boolean, got {describe(value)}", "true, false (unquoted)")
    return value


def string(path: str, value: Any, *, choices: Optional[Iterable[str]] = None, pattern: Optional[str] = None,
           max_length: int = 4096, non_empty: bool = False) -> str:
    """A string: one of ``choices``, or matching ``pattern`` (whole), at most ``max_length``."""
    if not isinstance(value, str):
        allowed = ", ".join(choices) if choices is not None else "a string"
        raise ValidationError(path, f"expected a string, got {describe(value)}", allowed)
    if choices is not None:
        choices = tuple(choices)
        if value not in choices:
            raise ValidationError(path, f"not one of the choices: {describe(value)}", choices)
    if non_empty and not value.strip():
        raise ValidationError(path, "must not be empty", "a non-empty string")
    if len(value) > max_length:
        raise ValidationError(path, f"{len(value)} characters long", f"at most {max_length}")
    if pattern is not None and not re.fullmatch(pattern, value):
        raise ValidationError(path, f"malformed: {describe(value)}", f"matching {pattern}")
    return value


def mapping(path: str, value: Any, allowed: Optional[Iterable[str]] = None, *, max_items: int = 4096,
            extra_prefix: Optional[str] = None) -> dict:
    """A mapping with string keys, each in ``allowed`` (None: any); keys starting with
    ``extra_prefix`` (YAML anchor holders such as ``x-base``) are accepted and left out."""
    if not isinstance(value, Mapping):
        raise ValidationError(path, f"expected a mapping, got {describe(value)}", "a mapping (key: value)")
    if len(value) > max_items:
        raise ValidationError(path, f"{len(value)} keys", f"at most {max_items}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise ValidationError(path, f"key {bad[0]!r} is not a string", "string keys")
    out = {k: v for k, v in value.items() if not (extra_prefix and k.startswith(extra_prefix))}
    if allowed is not None:
        allowed = sorted(allowed)
        unknown = sorted(set(out) - set(allowed))
        if unknown:
            raise ValidationError(path, f"unknown keys {unknown}", allowed or "no keys")
    return out


def list_of(path: str, value: Any, item: Callable[[str, Any], T], *, max_items: int,
            min_items: int = 0) -> list[T]:
    """A list of at most ``max_items``, each checked by ``item(path[i], value)``."""
    if not isinstance(value, list):
        raise ValidationError(path, f"expected a list, got {describe(value)}", "a list")
    if not min_items <= len(value) <= max_items:
        raise ValidationError(path, f"{len(value)} items", f"{min_items} to {max_items} items")
    return [item(f"{path}[{i}]", v) for i, v in enumerate(value)]


def optional(doc: Mapping[str, Any], path: str, key: str, check: Callable[..., T], default: Any = None,
             **kw: Any) -> Any:
    """``check(path.key, doc[key], **kw)``, or ``default`` when the key is absent or null."""
    v = doc.get(key)
    return default if v is None else check(join(path, key), v, **kw)


def plain(path: str, value: Any, *, max_items: int = 10000, max_depth: int = 12) -> Any:
    """JSON-like data (mappings with string keys, lists, strings, finite numbers, booleans,
    null) of at most ``max_items`` values in all, nested at most ``max_depth``: free-form
    settings passed on to code that reads its own keys. YAML aliases count each time they are
    met, so an alias bomb is refused instead of expanded."""
    budget = [max_items]

    def walk(p: str, v: Any, depth: int) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise ValidationError(path, f"more than {max_items} values", f"at most {max_items} values")
        if depth > max_depth:
            raise ValidationError(p, f"nested deeper than {max_depth}", f"at most {max_depth} levels")
        if isinstance(v, Mapping):
            for k, x in mapping(p, v, max_items=max_items).items():
                walk(join(p, k), x, depth + 1)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(f"{p}[{i}]", x, depth + 1)
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValidationError(p, f"expected a finite number, got {v!r}", "finite numbers")
        elif v is not None and not isinstance(v, (str, int, float, bool)):
            raise ValidationError(p, f"unsupported value: {describe(v)}",
                                  "mappings, lists, strings, numbers, booleans, null")

    walk(path, value, 0)
    return value


DNS_SUBDOMAIN = r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?"


def dns_subdomain(path: str, value: Any) -> str:
    """A lower-case DNS subdomain (an annotation domain, model.keys.DEFAULT_DOMAIN by default)."""
    return string(path, value, pattern=DNS_SUBDOMAIN, max_length=253)


def host_port(path: str, value: Any) -> str:
    """``HOST:PORT``, ``:PORT`` or ``[v6]:PORT``, port 0..65535."""
    text = string(path, value, max_length=300)
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535 or any(c.isspace() for c in host):
        raise ValidationError(path, f"not HOST:PORT: {describe(text)}", "HOST:PORT, :PORT or [v6]:PORT")
    return text


def read_text(path: str, limit: int, what: str) -> str:
    """The UTF-8 text of the regular file ``path``, refused when over ``limit`` bytes (read at
    most ``limit`` + 1, so a huge file never fills memory) or when it is a FIFO, a device or a
    directory (``smallfile.read_regular``: a FIFO never hangs the start). OSError propagates."""
    try:
        data = smallfile.read_regular(path, limit)
    except ValueError as e:
        if str(e).startswith("over "):
            raise ValidationError("", f"{what} {path} is over the limit of {limit} bytes",
                                  f"at most {limit >> 10} KiB") from None
        raise ValidationError("", f"{what} {path} is {e}", "a regular file") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValidationError("", f"{what} {path} is not UTF-8 text (byte {e.start})", "UTF-8 text") from None


# --------------------------------------------------------------------------- YAML


class NotYaml(ValueError):
    """Text that is not YAML, or YAML with a duplicate key (str(): PyYAML's message, with its line,
    on one line)."""


@functools.lru_cache(maxsize=1)
def _strict_loader() -> type:
    """SafeLoader that refuses duplicate keys (yaml.v2's UnmarshalStrict does): the second of two
    equal keys silently winning is how a config ends up meaning what nobody wrote. Built at the
    first YAML that is not a packaged table: a plain run never imports PyYAML (packaged.py)."""
    import yaml

    def no_duplicates(loader: Any, node: Any, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *anchor": keys it brings in may be overridden by the mapping's own
            key = loader.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(None, None, "a key is not a plain value", key_node.start_mark)
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, no_duplicates)
    return StrictLoader


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")  # YAML's strict loader then names it, with its line
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity: not JSON's; YAML reads them as it always did


def _finite(text: str) -> float:
    got = float(text)
    if not math.isfinite(got):
        raise ValueError(text)  # 1e400: YAML reads it as a string, and says so
    return got


def load_yaml(text: str) -> Any:
    """YAML of a config, web config, scenario file or packaged table; NotYaml on bad YAML or a
    duplicate key (ValueError: an integer too long to convert). A packaged table's text is
    answered from packaged.parsed; a JSON object (as the tests and benchmarks write configs) by
    the json module, which reads it as YAML would but for numbers with an exponent (JSON's,
    which YAML 1.1 reads as strings) and escaped characters outside the BMP (which PyYAML
    refuses); anything else parses with PyYAML."""
    known = packaged.parsed(text)
    if known is not None:
        return known[0]
    if text.lstrip()[:1] == "{":
        try:
            return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant,
                              parse_float=_finite)
        except (ValueError, RecursionError):
            pass  # not JSON, or JSON that only YAML reads: YAML says what is wrong, as before
    return parse_yaml(text)


def parse_yaml(text: str) -> Any:
    """``text`` parsed by PyYAML's safe loader, refusing duplicate keys (NotYaml)."""
    import yaml
    try:
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise NotYaml(" ".join(str(e).split())) from None
