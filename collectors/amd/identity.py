"""One uuid per AMD GPU whichever tool reads it (amdsmi, amd-smi, rocm-smi): the rocm-smi
family's rule (hetero_exporter/sdk/rocm_family/identity.py), which its forks share."""

from hetero_exporter.sdk.rocm_family.identity import device_uuid, simulated_unique_id, unique_id  # noqa: F401
