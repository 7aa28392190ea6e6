"""npu_smi: see collector.py."""
