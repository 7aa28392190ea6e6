"""Regenerate ``health_stream_pb2.py``, ``health_stream_pb2_grpc.py`` and ``health_stream_pb2.pyi``
(the messages' types for mypy) from ``health_stream.proto`` with grpcio-tools.

    python -m hetero_exporter.health.act.stream.generate            # rewrite the committed modules
    python -m hetero_exporter.health.act.stream.generate --out DIR  # write them under DIR instead

The generated modules are committed (the agent needs grpcio + protobuf at run time, not
grpcio-tools); tests/test_health_stream.py regenerates them and compares. The .proto imports one
well-known type (Timestamp), found in the copy grpcio-tools ships.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]  # the folder holding hetero_exporter/: the modules import package-qualified
PROTO = HERE.relative_to(ROOT) / "health_stream.proto"
OUTPUTS = ("health_stream_pb2.py", "health_stream_pb2_grpc.py", "health_stream_pb2.pyi")


def generate(out: Path) -> list[Path]:
    """Run protoc on the .proto, writing under ``out``; the three files written (``OUTPUTS``)."""
    try:
        import grpc_tools
        from grpc_tools import protoc
    except ImportError:
        raise SystemExit("grpcio-tools is not installed: pip install -e '.[test]'") from None
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    flags = [f"--{kind}_out={out}" for kind in ("python", "grpc_python", "pyi")]
    if protoc.main(["grpc_tools.protoc", f"-I{ROOT}", f"-I{well_known}", *flags, str(ROOT / PROTO)]) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    return [out / PROTO.parent / name for name in OUTPUTS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, help=f"write under DIR/{PROTO.parent} instead of in place")
    args = ap.parse_args(argv)
    if args.out is not None:
        print(*generate(args.out), sep="\n")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for written in generate(Path(tmp)):
            (HERE / written.name).write_bytes(written.read_bytes())
            print(HERE / written.name)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
