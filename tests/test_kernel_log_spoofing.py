"""Issue 25, item 9: kernel-log spoofing.

- A user-space ``logger`` line quoting an Xid, in a mixed syslog file (or written into /dev/kmsg
  with a user facility), failed a GPU: only the kernel's records count.
- A ``GPU at PCI:... : GPU-uuid`` line mapping GPU 1's address to GPU 0's uuid made GPU 0 fail
  for GPU 1's Xid: what the collectors report at an address is never overridden by the log.
"""

from __future__ import annotations

from hetero_exporter.sources import kernel_log as kl
from hetero_exporter.sdk.kmsg import parse_lines
from hetero_exporter.simulate.kernel_log import RingBuffer
from test_kernel_log import GPU0, GPU1, XID79, follower, snapshot

SYSLOG_KERNEL = "Dec  1 10:00:00 gpu-node-7 kernel: " + XID79
SYSLOG_LOGGER = "Dec  1 10:00:01 gpu-node-7 mallory[4242]: " + XID79
SYSLOG_ROOT = "Dec  1 10:00:02 gpu-node-7 root: " + XID79


def test_only_the_kernels_syslog_lines_are_faults():
    events, _ = parse_lines([SYSLOG_LOGGER, SYSLOG_ROOT, "2026-12-01T10:00:03+00:00 gpu-node-7 evil: " + XID79])
    assert events == []
    events, _ = parse_lines([SYSLOG_KERNEL])
    assert [e.code for e in events] == ["79"]


def test_a_kmsg_record_of_a_user_facility_is_no_fault(tmp_path):
    ring = RingBuffer()
    ring.append(XID79, priority=(1 << 3) | 4)  # user.warning: `logger --kmsg` or a write to /dev/kmsg
    ring.append("NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.", priority=4)  # kern.warning
    f = follower(ring, tmp_path)
    f.drain()
    assert [(p.event.code, p.event.pci_address) for p in f.take()] == [("79", "0000:18:00.0")]


def test_an_address_to_uuid_line_never_overrides_the_collectors_device(tmp_path):
    ring = RingBuffer()
    ring.append(f"NVRM: GPU at PCI:0000:28:00: {GPU0}")  # claims GPU 1's address is GPU 0
    ring.append(XID79)  # on 0000:28:00: GPU 1's
    f = follower(ring, tmp_path)
    f.drain()
    snap = kl.KernelLogFaults(f)(snapshot(100.0))
    faulted = {d.identity.uuid for d in snap.devices if any(x.source == "kmsg" for x in d.faults)}
    assert faulted == {GPU1}
