"""``rocm-smi`` as a member of the rocm-smi family (hetero_exporter/sdk/rocm_family/): apart from
collector.py so that the fake, a process per call, does not import the collector.

rocm-smi also runs on Hygon DCUs (Hygon's toolkit ships it): a card whose ``Card Vendor`` names
Haiguang, or an output naming its devices DCU / HCU, is Hygon's (kind dcu), as hy_smi reports it."""

from hetero_exporter.sdk.rocm_family import CardVendor, Member

ROCM_SMI = Member(
    "rocm-smi", "amd", "gpu", search_dirs=("/opt/rocm/bin",), why_missing="ROCm SMI not installed",
    cards=(CardVendor("hygon", "dcu", r"haiguang|hygon", device_words=("DCU", "HCU")),
           CardVendor("amd", "gpu", r"advanced micro devices|(?:^|\s)amd(?:\s|$)")))
