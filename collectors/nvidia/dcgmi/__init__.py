"""NVIDIA DCGM's command line, ``dcgmi``: outputs read offline (``hetero-exporter parse dcgmi FILE``)."""
