"""``hy-smi``, Hygon's fork of rocm-smi, as a member of the rocm-smi family
(hetero_exporter/sdk/rocm_family/): apart from collector.py so that the fake, a process per
call, does not import the collector. Its cards are Hygon DCUs; one whose ``Card Vendor`` names
Advanced Micro Devices is an AMD GPU (the fork reads AMD's cards as rocm-smi does)."""

from hetero_exporter.sdk.rocm_family import CardVendor, Member

HY_SMI = Member(
    "hy-smi", "hygon", "dcu", search_dirs=("/opt/hyhal/bin", "/opt/dtk/bin", "/opt/rocm/bin"),
    why_missing="Hygon DTK (hyhal) not installed",
    cards=(CardVendor("hygon", "dcu", r"haiguang|hygon", device_words=("DCU", "HCU")),
           CardVendor("amd", "gpu", r"advanced micro devices|(?:^|\s)amd(?:\s|$)")))
