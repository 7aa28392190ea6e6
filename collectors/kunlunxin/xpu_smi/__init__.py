"""Kunlunxin ``xpu_smi`` / ``xpu-smi``: parser, collector, fake."""
