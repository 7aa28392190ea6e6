"""kubelet PodResources (v1 gRPC API): which devices the kubelet gave to which container.

- ``api.proto`` + generated ``api_pb2`` / ``api_pb2_grpc`` (``generate.py`` regenerates them);
- ``client.py``: ``List`` over the kubelet's unix socket with a timeout, polled in a background
  thread (``PodResourcesPoller``) so a collection cycle never waits on the kubelet;
- ``h2.py``: the one unary gRPC call over HTTP/2 (the ``h2`` library), bounded in time and bytes;
- ``mapping.py``: pure; resource names of every vendor and device-plugin ids -> our devices;
- ``server.py``: a real PodResources gRPC server on a unix socket, for tests and simulation.

Importing this package imports nothing heavy: h2 is loaded by h2.py at the first call, grpc by
server.py only (the agent never loads grpc).
"""
