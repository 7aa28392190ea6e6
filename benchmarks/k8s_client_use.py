"""How much of the `kubernetes` client the agent and the extender load (issue 36: the client is
the largest package in the image).

Runs `run --simulate` (health mode enforce, pod cache, node writes) and `scheduler-extender`
against the loopback API server (tests/kubeapi.py, its own process, via benchmarks/footprint.py)
for --seconds, stops them (SIGTERM) and sums the bytes of the kubernetes modules each
imported (.py and its .pyc) against the whole installed package, and lists the client's
dependencies that neither process imported.

    python benchmarks/k8s_client_use.py [--seconds 40]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from footprint import LoopbackCluster, scenario_pods, stop  # noqa: E402

# sys.modules written at exit (the agent stops cleanly on SIGTERM): every module it loaded,
# also those the kubernetes client loads lazily through its package __getattr__
WRAPPER = """import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "hetero-exporter"
runpy.run_module("hetero_exporter", run_name="__main__")
"""


def imported(argv: list[str], seconds: float, workdir: Path) -> set[str]:
    """The modules a process had loaded after ``seconds``, when it was stopped."""
    out = workdir / f"modules-{argv[0]}.json"
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER, str(out), *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=workdir)
    time.sleep(seconds)
    stop(proc, 20)
    if not out.exists():
        sys.exit(f"hetero-exporter {argv[0]} wrote no module list (exit {proc.returncode})")
    return set(json.loads(out.read_text()))


def module_files(root: Path, package: str) -> dict[str, list[Path]]:
    """{module name: its .py and cached .pyc files} for every module of an installed package."""
    out: dict[str, list[Path]] = {}
    for py in (root / package).rglob("*.py"):
        rel = py.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        pycs = list((py.parent / "__pycache__").glob(f"{py.stem}.*.pyc"))
        out[".".join(parts)] = [py, *pycs]
    return out


def size(files) -> int:
    return sum(f.stat().st_size for f in files)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=40)
    args = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="k8s-client-use-"))
    node, pods = scenario_pods("default", "")
    cluster = LoopbackCluster(workdir, node, pods)
    try:
        agent = imported(["run", "--simulate", "--listen", "127.0.0.1:0", "--interval", "2", "--kernel-log", "off",
                          "--health-mode", "enforce", "--kubeconfig", cluster.kubeconfig, "--node-name", node],
                         args.seconds, workdir)
        extender = imported(["scheduler-extender", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                             "--kubeconfig", cluster.kubeconfig], args.seconds / 2, workdir)
    finally:
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)
    root = Path(importlib.util.find_spec("kubernetes").submodule_search_locations[0]).parent
    files = module_files(root, "kubernetes")
    total = size(p for p in (root / "kubernetes").rglob("*") if p.is_file())
    print(f"kubernetes {importlib.metadata.version('kubernetes')} at {root}: {total / 1e6:.1f} MB, {len(files)} modules")
    print("| process | kubernetes modules loaded | their .py + .pyc |")
    print("|---|---|---|")
    for name, mods in (("agent (run --health-mode enforce, pod cache)", agent), ("scheduler-extender", extender)):
        used = [m for m in files if m in mods]
        print(f"| {name} | {len(used)} of {len(files)} | {size(f for m in used for f in files[m]) / 1e6:.2f} MB |")
    both = agent | extender
    print("| part of the package | installed | loaded by either |")
    print("|---|---|---|")
    for sub in ("kubernetes/aio", "kubernetes/client/api", "kubernetes/client/models"):
        dotted = sub.replace("/", ".")
        inside = [m for m in files if m == dotted or m.startswith(dotted + ".")]
        loaded = size(f for m in inside if m in both for f in files[m])
        print(f"| {sub} | {size(p for p in (root / sub).rglob('*') if p.is_file()) / 1e6:.1f} MB | {loaded / 1e6:.2f} MB |")
    unused = unused_requirements("kubernetes", both)
    mb = sum(installed_size(d) for d in unused) / 1e6
    print(f"| packages only the client requires, never imported: {', '.join(sorted(unused))} | {mb:.1f} MB | 0 |")


def top_names(dist: str) -> list[str]:
    d = importlib.metadata.distribution(dist)
    return (d.read_text("top_level.txt") or d.metadata["Name"].replace("-", "_").lower()).split()


def requirements(dist: str) -> set[str]:
    return {re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0] for r in importlib.metadata.requires(dist) or []
            if "extra ==" not in r}


def unused_requirements(dist: str, loaded: set[str]) -> set[str]:
    """The distributions ``dist`` requires (transitively) of which no module was loaded."""
    found: set[str] = set()
    todo = list(requirements(dist))
    while todo:
        dep = todo.pop()
        if dep in found:
            continue
        try:
            names = top_names(dep)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not any(n in loaded for n in names):
            found.add(dep)
            todo += requirements(dep)
    return found


def installed_size(dist: str) -> int:
    d = importlib.metadata.distribution(dist)
    return sum(f.locate().stat().st_size for f in d.files or [] if f.locate().is_file())

if __name__ == "__main__":
    main()
