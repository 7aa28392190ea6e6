"""kubelet PodResources (v1 gRPC API): which devices the kubelet gave to which container.

- ``api.proto`` + generated ``api_pb2`` / ``api_pb2_grpc`` (``generate.py`` regenerates them);
- ``client.py``: ``List`` over the kubelet's unix socket with a timeout, polled in a background
  thread (``PodResourcesPoller``) so a collection cycle never waits on the kubelet;
- ``mapping.py``: pure; resource names of every vendor and device-plugin ids -> our devices;
- ``server.py``: a real PodResources gRPC server on a unix socket, for tests and simulation.

Importing this package imports nothing heavy: grpc is loaded by client.py/server.py only.
"""
