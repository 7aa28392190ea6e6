#!/usr/bin/env python3
"""Watch hetero-exporter's local health stream and print each device's state change, one line each.

    python examples/health_stream_client.py --socket /var/run/hetero-exporter/health.sock
    python examples/health_stream_client.py --vendor nvidia --vendor amd     # only these vendors
    python examples/health_stream_client.py --events                         # fault episodes instead

A device plugin, a DRA driver or a node tool does the same: keep each device's last state, act on a
change. The agent sends every device on connect (``full``), then the devices that changed; an update
split to stay under the stream's message size has ``more`` set on all but its last part. On
UNAVAILABLE (the agent restarts) or RESOURCE_EXHAUSTED (too many clients, or this one fell behind)
the client reconnects after a backoff, and gets the full state again. docs/health-stream.md.

Needs grpcio and protobuf (``pip install 'hetero-exporter[all]'``): the messages are the ones the
package generates from ``hetero_exporter/health/act/stream/health_stream.proto``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Iterable, Optional, TextIO

import grpc

from hetero_exporter.health.act.stream import health_stream_pb2 as pb
from hetero_exporter.health.act.stream import health_stream_pb2_grpc as pb_grpc

DEFAULT_SOCKET = "/var/run/hetero-exporter/health.sock"
RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
BACKOFF_MIN, BACKOFF_MAX = 1.0, 30.0  # seconds between reconnects, doubled per failure


def state_name(value: int) -> str:
    """``DEVICE_STATE_FAILED`` -> ``failed``."""
    return pb.DeviceState.Name(value).removeprefix("DEVICE_STATE_").lower()


def device_name(d: pb.DeviceIdentity) -> str:
    return f"{d.vendor} {d.kind} {d.index} ({d.uuid})"


def reasons_text(h: pb.DeviceHealth) -> str:
    return "; ".join(f"{r.code} {r.fault_class}: {r.message}" if r.message else f"{r.code} {r.fault_class}"
                     for r in h.reasons)


class Devices:
    """Each device's last state, from the stream's updates; ``apply`` gives the lines to print."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self._parts: list[pb.DeviceHealthUpdate] = []  # an update split with ``more``, so far

    def apply(self, update: pb.DeviceHealthUpdate) -> list[str]:
        self._parts.append(update)
        if update.more:
            return []  # act on the last part
        parts, self._parts = self._parts, []
        lines: list[str] = []
        seen: set[str] = set()
        for part in parts:
            for h in part.devices:
                seen.add(h.device.uuid)
                lines += self._change(h)
            for gone in part.removed:
                if self.states.pop(gone.uuid, None) is not None:
                    lines.append(f"{device_name(gone)}: removed from the node")
        if update.full:  # every device of the node: forget the ones it does not list
            for uuid in [u for u in self.states if u not in seen]:
                lines.append(f"{uuid}: no longer on the node ({self.states.pop(uuid)})")
        return lines

    def _change(self, h: pb.DeviceHealth) -> list[str]:
        now, before = state_name(h.state), self.states.get(h.device.uuid)
        self.states[h.device.uuid] = now
        if now == before:
            return []  # its reasons or quality changed: not a state change
        why = reasons_text(h)
        return [f"{device_name(h.device)}: {before or 'new'} -> {now}" + (f" ({why})" if why else "")]


def event_line(e: pb.DeviceEvent) -> str:
    kind = pb.DeviceEvent.Kind.Name(e.kind).removeprefix("KIND_").lower()
    return f"{device_name(e.device)}: {kind}{' (open before we connected)' if e.replay else ''}: {e.message}"


def watch(sock: str, vendors: Iterable[str], events: bool, count: Optional[int], out: TextIO) -> int:
    """Print until ``count`` messages were read (None: forever); reconnects on RETRY statuses."""
    devices, read, backoff = Devices(), 0, BACKOFF_MIN
    while count is None or read < count:
        with grpc.insecure_channel(f"unix://{sock}") as channel:
            stub = pb_grpc.HealthStreamStub(channel)
            try:
                if events:
                    call = stub.WatchDeviceEvents(pb.WatchDeviceEventsRequest(vendors=list(vendors)))
                else:
                    call = stub.WatchDeviceHealth(pb.WatchDeviceHealthRequest(vendors=list(vendors)))
                for msg in call:
                    read, backoff = read + 1, BACKOFF_MIN
                    lines = [event_line(msg)] if events else devices.apply(msg)
                    if lines:
                        print(*lines, sep="\n", file=out, flush=True)
                    if count is not None and read >= count:
                        call.cancel()
                        break
            except grpc.RpcError as e:
                if e.code() not in RETRY:
                    print(f"health stream: {e.code().name}: {e.details()}", file=sys.stderr)
                    return 1
                print(f"health stream: {e.code().name}: {e.details()}; again in {backoff:g} s", file=sys.stderr)
                time.sleep(backoff)
                backoff = min(BACKOFF_MAX, backoff * 2)
    return 0


def main(argv: Optional[list[str]] = None, out: TextIO = sys.stdout) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--socket", default=DEFAULT_SOCKET, help=f"the agent's socket (default {DEFAULT_SOCKET})")
    ap.add_argument("--vendor", action="append", default=[], help="only this vendor's devices (repeatable)")
    ap.add_argument("--events", action="store_true", help="fault episodes and recoveries instead of states")
    ap.add_argument("--count", type=int, help="stop after this many messages (default: run until interrupted)")
    args = ap.parse_args(argv)
    sock = args.socket.removeprefix("unix://")
    try:
        return watch(sock, args.vendor, args.events, args.count, out)
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
