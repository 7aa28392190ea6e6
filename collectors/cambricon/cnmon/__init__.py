"""cnmon: see collector.py."""
