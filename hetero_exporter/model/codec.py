"""The model's JSON codec (schema version 1) and its compact form (the node annotation).

The codec walks the dataclass type hints of ``model.types``, so adding a field to a class is all
it takes to carry it in JSON; names that differ in JSON are listed in ``_JSON_NAMES``. Decoding
rejects unknown major schema versions and malformed documents with ``SchemaError`` naming the
path of the offending value.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import math
import types
import typing
from typing import Any, Callable, Mapping

from hetero_exporter.model.types import (
    Fault,
    NodeSnapshot,
    SCHEMA_VERSION,
    SchemaError,
)

_JSON_NAMES: dict[tuple[type, str], str] = {(Fault, "fault_class"): "class"}


def _json_name(cls: type, name: str) -> str:
    return _JSON_NAMES.get((cls, name), name)


def to_dict(obj: Any) -> Any:
    """Plain JSON-able structure of a model object (no schema envelope)."""
    return _encode(obj, True)


def _encode(obj: Any, nulls: bool) -> Any:
    """``to_dict``; without ``nulls``, an object's null members are left out (list items stay)."""
    t = type(obj)
    if t is str or t is int or t is bool or obj is None:
        return obj
    if t is float:
        if obj - obj != 0.0:  # inf or nan
            raise ValueError("non-finite float in model; unsupported values must be absent")
        return obj
    if t is tuple or t is list:
        return [_encode(x, nulls) for x in obj]
    if t is dict:
        return {str(k): _encode(v, nulls) for k, v in obj.items() if nulls or v is not None}
    names = _FIELDS.get(t)
    if names is None:
        if not dataclasses.is_dataclass(obj):
            if isinstance(obj, (tuple, list)):
                return [_encode(x, nulls) for x in obj]
            if isinstance(obj, collections.abc.Mapping):
                return {str(k): _encode(v, nulls) for k, v in obj.items() if nulls or v is not None}
            if isinstance(obj, float) and not math.isfinite(obj):
                raise ValueError("non-finite float in model; unsupported values must be absent")
            return obj
        names = _field_names(t)
    if nulls:
        return {key: _encode(getattr(obj, name), True) for key, name in names}
    return {key: _encode(v, False) for key, name in names if (v := getattr(obj, name)) is not None}


# (JSON name, attribute) of each dataclass's fields, in order: the encoder runs on every
# reconcile and /snapshot request, and dataclasses.fields() plus typing's isinstance were
# three quarters of its time
_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}


