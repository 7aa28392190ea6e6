"""The nvidia-smi collector's slow calls (the CLI fallback when NVML cannot load): the MIG
partition inventory and the NVLink speeds, each node-wide, at its own cadence (sdk.schedule).

- ``nvidia-smi nvlink -s`` (``nvlink_status.py``): each GPU's links and their rated speeds,
  joined to the ``-q -x`` GPUs by uuid (the ``-L`` line it prints). Readings:
  ``interconnect_nvlink_link_<n>_speed_bytes_per_second`` (JSON), the active links' sum and the
  links by state, aged from the call. A GPU without NVLink prints no link line: nothing added.
- ``nvidia-smi mig -lgip`` / ``-lgipp`` / ``-lgi`` / ``-lci`` (``mig_listing.py``): the GPUs'
  partition inventory (profiles, placements, GPU and compute instances), kept whole
  (``MigDetails.inventory``, typed) and joined to the GPUs by index: ``partitions_compute`` =
  the GPU instances the GPU is split into (``-lgi``; 0 on a GPU ``-lgip`` lists, MIG on, with
  none created). ``No MIG-enabled devices found`` and ``No GPU instances found`` are answers,
  not failures; a GPU the listings do not name (MIG off) has no such reading.

The calls are slow (nvidia-smi initializes the driver for each): every ``DEFAULT_INTERVALS``
seconds, not every cycle; a failing call keeps the previous answer and is asked again an
interval later; three failures in a row disable it (this GPU or driver does not support it).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

from hetero_exporter.collectors.nvidia.nvidia_smi import mig_listing, nvlink_status
from hetero_exporter.model import DeviceSample, Quality, Reading
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.sdk.schedule import DetailSchedule, Job

log = logging.getLogger(__name__)

NVLINK, MIG = ("node", "nvlink"), ("node", "mig")
# seconds between calls: a link that trains down or a MIG layout an operator changes shows within a minute
DEFAULT_INTERVALS = {"nvlink": 60.0, "mig": 60.0}
MIG_LISTINGS = ("-lgip", "-lgipp", "-lgi", "-lci")
PARTITIONS = "partitions_compute"
_NO_MIG = "No MIG-enabled devices found"
_NONE = re.compile(r"^No (?:GPU|compute) instances? found", re.I)
_FAILURES = (ParseError, OSError, RuntimeError, TimeoutError)  # the runner's CliError / CliTimeout included

Call = Callable[[Sequence[str], float], str]  # (argv after the tool, deadline) -> stdout


@dataclass
class MigDetails:
    """The last MIG answer: the node's inventory (None: no MIG-enabled GPU, or not asked yet)."""

    inventory: Optional[mig_listing.MigInventory] = None
    instances: dict[int, int] = field(default_factory=dict)  # GPU index -> GPU instances


def read_mig(call: Call, deadline: float) -> MigDetails:
    """The four listings as one inventory; ParseError / the runner's errors when one fails.
    A GPU ``-lgip`` lists (MIG enabled) with no GPU instance has 0 partitions."""
    parts = []
    for listing in MIG_LISTINGS:
        text = call(["mig", listing], deadline)
        head = text.strip()[:200]
        if head.startswith(_NO_MIG):
            return MigDetails()
        if _NONE.match(head):  # "No GPU instances found": an answer, nothing created
            parts.append(mig_listing.MigInventory((listing,)))
            continue
        parts.append(mig_listing.parse(text))
    inv = mig_listing.merge(parts)
    counts = {p.gpu: 0 for p in inv.profiles}
    for gi in inv.gpu_instances:
        counts[gi.gpu] = counts.get(gi.gpu, 0) + 1
    return MigDetails(inv, counts)


def read_nvlink(call: Call, deadline: float) -> dict[str, Mapping[str, Reading]]:
    """uuid -> the link readings of ``nvlink -s`` (a GPU with no link line: none)."""
    text = call(["nvlink", "-s"], deadline)
    if not text.strip():
        return {}
    snap = nvlink_status.parse(text)
    return {d.identity.uuid: d.readings for d in snap.devices if len(d.readings) > 2}


class Details:
    """Runs the due slow calls and adds what they answered to the cycle's GPUs."""

    def __init__(self, call: Call, cycle_seconds: float, intervals: Optional[Mapping[str, float]] = None):
        self._call = call
        self.schedule = DetailSchedule(DEFAULT_INTERVALS if intervals is None else intervals, cycle_seconds, 2)

    def refresh(self, now: float, deadline: float) -> None:
        for job in self.schedule.due([NVLINK, MIG], now):
            self._run(job, now, deadline)

    def _run(self, job: Job, now: float, deadline: float) -> None:
        try:
            value: object = read_nvlink(self._call, deadline) if job == NVLINK else read_mig(self._call, deadline)
        except _FAILURES as e:
            log.warning("nvidia-smi %s: %s (keeping the previous answer)", job[1], e)
            self.schedule.done(job, now, ok=False)
            return
        self.schedule.done(job, now, value)

    @property
    def mig(self) -> Optional[MigDetails]:
        st = self.schedule.latest(MIG)
        return st.value if st is not None and isinstance(st.value, MigDetails) else None

    def apply(self, d: DeviceSample, now: float) -> DeviceSample:
        """``d`` (a GPU, not a MIG instance) with the detail readings answered for it."""
        if d.identity.parent is not None:
            return d
        extra: dict[str, Reading] = {}
        links = self.schedule.latest(NVLINK)
        if links is not None:
            age = links.age(now)
            for name, r in links.value.get(d.identity.uuid, {}).items():
                extra[name] = Reading(r.value, r.quality.with_status(r.quality.status, age))
        mig = self.schedule.latest(MIG)
        if mig is not None and d.identity.index in mig.value.instances:
            q = Quality(f"{mig_listing.TOOL} -lgi: GPU instances", "measured", None, 1.0)
            extra[PARTITIONS] = Reading(float(mig.value.instances[d.identity.index]),
                                        q.with_status("ok", mig.age(now)))
        return replace(d, readings={**d.readings, **extra}) if extra else d
