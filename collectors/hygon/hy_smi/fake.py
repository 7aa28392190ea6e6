"""The fake ``hy-smi``: AMD's rocm-smi fake (collectors/amd/rocm_smi/fake.py), which prints
Hygon's keys when it runs as hy-smi. Re-exported like the collector (hy-smi is a rocm-smi fork)."""

from hetero_exporter.collectors.amd.rocm_smi.fake import FakeSmiCli, answer, install, main  # noqa: F401
