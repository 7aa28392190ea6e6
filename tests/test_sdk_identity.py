"""sdk.identity: a device keeps the uuid it was first seen with while it is lost."""

from __future__ import annotations

from hetero_exporter.model import DeviceIdentity
from hetero_exporter.sdk.identity import IdentityMemory


def _ident(index: int, uuid: str, pci: str | None, parent: str | None = None) -> DeviceIdentity:
    return DeviceIdentity(vendor="v", kind="gpu", index=index, uuid=uuid, model="m", pci_address=pci, parent=parent)


def test_recall_by_pci_address_in_any_spelling_then_by_index():
    mem = IdentityMemory()
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    mem.remember(_ident(1, "U1", "0000:2a:00.0"))
    assert mem.recall(pci_address="00000000:2A:00.0").uuid == "U1"
    assert mem.recall(index=0).uuid == "U0"
    # PCI address wins over index: indexes renumber when a device is lost
    assert mem.recall(index=0, pci_address="0000:2a:00.0").uuid == "U1"
    assert mem.recall(index=7) is None and mem.recall(pci_address="0000:99:00.0") is None


def test_missing_lists_pinned_top_level_devices_absent_now():
    mem = IdentityMemory()
    for i in range(3):
        mem.remember(_ident(i, f"U{i}", f"0000:1{i}:00.0"))
    mem.remember(_ident(0, "MIG-child", None, parent="U0"))
    assert [d.uuid for d in mem.missing(["U0", "U2"])] == ["U1"]
    assert mem.missing(["U0", "U1", "U2"]) == []


def test_children_are_not_indexed_over_their_parent():
    mem = IdentityMemory()
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    mem.remember(_ident(0, "child", "0000:18:00.0", parent="U0"))
    assert mem.recall(index=0).uuid == "U0"
    assert mem.recall(pci_address="0000:18:00.0").uuid == "U0"


def test_a_new_uuid_at_a_pinned_pci_address_replaces_the_old_one():
    mem = IdentityMemory()
    mem.remember(_ident(0, "placeholder-pci-0000:18:00.0", "0000:18:00.0"))
    mem.remember(_ident(0, "U0", "0000:18:00.0"))
    assert mem.recall(pci_address="0000:18:00.0").uuid == "U0"
    assert mem.missing(["U0"]) == []  # the placeholder is not reported lost


# --------------------------------------------------------------------------- resolve (issue 37: mx-smi's and
# mthreads-gmi's identity resolution, once)

def _resolve(mem, devices, listed, calls):
    from hetero_exporter.sdk.identity import resolve

    def listing():
        calls.append(1)
        return listed

    return resolve(mem, devices, lambda d: (d[0], d[1]), listing, lambda x: (x[0], x[1]), lambda x: bool(x[2]),
                   lambda d, x, before: _ident(d[0], (x[2] if x is not None and x[2] else before) or f"pci-{d[1]}", d[1]))


def test_resolve_asks_the_listing_once_for_the_new_devices_only():
    mem, calls = IdentityMemory(), []
    got = _resolve(mem, [(0, "0000:18:00.0"), (1, "0000:28:00.0")],
                   [(5, "0000:28:00.0", "GPU-b"), (0, "0000:18:00.0", "GPU-a")], calls)
    assert {i: d.uuid for i, d in got.items()} == {0: "GPU-a", 1: "GPU-b"} and calls == [1]  # by address
    for d in got.values():
        mem.remember(d)
    again = _resolve(mem, [(3, "0000:28:00.0")], [], calls)  # renumbered: the pinned id, its index updated
    assert again[3].uuid == "GPU-b" and again[3].index == 3 and calls == [1]


def test_resolve_by_index_without_addresses_and_the_earlier_uuid_without_an_id(tmp_path):
    path = str(tmp_path / "ids.json")
    IdentityMemory(path, boot_id="b").remember(_ident(0, "GPU-old", "0000:18:00.0"))
    mem, calls = IdentityMemory(path, boot_id="b"), []  # restored: not pinned by this process
    got = _resolve(mem, [(0, "0000:18:00.0"), (1, None)], [(0, "0000:18:00.0", ""), (1, None, "GPU-c")], calls)
    assert got[0].uuid == "GPU-old"  # the listing printed no id for it: the one it had
    assert got[1].uuid == "GPU-c" and calls == [1]
    failed = _resolve(IdentityMemory(), [(0, "0000:18:00.0")], [], [])  # the call failed: make() decides
    assert failed[0].uuid == "pci-0000:18:00.0"
