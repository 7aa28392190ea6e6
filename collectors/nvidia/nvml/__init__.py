"""nvml: see collector.py."""
