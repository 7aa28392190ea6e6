"""``nvidia-smi topo -m``: the GPU link matrix (sdk.tables.parse_matrix) -> one device per GPU
row with its ``Link``s to the other GPUs.

The header names the columns (``GPU0 ... GPU7 NIC0 ... CPU Affinity NUMA Affinity GPU NUMA
ID``), each ``GPU<n>`` row gives the connection to every column (``X`` on the diagonal), a
``Legend:`` follows. Connection words -> model link types, as NVML's common ancestor is mapped
(nvml/topology.py): ``NV<n>`` -> ``nvlink`` with ``lanes`` n (a bonded set of n NVLinks),
``PIX``/``PXB`` -> ``pcie-switch``, ``PHB`` -> ``pcie-hostbridge``, ``NODE`` -> ``numa``,
``SYS`` (``SOC`` before R384) -> ``cross-numa``; other words (a NIC's, an unknown one) give no
link. NIC rows and columns are not GPUs and are left out.

Captures seen (SOURCES.md): the header underlined with ANSI SGR codes (or their ``[4m``
residue when the ESC byte was lost: stripped first); NIC cells printed without the tab between
them (``PXBNODE``, ``SYSSYS``: rows a word short). So only the GPU columns, which come first,
are read by position; a NIC row is dropped before the matrix is read, and a GPU's NUMA node is
the second word after the connection words (``CPU Affinity``, then ``NUMA Affinity``), a
single number or ``N/A`` (absent). GPUs are named by index only: their uuid is the placeholder
``nvidia-unidentified-<index>`` (layout_common). Health is not shown: ``unknown``.
"""

from __future__ import annotations

import re
from typing import Optional

from hetero_exporter.collectors.nvidia.nvidia_smi.layout_common import VENDOR, placeholder_uuid, snapshot, strip_ansi
from hetero_exporter.model import DeviceIdentity, DeviceSample, Health, Link, NodeSnapshot
from hetero_exporter.sdk import tables
from hetero_exporter.sdk.contract import ParseError

TOOL = "nvidia-smi topo -m"
HOST_LINKS = {"PIX": "pcie-switch", "PXB": "pcie-switch", "PHB": "pcie-hostbridge", "NODE": "numa",
              "SYS": "cross-numa", "SOC": "cross-numa"}
_NVLINK = re.compile(r"NV(\d{1,3})", re.I)
# a connection word, or several run together where a tab was lost
_CONNECTION = re.compile(r"(?:X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)+", re.I)
_HEADER = re.compile(r"^[ \t]+GPU\d{1,4}(?:[ \t]|$)", re.M)
_ROW_WITH_SELF = re.compile(r"^GPU\d{1,4}[ \t].*(?:^|[ \t])X(?:[ \t]|$)", re.M)
_NIC_ROW = re.compile(r"^NIC\d{1,4}(?:[ \t]|$)")


def looks_like(text: str) -> bool:
    head = strip_ansi(text[:200_000])
    return _HEADER.search(head) is not None and _ROW_WITH_SELF.search(head) is not None


def link_of(word: str, peer: str) -> Optional[Link]:
    """The model link a matrix cell names, None for a word that is no GPU-to-GPU link."""
    w = word.upper()
    nv = _NVLINK.fullmatch(w)
    if nv:
        return Link(peer=peer, type="nvlink", lanes=int(nv.group(1)))
    kind = HOST_LINKS.get(w)
    return Link(peer=peer, type=kind) if kind else None


def _numa(words: list[str]) -> Optional[int]:
    """The NUMA Affinity of a GPU row: the second word after the connection words."""
    rest = [w for w in words[1:] if not _CONNECTION.fullmatch(w)]
    if len(rest) >= 2 and re.fullmatch(r"\d{1,4}", rest[1]):
        return int(rest[1])
    return None


def parse(text: str) -> NodeSnapshot:
    """One device per GPU row, with links to the other GPUs and its NUMA node."""
    lines = tables.lines_of(strip_ansi(text), TOOL)
    kept = [ln for ln in lines if not _NIC_ROW.match(ln.strip())]
    # the NIC legend ("NIC0: mlx5_0") after the matrix: also not matrix rows
    cut = next((i for i, ln in enumerate(kept) if re.match(r"\s*NIC Legend\s*:?\s*$", ln, re.I)), None)
    kept = kept if cut is None else kept[:cut]
    mat = tables.parse_matrix("\n".join(kept), TOOL, r"(?:GPU|NIC)\d{1,4}")
    gpus = [n for n in mat.names if n.startswith("GPU")]
    if not gpus:
        raise ParseError(TOOL, "a matrix without GPU columns")
    index = {n: int(n[3:]) for n in gpus}
    if len(set(index.values())) != len(index):
        raise ParseError(TOOL, "a GPU named twice in the matrix header")
    tables.check_devices(len(gpus), TOOL)
    rows = {ln.split()[0]: ln.split() for ln in kept if ln.strip() and ln.split()[0] in index}
    missing = [n for n in gpus if n not in rows]
    if missing:
        raise ParseError(TOOL, f"no matrix row for {', '.join(missing[:4])}")
    out = []
    unknown = Health("unknown")
    for name in gpus:
        if mat.cells.get((name, name), "").upper() != "X":
            raise ParseError(TOOL, f"{name}: its own column is {mat.cells.get((name, name), '')[:12]!r}, not X")
        links = []
        for peer in gpus:
            if peer == name:
                continue
            link = link_of(mat.cells.get((name, peer), ""), placeholder_uuid(index[peer]))
            if link is not None:
                links.append(link)
        ident = DeviceIdentity(vendor=VENDOR, kind="gpu", index=index[name], uuid=placeholder_uuid(index[name]),
                               numa_node=_numa(rows[name]))
        out.append(DeviceSample(identity=ident, timestamp=0.0, health=unknown, links=tuple(links)))
    return snapshot(out)
