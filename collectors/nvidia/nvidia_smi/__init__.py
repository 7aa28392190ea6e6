"""nvidia_smi: see collector.py."""
