"""hy_smi: see collector.py."""
