"""rocm_smi: see collector.py."""
