"""Regenerate ``api_pb2.py`` / ``api_pb2_grpc.py`` (and ``api_pb2.pyi``, the messages' types
for mypy) from ``api.proto`` with grpcio-tools.

    python -m hetero_exporter.sources.podresources.generate            # rewrite the committed modules
    python -m hetero_exporter.sources.podresources.generate --out DIR  # write them under DIR instead

The generated modules are committed (the agent needs only grpcio + protobuf at run time, not
grpcio-tools); tests/test_podresources_codegen.py regenerates them and compares. Their
version checks need protobuf >= the "Protobuf Python Version" in api_pb2.py and grpcio >=
GRPC_GENERATED_VERSION in api_pb2_grpc.py: pyproject.toml's floors follow them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]  # the folder holding hetero_exporter/, so imports are package-qualified
PROTO = "hetero_exporter/sources/podresources/api.proto"


def generate(out: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) on api.proto; returns the two modules written (the
    messages' stub beside them: ``stub(out)``)."""
    try:
        from grpc_tools import protoc
    except ImportError:
        raise SystemExit("grpcio-tools is not installed: pip install -e '.[test]'") from None
    out.mkdir(parents=True, exist_ok=True)
    args = ["grpc_tools.protoc", f"-I{ROOT}", f"--python_out={out}", f"--grpc_python_out={out}", f"--pyi_out={out}",
            str(ROOT / PROTO)]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    target = out / "hetero_exporter" / "sources" / "podresources"
    return [target / "api_pb2.py", target / "api_pb2_grpc.py"]


def stub(out: Path) -> Path:
    """The messages' type stub ``generate(out)`` wrote."""
    return out / "hetero_exporter" / "sources" / "podresources" / "api_pb2.pyi"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write under DIR/hetero_exporter/sources/podresources instead of in place")
    args = ap.parse_args(argv)
    if args.out is not None:
        for p in [*generate(args.out), stub(args.out)]:
            print(p)
        return 0
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for p in [*generate(Path(tmp)), stub(Path(tmp))]:
            (HERE / p.name).write_bytes(p.read_bytes())
            print(HERE / p.name)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
