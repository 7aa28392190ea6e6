"""The local health stream (opt-in, config ``health_stream``): every device's verdict and the fault
episodes over a unix-socket gRPC service, ``heteroexporter.health.v1.HealthStream``, for a DRA
driver, a device plugin or a node tool (docs/health-stream.md).

- ``health_stream.proto`` and its generated ``health_stream_pb2*`` (``generate.py``): the wire format;
- ``views.py``: pure: judged snapshots -> device views and episode events (``model.episodes``);
- ``hub.py``: the fan-out, a bounded queue per client, and the stream's metrics;
- ``messages.py``: views -> messages; ``server.py``: the gRPC server (the one grpc importer);
- ``socketfile.py``: the socket's directory, a stale socket removed, nothing else touched;
- ``stream.py``: ``HealthStream`` (offer / start / close), ``settings.py``: its config section.

Importing this package imports neither grpc nor protobuf: ``HealthStream.start`` does.
"""

from hetero_exporter.health.act.stream.settings import HealthStreamSettings  # noqa: F401
from hetero_exporter.health.act.stream.socketfile import SocketPathError  # noqa: F401
from hetero_exporter.health.act.stream.stream import HealthStream, HealthStreamUnavailable  # noqa: F401
