"""Prometheus exposition: metric names (names.py), the snapshot Collector, the HTTP server."""
