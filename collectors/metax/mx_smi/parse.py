"""Pure parsing of MetaX ``mx-smi`` outputs; only ParseError escapes.

``mx-smi`` (no arguments) prints a banner (``mx-smi  version: 2.2.4``, a timestamp,
``Attached GPUs : 8``), then one box: a title record (``MX-SMI <v>  Kernel Mode Driver
Version: <kmd>`` / ``MACA Version: <maca>  BIOS Version: <bios>``), a two-row header, one
two-row record per GPU, and a second box, the process table. The header differs between
versions (captures in ../shared/fixtures/mx-smi and public docs):

- 2.1.6: ``GPU NAME | Bus-id | GPU-Util`` / ``Temp Power | Memory-Usage |`` (empty cell);
- 2.1.x / 2.2.4: ``... | GPU-Util`` / ``Temp Pwr:Usage/Cap | Memory-Usage | GPU-State``;
- 2.2.6: ``GPU NAME Persistence-M | Bus-id | GPU-Util sGPU-M`` / ``Temp Pwr:Usage/Cap Perf |
  Memory-Usage | GPU-State``;
- 2.2.9 (and its ``ht-smi`` twin): four columns, ``Board Name | GPU Persist-M | Bus-id |
  GPU-Util sGPU-M`` / ``Pwr:Usage/Cap | Temp Perf | Memory-Usage | GPU-State``.

So nothing is read by position: the header's labels (a vocabulary; unknown words become
labels of their own, so a new column never shifts the others) say which value group of a
cell is what. A cell holding a name (``MetaX C500``, two words) is split structurally: the
labels left of NAME take one group each from the left, those right of it one each from the
right, the name gets the rest. Other cells: one group per label in order when the counts
agree, else each group goes to the nearest label (hetero_exporter.sdk.tables).

The process table (``GPU  PID  Process Name  GPU Memory Usage(MiB)``) is read the same
way, one record per line (``no process found`` when empty; a name may contain spaces).

``mx-smi topo -m`` prints a ``Device link type matrix`` (GPU names, one row per GPU, then
``Node Affinity`` and ``CPU Affinity`` columns) and a ``Legend:`` (``MX = Connection
traversing MetaXLink``, the PCIe words of nvidia-smi); ``mx-smi topo -n`` adds NIC rows and
columns and a ``NIC Legend:`` (``NIC0: mlx5_0``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Mapping, Optional, Sequence

from hetero_exporter.sdk import tables, values
from hetero_exporter.sdk.contract import ParseError

TOOL = "mx-smi"
CELLS = values.Cells(TOOL)
MIB = float(1 << 20)

# header label text -> key (matched longest first, case-sensitive as printed)
_VOCAB = {
    "Pwr:Usage/Cap": "power", "Power": "power", "Memory-Usage": "memory", "Bus-id": "bus",
    "Bus-Id": "bus", "GPU-Util": "util", "GPU-State": "state", "sGPU-M": "sgpu_mode",
    "Persistence-M": "persistence", "Persist-M": "persistence", "Perf": "perf",
    "Temp": "temp", "NAME": "name", "Name": "name", "Board": "board", "GPU": "gpu",
}
VOCABULARY = tuple(sorted(_VOCAB.items(), key=lambda kv: -len(kv[0])))
_PROC_VOCAB = tuple(sorted({"GPU Memory": "memory", "Process Name": "name", "PID": "pid", "GPU": "gpu",
                            "Type": "type"}.items(), key=lambda kv: -len(kv[0])))

# topo words -> Link.type (nvidia-smi's PCIe vocabulary, which mx-smi's legend repeats)
TOPO_LINKS = {"MX": "metaxlink", "PIX": "pcie-switch", "PXB": "pcie-switch", "PHB": "pcie-hostbridge",
              "NODE": "numa", "SYS": "cross-numa", "ETH": "ethernet"}


# --------------------------------------------------------------------------- the default table


@dataclass(frozen=True)
class MxGpu:
    """One GPU record of the default table, in mx-smi's own units: memory MiB, power W,
    temperature C, utilization a ratio (printed in %). None where the tool prints N/A or the
    layout has no such column; ``na_fields`` names the columns this GPU printed as N/A."""

    index: int
    name: str
    bus_id: Optional[str]
    board: Optional[int] = None
    util_ratio: Optional[float] = None
    temp_c: Optional[float] = None
    power_w: Optional[float] = None
    power_cap_w: Optional[float] = None
    memory_used_mib: Optional[float] = None
    memory_total_mib: Optional[float] = None
    state: Optional[str] = None  # GPU-State: Available, ...
    persistence: Optional[str] = None  # Persistence-M: On / Off
    perf: Optional[str] = None  # performance state, P0..P9
    sgpu_mode: Optional[str] = None  # sGPU-M: Native / Disabled / ...
    na_fields: tuple[str, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class MxProcess:
    gpu: int
    pid: int
    name: str
    memory_mib: Optional[float]


@dataclass(frozen=True)
class MxTable:
    tool_version: Optional[str]
    driver_version: Optional[str]  # Kernel Mode Driver Version
    runtime_version: Optional[str]  # MACA Version (HPCC on ht-smi)
    bios_version: Optional[str]
    attached: Optional[int]  # "Attached GPUs : N" of the banner
    gpus: tuple[MxGpu, ...]
    processes: tuple[MxProcess, ...] = ()
    process_section: bool = False  # the process box was printed (the output is complete)
    columns: tuple[str, ...] = ()  # header keys found (which layout)

    def to_dict(self) -> dict:
        return asdict(self)


def _search(pattern: str, lines: Sequence[str]) -> Optional[str]:
    rx = re.compile(pattern, re.I)
    for s in lines:
        m = rx.search(s)
        if m:
            return m.group(1)
    return None


def _groups(cell: str) -> list[str]:
    return [m.group(0) for m in tables.GROUP.finditer(cell)]


def assign(cell: str, labels: Sequence[tables.Label]) -> dict[str, str]:
    """The values of one data cell by the labels of its header cell (module docstring)."""
    keys = [lab.key for lab in labels]
    groups = _groups(cell)
    if not keys or not groups:
        return {}
    if "name" in keys and len(groups) >= len(keys):
        i = keys.index("name")
        left, right = keys[:i], keys[i + 1:]
        out = dict(zip(left, groups))
        if right:
            out.update(zip(right, groups[len(groups) - len(right):]))
        out["name"] = " ".join(groups[len(left):len(groups) - len(right)])
        return out
    if len(groups) == len(keys):
        return dict(zip(keys, groups))
    return tables.cell_values(cell, labels)


def _gpu(vals: Mapping[str, tuple[str, int]], line: int) -> MxGpu:
    def get(key: str) -> Optional[str]:
        v = vals.get(key)
        return v[0] if v is not None else None

    index = CELLS.integer(get("gpu"), "column GPU", line)
    board = CELLS.integer(get("board"), "column Board", line)
    if index is None:
        index = board
    if index is None:
        raise ParseError(TOOL, "a GPU record without its GPU index", line)
    bus = CELLS.pci(get("bus"), "column Bus-id", vals["bus"][1]) if "bus" in vals else None
    used = total = power = cap = None
    memory, watts = get("memory"), get("power")
    if memory is not None and not values.is_na(memory):
        # "810/65536 MiB": the unit printed after the total applies to the used value
        used, total = CELLS.pair(memory, "MiB", "column Memory-Usage", vals["memory"][1], shared_unit=True)
        if total is None:
            raise ParseError(TOOL, "column Memory-Usage: expected 'USED/TOTAL MiB'", vals["memory"][1])
        used, total = used / MIB if used is not None else None, total / MIB
    if watts is not None and not values.is_na(watts):  # "53W / 450W", or the usage alone
        power, cap = (CELLS.pair(watts, "W", "column Power", vals["power"][1], shared_unit=True) if "/" in watts
                      else (CELLS.quantity(watts, "W", "column Power", vals["power"][1]), None))

    def q(key: str, unit: str, column: str) -> Optional[float]:
        v = get(key)
        return None if v is None else CELLS.quantity(v, unit, f"column {column}", vals[key][1])

    def word(key: str) -> Optional[str]:
        # a state word is kept as printed ("Unavailable" is a state here, not a missing value)
        v = get(key)
        return None if v is None or v.strip().lower() in ("n/a", "na", "-", "--", "") else v

    util, temp = q("util", "%", "GPU-Util"), q("temp", "C", "Temp")
    parsed = {"bus": bus, "util": util, "temp": temp, "power": power, "memory": used}
    na = tuple(k for k, v in parsed.items() if k in vals and v is None)
    return MxGpu(index=index, name=get("name") or "", bus_id=bus, board=board,
                 util_ratio=util, temp_c=temp,
                 power_w=power, power_cap_w=cap, memory_used_mib=used, memory_total_mib=total,
                 state=word("state"), persistence=word("persistence"), perf=word("perf"),
                 sgpu_mode=word("sgpu_mode"), na_fields=na, line=line)


def _record_values(record: Sequence[tables.BoxLine], header: Sequence[Sequence[Sequence[tables.Label]]]
                   ) -> dict[str, tuple[str, int]]:
    if len(record) != len(header):
        raise ParseError(TOOL, f"a GPU record of {len(record)} row(s) under a header of {len(header)}",
                         record[0].lineno)
    out: dict[str, tuple[str, int]] = {}
    for row, per_cell in zip(record, header):
        if len(row.cells) != len(per_cell):
            raise ParseError(TOOL, f"a row of {len(row.cells)} cells under a header of {len(per_cell)}",
                             row.lineno)
        for cell, labels in zip(row.cells, per_cell):
            for k, v in assign(cell, labels).items():
                if not k.startswith("?"):
                    out.setdefault(k, (v, row.lineno))
    return out


def _is_header(rec: Sequence[tables.BoxLine]) -> bool:
    return any("Bus-id" in r.text or "Bus-Id" in r.text for r in rec) and len(rec[0].cells) >= 2


def _processes(recs: Sequence[Sequence[tables.BoxLine]], start: int) -> tuple[bool, tuple[MxProcess, ...]]:
    """The process box: the record whose first row says ``Process:`` (its header rows
    follow in it) and the record after it (one process per row)."""
    at = next((i for i in range(start, len(recs)) if recs[i][0].joined.lower().startswith("process")), None)
    if at is None:
        return False, ()
    head = recs[at][1:]
    if not head:
        raise ParseError(TOOL, "a process table without its header", recs[at][0].lineno)
    labels = tables.cell_labels(head[0].cells[0], _PROC_VOCAB) if len(head[0].cells) == 1 else []
    keys = [lab.key for lab in labels]
    if not {"gpu", "pid"} <= set(keys):
        raise ParseError(TOOL, "a process table header without GPU and PID", head[0].lineno)
    unit = _search(r"\((\w+)\)", [r.text for r in head]) or "MiB"
    rows = recs[at + 1] if at + 1 < len(recs) else []
    out = []
    for r in rows:
        if len(r.cells) != 1:
            raise ParseError(TOOL, f"a process row of {len(r.cells)} cells", r.lineno)
        text = r.cells[0]
        if re.search(r"no (running )?process(es)? found", text, re.I):
            continue
        v = assign(text, labels)
        gpu, pid = CELLS.integer(v.get("gpu"), "column GPU", r.lineno), CELLS.integer(v.get("pid"), "column PID", r.lineno)
        if gpu is None or pid is None:
            raise ParseError(TOOL, f"a process row without GPU and PID: {text.strip()[:60]!r}", r.lineno)
        mem = None if "memory" not in v else CELLS.quantity(v["memory"], unit, "column GPU Memory", r.lineno)
        out.append(MxProcess(gpu=gpu, pid=pid, name=v.get("name", ""),
                             memory_mib=None if mem is None else mem / MIB))
    return True, tuple(out)


def parse_table(text: str) -> MxTable:
    """The GPUs (and processes) of ``mx-smi``'s default output (ParseError naming the line
    otherwise)."""
    lines = tables.box_lines(text, TOOL, strict=False)
    recs = tables.records(lines)
    at = next((i for i, r in enumerate(recs) if _is_header(r)), None)
    if at is None:
        raise ParseError(TOOL, "no GPU table (a header naming Bus-id)")
    header = tables.header_labels(recs[at], VOCABULARY)
    keys = {lab.key for row in header for cell in row for lab in cell}
    if not ({"gpu", "board"} & keys) or "memory" not in keys:
        raise ParseError(TOOL, "a GPU table header without GPU and Memory-Usage", recs[at][0].lineno)
    widths = [len(r.cells) for r in recs[at]]
    gpus: list[MxGpu] = []
    indexes: set[int] = set()  # a set: a scan of the GPUs per record is quadratic
    end = at + 1
    while end < len(recs) and len(recs[end][0].cells) == widths[0]:
        g = _gpu(_record_values(recs[end], header), recs[end][0].lineno)
        if g.index in indexes:
            raise ParseError(TOOL, f"GPU {g.index} listed twice", recs[end][0].lineno)
        indexes.add(g.index)
        gpus.append(g)
        tables.check_devices(len(gpus), TOOL, recs[end][0].lineno)
        end += 1
    first = recs[at][0].lineno
    head = [ln.text for ln in lines if ln.lineno < first]
    attached = _search(r"Attached GPUs\s*:\s*(\d{1,4})\b", head)
    seen, procs = _processes(recs, end)
    return MxTable(tool_version=_search(r"\b[A-Z]{2}-SMI\s+v?(\d[\w.-]*)", head)
                   or _search(r"-smi\s+version\s*:\s*v?(\d[\w.-]*)", head),
                   driver_version=_search(r"Kernel Mode Driver Version\s*:\s*v?([0-9][\w.+-]*)", head)
                   or _search(r"Driver Version\s*:\s*v?([0-9][\w.+-]*)", head),
                   runtime_version=_search(r"(?:MACA|HPCC) Version\s*:\s*v?([0-9][\w.+-]*)", head),
                   bios_version=_search(r"BIOS Version\s*:\s*v?([0-9][\w.+-]*)", head),
                   attached=int(attached) if attached else None, gpus=tuple(gpus), processes=procs,
                   process_section=seen, columns=tuple(sorted(keys - {k for k in keys if k.startswith("?")})))


def parse_processes(text: str) -> tuple[MxProcess, ...]:
    """The process table alone (``mx-smi --show-process``)."""
    recs = tables.records(tables.box_lines(text, TOOL, strict=False))
    seen, procs = _processes(recs, 0)
    if not seen:
        raise ParseError(TOOL, "no process table (a box starting with 'Process:')")
    return procs


# --------------------------------------------------------------------------- topo -m / -n


@dataclass(frozen=True)
class MxTopo:
    """``mx-smi topo -m`` / ``-n``: ``gpus`` the GPU indices in matrix order, ``links``
    (gpu a, gpu b, word) for each GPU pair off the diagonal, ``numa`` GPU -> Node Affinity,
    ``cpus`` GPU -> CPU Affinity, ``nics`` NIC name -> device (``mlx5_0``), ``nic_links``
    (gpu, nic, word), ``legend`` word -> meaning."""

    command: str
    gpus: tuple[int, ...]
    links: tuple[tuple[int, int, str], ...]
    numa: Mapping[int, int] = field(default_factory=dict)
    cpus: Mapping[int, str] = field(default_factory=dict)
    nics: Mapping[str, str] = field(default_factory=dict)
    nic_links: tuple[tuple[int, str, str], ...] = ()
    legend: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"command": self.command, "gpus": list(self.gpus),
                "links": [{"a": a, "b": b, "word": w, "type": TOPO_LINKS.get(w.upper())} for a, b, w in self.links],
                "numa": {str(k): v for k, v in self.numa.items()}, "cpus": {str(k): v for k, v in self.cpus.items()},
                "nics": dict(self.nics),
                "nic_links": [{"gpu": g, "nic": n, "word": w} for g, n, w in self.nic_links],
                "legend": dict(self.legend)}


# one line: a "\s*" after "^" in multi-line mode would run over every blank line below each line
# start (quadratic in a run of blank lines), and ":?" between two blank runs splits them every way
_NIC_LEGEND = re.compile(r"^[ \t]*NIC[ \t]+Legend(?:[ \t]*:)?[ \t]*$", re.I | re.M)


def parse_topo(text: str) -> MxTopo:
    """The link matrix of ``mx-smi topo -m`` or ``-n`` (ParseError otherwise)."""
    tool = f"{TOOL} topo"
    nics: dict[str, str] = {}
    m = _NIC_LEGEND.search(text)
    if m:  # the NIC legend after the matrix: "NIC0: mlx5_0"
        for line in text[m.end():].splitlines()[:4096]:
            nm = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
            if nm:
                nics[nm.group(1)] = nm.group(2)
        text = text[:m.start()]
    mat = tables.parse_matrix(text, tool, r"(?:GPU|NIC)\d{1,4}")
    gpu_names = [n for n in mat.names if n.startswith("GPU")]
    if not gpu_names:
        raise ParseError(tool, "a matrix without GPU columns")
    idx = {n: int(n[3:]) for n in gpu_names}
    if len(set(idx.values())) != len(idx):
        raise ParseError(tool, "a GPU named twice in the matrix header")
    missing = [n for n in gpu_names if n not in mat.extra]
    if missing:
        raise ParseError(tool, f"no matrix row for {', '.join(missing[:4])}")
    links, nic_links = [], []
    for (r, c), word in mat.cells.items():
        if r == c or not r.startswith("GPU"):
            continue
        if c.startswith("GPU"):
            links.append((idx[r], idx[c], word))
        else:
            nic_links.append((idx[r], c, word))
    numa: dict[int, int] = {}
    cpus: dict[int, str] = {}
    for n in gpu_names:
        ex = mat.extra.get(n) or {}
        node = ex.get("Node Affinity") or ex.get("NUMA Affinity")
        if node is not None and re.fullmatch(r"\d{1,4}", node):
            numa[idx[n]] = int(node)
        if ex.get("CPU Affinity"):
            cpus[idx[n]] = ex["CPU Affinity"]
    for name in mat.names:
        if name.startswith("NIC"):
            nics.setdefault(name, "")
    command = f"{TOOL} topo -n" if any(n.startswith("NIC") for n in mat.names) else f"{TOOL} topo -m"
    return MxTopo(command=command, gpus=tuple(idx[n] for n in gpu_names), links=tuple(links), numa=numa,
                  cpus=cpus, nics=nics, nic_links=tuple(nic_links), legend=dict(mat.legend))


def metaxlinks(topo: MxTopo) -> list[tuple[int, int]]:
    """(gpu a, gpu b) pairs joined by MetaXLink (``MX``)."""
    return [(a, b) for a, b, w in topo.links if w.upper() == "MX"]


# --------------------------------------------------------------------------- which output


def detect(text: str) -> str:
    """Which command printed ``text``: ``mx-smi``, ``mx-smi topo -m``, ``mx-smi topo -n``
    or ``mx-smi --show-process``; ParseError for anything else."""
    boxed = [ln for ln in text.splitlines()[:20000] if ln.strip().startswith("|")]
    if any("Bus-id" in ln or "Bus-Id" in ln for ln in boxed):
        return TOOL
    if re.search(r"^[ \t]+GPU\d+[ \t]+(?:GPU|NIC)\d+", text, re.M) or re.search(r"link type matrix", text, re.I):
        return f"{TOOL} topo -n" if re.search(r"^[ \t]+(?:GPU\d+[ \t]+)+NIC\d+", text, re.M) else f"{TOOL} topo -m"
    if any(re.match(r"\|\s*Process\s*:", ln.strip()) for ln in boxed):
        return f"{TOOL} --show-process"
    raise ParseError(TOOL, "not an mx-smi output (no GPU table, link matrix or process table)")
