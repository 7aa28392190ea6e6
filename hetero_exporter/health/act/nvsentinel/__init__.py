"""NVSentinel bridge (opt-in, config ``nvsentinel``): fault episodes and recoveries as NVSentinel
HealthEvents to its platform connector socket (agent ``hetero-exporter``; STORE_ONLY unless the
health mode is enforce).

- ``health_event.proto`` and its generated ``health_event_pb2*.py`` (``generate.py``): the wire format;
- ``episodes.py``: pure: judged snapshots -> episodes -> events, the outbox, the state document;
- ``state.py``: the state file (bounded, checked, atomic); ``client.py``: the one gRPC call;
- ``bridge.py``: ``NvSentinelBridge`` (offer / start / close), ``settings.py``: its config section.

Importing this package imports neither grpc nor protobuf: ``NvSentinelBridge.start`` does.
"""

from hetero_exporter.health.act.nvsentinel.bridge import (  # noqa: F401
    EXPORTER,
    NvSentinelBridge,
    NvSentinelUnavailable,
)
from hetero_exporter.health.act.nvsentinel.settings import NvSentinelSettings  # noqa: F401
