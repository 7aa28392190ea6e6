"""Simulated nodes for the series budgets (tests/test_profiles_fleet.py, benchmarks/series_budget.py):
the all-vendors node with its H100s' GPM values, and one vendor's devices of it, eight of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _all_vendors_gpm() -> dict[str, Any]:
    """fixtures/scenarios/all-vendors.yaml with the default node's NVML GPM values on its H100s (GPM on)."""
    node = yaml.safe_load((ROOT / "fixtures/scenarios/all-vendors.yaml").read_text())
    default = yaml.safe_load((ROOT / "hetero_exporter/simulate/scenarios/default.yaml").read_text())
    gpm = next(g for g in default["devices"] if g["vendor"] == "nvidia")["values"]
    group = next(g for g in node["devices"] if g["vendor"] == "nvidia")
    group["values"] = {**gpm, **group["values"]}
    return node


def gpm_node(folder: Path) -> Path:
    """The all-vendors node, GPM on, as a scenario file in ``folder``."""
    path = folder / "all-vendors-gpm.yaml"
    path.write_text(yaml.safe_dump(_all_vendors_gpm()))
    return path


def _pods(pods: list[dict[str, Any]], templates: set[str], count: int) -> list[dict[str, Any]]:
    """The pods ``templates`` (``namespace/name-{n}``) name for devices 0 .. count-1: the scenario's,
    and copies of them (their uid and container ids made unique) for the devices it has none for."""
    out = []
    for template in sorted(templates):
        ns, name = template.split("/", 1)
        given = {f"{p['namespace']}/{p['name']}": p for p in pods}
        first = [given[t] for n in range(count) if (t := template.replace("{n}", str(n))) in given]
        for n in range(count):
            pod = given.get(template.replace("{n}", str(n)))
            if pod is None:
                base = first[n % len(first)]
                tag = f"{0x80 + n:02x}"
                pod = {**base, "name": name.replace("{n}", str(n)), "uid": base["uid"][:-2] + tag,
                       "containers": {c: cid[:-2] + tag for c, cid in base["containers"].items()}}
            out.append(pod)
    return out


def vendor_node(folder: Path, vendor: str, count: int = 8, processes: Optional[int] = None) -> Path:
    """One vendor's group of the all-vendors node (GPM on), ``count`` devices; ``processes`` a
    device (numbered copies of its first process) where given, else the scenario's."""
    node = _all_vendors_gpm()
    group = next(g for g in node["devices"] if g["vendor"] == vendor)
    numa = group.get("numa_nodes") or [0]
    bus = int(str(group.get("pci_address", "0000:01:00.0")).split(":")[1], 16)
    group.update(count=count, numa_nodes=[numa[i % len(numa)] for i in range(count)],
                 pci_stride=min(int(group.get("pci_stride", 1)), (0xff - bus) // count))  # the bus ends at ff
    if processes is not None:
        first = group["processes"][0]
        group["processes"] = [{**first, "pid": 5000 + i, "name": f"rank{i}"} for i in range(processes)]
    node["devices"] = [group]
    node["faults"] = [f for f in node.get("faults") or () if f.get("vendor") == vendor]
    node["pods"] = _pods(node.get("pods") or [], {p["pod"] for p in group["processes"] if p.get("pod")}, count)
    path = folder / f"{vendor}x{count}{'' if processes is None else f'x{processes}'}.yaml"
    path.write_text(yaml.safe_dump(node))
    return path
