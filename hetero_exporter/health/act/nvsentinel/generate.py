"""Regenerate ``health_event_pb2.py`` / ``health_event_pb2_grpc.py`` from ``health_event.proto`` with grpcio-tools
(and ``health_event_pb2.pyi``, the messages' types for mypy).

    python -m hetero_exporter.health.act.nvsentinel.generate            # rewrite the committed modules
    python -m hetero_exporter.health.act.nvsentinel.generate --out DIR  # write them under DIR instead

As for PodResources (sources/podresources/generate.py), the generated modules are committed: the
agent needs only grpcio + protobuf at run time, not grpcio-tools; tests/test_nvsentinel.py
regenerates them and compares. The .proto imports two well-known types (Empty, Timestamp), found
in the copy grpcio-tools ships.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]  # the folder holding hetero_exporter/, so imports are package-qualified
PROTO = "hetero_exporter/health/act/nvsentinel/health_event.proto"
MODULES = ("health_event_pb2.py", "health_event_pb2_grpc.py")
STUB = "health_event_pb2.pyi"  # written beside them (the messages' types: mypy checks the client with them)


def generate(out: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) on health_event.proto; returns the two modules written (the
    stub ``STUB`` is written beside them)."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        raise SystemExit("grpcio-tools is not installed: pip install -e '.[test]'") from None
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{ROOT}", f"-I{well_known}", f"--python_out={out}",
            f"--grpc_python_out={out}", f"--pyi_out={out}", str(ROOT / PROTO)]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    target = out / Path(PROTO).parent
    return [target / name for name in MODULES]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write under DIR/hetero_exporter/health/act/nvsentinel instead of in place")
    args = ap.parse_args(argv)
    if args.out is not None:
        for p in generate(args.out):
            print(p)
        return 0
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        modules = generate(Path(tmp))
        for p in [*modules, modules[0].with_name(STUB)]:
            (HERE / p.name).write_bytes(p.read_bytes())
            print(HERE / p.name)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
