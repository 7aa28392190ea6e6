"""Hygon DCUs through ``hy-smi``: Hygon's fork of rocm-smi, read by AMD's rocm-smi parser
(the one import across vendor packages, allowed by .importlinter)."""

from hetero_exporter.collectors.amd.rocm_smi.collector import (  # noqa: F401
    HySmiCollector, SmiSettings as SETTINGS, create_hy_smi as create, parse_hy_smi)