def _field_names(cls: type) -> tuple[tuple[str, str], ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple((_json_name(cls, f.name), f.name) for f in dataclasses.fields(cls))
    return names


def _sparse_except(obj: Any, left_out: frozenset[str]) -> dict[str, Any]:
    """``to_dict`` of a dataclass without the fields named in ``left_out`` (never encoded) and
    without null members at any depth (the annotation's form)."""
    return {key: _encode(v, False) for key, name in _field_names(type(obj))
            if name not in left_out and (v := getattr(obj, name)) is not None}


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _fail(path: str, msg: str) -> SchemaError:
    return SchemaError(f"{path or '$'}: {msg}")


def _decode(tp: Any, data: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if data is None:
            if type(None) in args:
                return None
            raise _fail(path, "must not be null")
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], data, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise _fail(path, f"expected an object, got {type(data).__name__}")
        kwargs = {}
        hints = _hints(tp)
        for f in dataclasses.fields(tp):
            key = _json_name(tp, f.name)
            if key in data:
                kwargs[f.name] = _decode(hints[f.name], data[key], f"{path}.{key}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _fail(path, f"missing required field {key!r}")
        return tp(**kwargs)
    if origin is tuple:
        if not isinstance(data, list):
            raise _fail(path, f"expected a list, got {type(data).__name__}")
        return tuple(_decode(args[0], x, f"{path}[{i}]") for i, x in enumerate(data))
    if origin in (dict, collections.abc.Mapping) or tp in (dict, Mapping):
        if not isinstance(data, dict):
            raise _fail(path, f"expected an object, got {type(data).__name__}")
        vt = args[1] if args else Any
        return {str(k): _decode(vt, v, f"{path}.{k}") for k, v in data.items()}
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise _fail(path, f"expected a number, got {data!r:.60}")
        try:
            value = float(data)
        except OverflowError:
            raise _fail(path, "number out of range") from None
        if not math.isfinite(value):
            raise _fail(path, "expected a finite number")
        return value
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise _fail(path, f"expected an integer, got {data!r:.60}")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise _fail(path, f"expected true or false, got {data!r:.60}")
        return data
    if tp is str:
        if not isinstance(data, str):
            raise _fail(path, f"expected a string, got {data!r:.60}")
        return data
    return data


class _Invalid(Exception):
    """Raised inside a compiled decoder; the path-tracking decoder then explains where."""


_COMPILED: dict[Any, Callable[[Any], Any]] = {}


def _compiled(tp: Any) -> Callable[[Any], Any]:
    """A decoder for ``tp`` without path bookkeeping (the scheduler decodes thousands of
    annotations): it accepts exactly what ``_decode`` accepts and raises _Invalid on
    anything else, so that ``_decode`` can be rerun to name the offending path."""
    found = _COMPILED.get(tp)
    if found is not None:
        return found
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    fn: Callable[[Any], Any]
    if origin in (typing.Union, types.UnionType):
        inner_tp = [a for a in args if a is not type(None)][0]
        nullable = type(None) in args
        inner = _compiled(inner_tp)

        def fn(d: Any) -> Any:
            if d is None:
                if nullable:
                    return None
                raise _Invalid
            return inner(d)
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        plan = [(_json_name(tp, f.name), f.name, hints[f.name],
                 f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                for f in dataclasses.fields(tp)]
        _COMPILED[tp] = lambda d: compiled_fields(d)  # placeholder for recursive types
        steps = [(key, name, _compiled(hint), required) for key, name, hint, required in plan]

        def compiled_fields(d: Any, cls: type = tp) -> Any:
            if type(d) is not dict:
                raise _Invalid
            kwargs = {}
            for key, name, dec, required in steps:
                if key in d:
                    kwargs[name] = dec(d[key])
                elif required:
                    raise _Invalid
            return cls(**kwargs)
        fn = compiled_fields
    elif origin is tuple:
        item = _compiled(args[0])

        def fn(d: Any) -> Any:
            if type(d) is not list:
                raise _Invalid
            return tuple([item(x) for x in d])
    elif origin in (dict, collections.abc.Mapping) or tp in (dict, Mapping):
        value = _compiled(args[1]) if args else (lambda v: v)

        def fn(d: Any) -> Any:
            if type(d) is not dict:
                raise _Invalid
            return {str(k): value(v) for k, v in d.items()}
    elif tp is float:
        def fn(d: Any) -> Any:
            t = type(d)
            if t is float:
                if d - d != 0.0:  # inf or nan
                    raise _Invalid
                return d
            if t is int:
                try:
                    return float(d)
                except OverflowError:
                    raise _Invalid from None
            raise _Invalid
    elif tp in (int, bool, str):
        def fn(d: Any, t: type = tp) -> Any:
            if type(d) is not t:
                raise _Invalid
            return d
    else:
        def fn(d: Any) -> Any:
            return d
    _COMPILED[tp] = fn
    return fn


def from_dict(cls: type, data: Any, path: str = "") -> Any:
    """Decode a plain structure into ``cls``; raises SchemaError on malformed input."""
    try:
        return _compiled(cls)(data)
    except (_Invalid, TypeError, ValueError):
        return _decode(cls, data, path)  # raises SchemaError naming the path


def snapshot_to_json(snapshot: NodeSnapshot, *, indent: int | None = None, compact: bool = False) -> str:
    """The schema-1 document of DESIGN.md (``inspect --json``, annotation, scorer input)."""
    doc = {"schema": SCHEMA_VERSION, **to_dict(snapshot)}
    if compact:
        return json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
    return json.dumps(doc, indent=indent, sort_keys=True, allow_nan=False)


def check_schema(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise SchemaError(f"$: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("schema")
    if version is None:
        raise SchemaError("$.schema: missing; this is not a hetero-exporter document")
    if isinstance(version, bool) or not isinstance(version, (int, float)):
        raise SchemaError(f"$.schema: expected a number, got {version!r:.40}")
    if int(version) != SCHEMA_VERSION:
        raise SchemaError(
            f"$.schema: version {version} is not supported (this build reads major version "
            f"{SCHEMA_VERSION}); upgrade hetero-exporter to read it")


def snapshot_from_json(text: str | bytes) -> NodeSnapshot:
    """Decode a schema-1 document; SchemaError on bad JSON, unknown versions, bad fields."""
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"$: not valid JSON: {e}") from None
    except RecursionError:  # the decoder's own depth check: a document nests ~15 deep
        raise SchemaError("$: nested deeper than the JSON decoder's recursion limit; not a snapshot") from None
    return snapshot_from_doc(doc)


def snapshot_from_doc(doc: Any) -> NodeSnapshot:
    check_schema(doc)
    body = {k: v for k, v in doc.items() if k != "schema"}
    return from_dict(NodeSnapshot, body, "$")


# --------------------------------------------------------------------------- compact form

# Readings kept in the node annotation: what a scheduler needs, nothing per-process.
COMPACT_READINGS = ("utilization_ratio", "memory_used_bytes", "memory_total_bytes",
                    "memory_free_bytes", "temperature_core_celsius", "power_watts")


def compact_document(snapshot: NodeSnapshot) -> dict:
    """The annotation form of a snapshot (DESIGN.md): the schema-1 document with processes
    and per-field quality left out; identity, profile, health, faults, links, free memory,
    utilization and driver versions kept. ``snapshot_from_doc`` reads it back."""
    # what is left out is never encoded: the health loop fingerprints this document each cycle,
    # and the readings' quality and the processes were nine tenths of the encoding. Null members
    # are left out too: every nullable field defaults to null when decoded, and an 8-GPU link
    # matrix is mostly nulls (half the annotation before this)
    doc = {"schema": SCHEMA_VERSION, **_sparse_except(snapshot, _COMPACT_SNAPSHOT_LEFT_OUT)}
    for c in doc.get("collectors", []):
        c.pop("errors_total", None)
    doc["devices"] = []
    for dev in snapshot.devices:
        d = _sparse_except(dev, _COMPACT_DEVICE_LEFT_OUT)
        doc["devices"].append(d)
        d["processes"] = []
        kept = {}
        for name in COMPACT_READINGS:
            r = dev.readings.get(name)
            if r is not None and r.value is not None and r.quality.status == "ok":
                kept[name] = {"value": r.value}
        used, total = dev.value("memory_used_bytes"), dev.value("memory_total_bytes")
        if "memory_free_bytes" not in kept and used is not None and total is not None:
            kept["memory_free_bytes"] = {"value": max(0.0, total - used)}
        d["readings"] = kept
        for f in d.get("faults", []):
            f.pop("source", None)
    return doc


# boot_id and attribution_sources: agent internals that would churn the annotation; energy:
# per-container joules grow every cycle (/metrics' business, not the scheduler's)
_COMPACT_SNAPSHOT_LEFT_OUT = frozenset({"devices", "boot_id", "attribution_sources", "energy"})
# allocations change with every pod start; reported_health: the verdict (health) is what the
# scheduler reads; readings and processes are replaced by what the annotation keeps of them
_COMPACT_DEVICE_LEFT_OUT = frozenset({"readings", "processes", "allocations", "reported_health"})


def compact_json(snapshot: NodeSnapshot) -> str:
    return json.dumps(compact_document(snapshot), separators=(",", ":"), sort_keys=True, allow_nan=False)
