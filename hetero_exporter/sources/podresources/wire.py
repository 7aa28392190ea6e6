"""Protobuf wire decoding of the PodResources v1 ``ListPodResourcesResponse`` (api.proto).

The agent reads only this one message, so it decodes the wire format itself rather than
loading the protobuf runtime: field numbers below are those of api.proto in this folder.
Unknown fields are skipped (a newer kubelet may add some); malformed bytes raise WireError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

Value = Union[int, bytes]  # a field's value: varints are ints, every other wire type bytes


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


@dataclass
class ClaimResource:
    driver_name: str = ""
    pool_name: str = ""
    device_name: str = ""


@dataclass
class DynamicResource:
    claim_name: str = ""
    claim_namespace: str = ""
    claim_resources: list[ClaimResource] = field(default_factory=list)


@dataclass
class ContainerDevices:
    resource_name: str = ""
    device_ids: list[str] = field(default_factory=list)


@dataclass
class ContainerResources:
    name: str = ""
    devices: list[ContainerDevices] = field(default_factory=list)
    dynamic_resources: list[DynamicResource] = field(default_factory=list)


@dataclass
class PodResources:
    name: str = ""
    namespace: str = ""
    containers: list[ContainerResources] = field(default_factory=list)


@dataclass
class ListPodResourcesResponse:
    pod_resources: list[PodResources] = field(default_factory=list)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 64 bits")


def fields(buf: bytes) -> Iterator[tuple[int, int, Value]]:
    """(field number, wire type, value) of each field; length-delimited values are bytes."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wtype = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        value: Value
        if wtype == 0:
            value, pos = _varint(buf, pos)
        elif wtype == 1:
            if pos + 8 > end:
                raise WireError("truncated fixed64")
            value, pos = buf[pos:pos + 8], pos + 8
        elif wtype == 2:
            n, pos = _varint(buf, pos)
            if pos + n > end:
                raise WireError("length-delimited field runs past the message")
            value, pos = buf[pos:pos + n], pos + n
        elif wtype == 5:
            if pos + 4 > end:
                raise WireError("truncated fixed32")
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise WireError(f"unsupported wire type {wtype}")
        yield number, wtype, value


def _payload(value: Value) -> bytes:
    """A length-delimited field's bytes (what ``fields`` gives for wire type 2)."""
    if not isinstance(value, bytes):
        raise WireError("a message or string field with a varint wire type")
    return value


def _text(value: Value, wtype: int) -> str:
    if wtype != 2:
        raise WireError("string field with a non-length wire type")
    try:
        return _payload(value).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("string field is not UTF-8") from None


def _claim(buf: bytes) -> ClaimResource:
    c = ClaimResource()
    for n, wt, v in fields(buf):
        if n == 2:
            c.driver_name = _text(v, wt)
        elif n == 3:
            c.pool_name = _text(v, wt)
        elif n == 4:
            c.device_name = _text(v, wt)
    return c


def _dynamic(buf: bytes) -> DynamicResource:
    d = DynamicResource()
    for n, wt, v in fields(buf):
        if n == 2:
            d.claim_name = _text(v, wt)
        elif n == 3:
            d.claim_namespace = _text(v, wt)
        elif n == 4 and wt == 2:
            d.claim_resources.append(_claim(_payload(v)))
    return d


def _devices(buf: bytes) -> ContainerDevices:
    d = ContainerDevices()
    for n, wt, v in fields(buf):
        if n == 1:
            d.resource_name = _text(v, wt)
        elif n == 2:
            d.device_ids.append(_text(v, wt))
    return d


def _container(buf: bytes) -> ContainerResources:
    c = ContainerResources()
    for n, wt, v in fields(buf):
        if n == 1:
            c.name = _text(v, wt)
        elif n == 2 and wt == 2:
            c.devices.append(_devices(_payload(v)))
        elif n == 5 and wt == 2:
            c.dynamic_resources.append(_dynamic(_payload(v)))
    return c


def _pod(buf: bytes) -> PodResources:
    p = PodResources()
    for n, wt, v in fields(buf):
        if n == 1:
            p.name = _text(v, wt)
        elif n == 2:
            p.namespace = _text(v, wt)
        elif n == 3 and wt == 2:
            p.containers.append(_container(_payload(v)))
    return p


def decode_list_response(buf: bytes) -> ListPodResourcesResponse:
    """``ListPodResourcesResponse`` from its serialized bytes."""
    resp = ListPodResourcesResponse()
    for n, wt, v in fields(bytes(buf)):
        if n == 1 and wt == 2:
            resp.pod_resources.append(_pod(_payload(v)))
    return resp
