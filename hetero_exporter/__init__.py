"""hetero-exporter: one telemetry and health agent for every accelerator vendor on a node."""

__version__ = "0.1.0"
