"""The Prometheus alert and recording rules, written from Python so that metric names come from
``hetero_exporter.model.names`` and are never retyped.

    python alerts/rules.py           # write alerts/hetero-exporter.rules.yml and deploy/base/prometheusrule.yaml
    python alerts/rules.py --check   # exit 1 when either is out of date

The recording rules (group hetero-exporter.finops, issue 19) give cost per hour by namespace,
pod, vendor and model, compute units held, their cost on the reference device and the saving
against it, and idle cost; FINOPS_RULES below spells out the arithmetic. Group hetero-exporter.fleet
(issue 28) records the fleet health SLI (healthy devices over expected devices, per vendor and
cluster-wide) and alerts on one fault code seen on many nodes at once (a rollout, not hardware);
FLEET_RULES below, docs/fleet-rules.md for operators.
Unit tests for every rule are in alerts/tests/ (``promtool test rules``); tests/test_alerts.py runs
them, and tests/test_prometheus_integration.py loads the rules into a real Prometheus.
Every rule carries the labels ``severity`` (critical | warning) and ``component``, and the
annotations ``summary``, ``description`` and ``runbook`` (what to do, in plain text, so that
the notification itself says it). ``node`` comes from the scrape's relabelling (deploy/).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from hetero_exporter.model import names as N

HERE = Path(__file__).resolve().parent
RULES_FILE = HERE / "hetero-exporter.rules.yml"
PROMETHEUS_RULE = HERE.parent / "deploy" / "base" / "prometheusrule.yaml"
JOB = "hetero-exporter"  # the scrape job (jobLabel of deploy/base/servicemonitor.yaml)

# Thresholds (defaults for a mixed fleet; tune per site). Temperatures are where NVIDIA, AMD and
# Ascend data-centre parts start to slow down: core/board around 85-90 °C, HBM around 95 °C.
CORE_HOT_CELSIUS = 85
MEMORY_HOT_CELSIUS = 95
FAULT_BURST_EVENTS = 5          # fault events on one device ...
FAULT_BURST_WINDOW = "10m"      # ... within this window
ECC_WINDOW = "30m"
STALE_SNAPSHOT_SECONDS = 60     # six cycles at the default 10 s interval
UNATTRIBUTED_RATIO = 0.25       # of the device's memory, held by no reported process
CERT_EXPIRY_DAYS = 7            # the served TLS certificate expires within this many days
CORRELATED_NODES = 5            # the same fault code on this many nodes ...
CORRELATION_WINDOW = "10m"      # ... within this window is a driver/firmware/software event
CORRELATION_WINDOW_SECONDS = 600

# Device identity for annotations, looked up when the alert fires (the expression itself does
# not join, so an alert never vanishes because the info series is missing).
IDENTITY = ('{{ with printf "%s{uuid=%%q}" $labels.uuid | query }}{{ with first . }}'
            "index {{ .Labels.index }}, {{ .Labels.model }}, PCI {{ .Labels.pci_address }}"
            "{{ end }}{{ else }}identity unknown{{ end }}") % N.DEVICE_INFO.name
DEVICE = "{{ $labels.vendor }} device {{ $labels.uuid }} on node {{ $labels.node }}"


@dataclass(frozen=True)
class Rule:
    alert: str
    expr: str
    severity: str
    summary: str
    description: str
    runbook: str
    for_: Optional[str] = None

    def to_dict(self) -> dict:
        d: dict = {"alert": self.alert, "expr": self.expr}
        if self.for_:
            d["for"] = self.for_
        d["labels"] = {"severity": self.severity, "component": "accelerator"}
        d["annotations"] = {"summary": self.summary, "description": self.description, "runbook": self.runbook}
        return d


DEVICE_RULES = [
    Rule("AcceleratorDeviceFailed",
         f'{N.HEALTH_STATUS.name}{{state="failed"}} == 1', "critical", for_="1m",
         summary=f"Accelerator failed: {DEVICE}",
         description=f"{DEVICE} ({IDENTITY}) has been in health state failed for 1 minute. "
                     f"{N.HEALTH_REASON.name} gives the fault code and reason.",
         runbook="Check the node's AcceleratorUnhealthy condition and events (kubectl describe node) for "
                 "the fault code. Drain the workloads on the device, then reset the device or reboot the "
                 "node; if the fault returns, open a hardware case with the device serial/uuid. If "
                 "AcceleratorFaultOnManyNodes fires for the same vendor and code, the cause is a driver, "
                 "firmware or software rollout: hold the hardware case and follow that alert."),
    Rule("AcceleratorFaultBurst",
         f"sum by (node, vendor, uuid) (increase({N.FAULT_EVENTS.name}[{FAULT_BURST_WINDOW}]))"
         f" >= {FAULT_BURST_EVENTS}", "warning",
         summary=f"Fault burst: {DEVICE}",
         description=f"{DEVICE} ({IDENTITY}) reported {{{{ $value | printf \"%.0f\" }}}} vendor fault events "
                     f"in {FAULT_BURST_WINDOW}.",
         runbook=f"Look at {N.FAULT_EVENTS.name} by code on the Health and faults dashboard. Repeated "
                 "application faults point at the workload; repeated device or link faults point at the "
                 "hardware: drain the device and reset it. The same code on many nodes at once is a rollout, "
                 "not hardware (AcceleratorFaultOnManyNodes, which inhibits this alert in "
                 "alerts/alertmanager.example.yml)."),
    Rule("AcceleratorUncorrectableECC",
         # summed so that the counter's own severity label does not clash with the alert's; a vendor
         # whose tool counts per RAS block only (no aggregate) is read from its blocks, never both
         f'(sum by (node, vendor, uuid) (increase({N.ECC_ERRORS.name}{{severity="uncorrected"}}[{ECC_WINDOW}]))'
         f' or sum by (node, vendor, uuid) (increase({N.ECC_BLOCK_ERRORS.name}{{severity="uncorrected"}}[{ECC_WINDOW}])))'
         " > 0", "warning",
         summary=f"Uncorrectable ECC errors: {DEVICE}",
         description=f"{DEVICE} ({IDENTITY}) counted {{{{ $value | printf \"%.0f\" }}}} uncorrectable ECC "
                     f"errors in {ECC_WINDOW}.",
         runbook="Data on the device may be corrupt: let the running job checkpoint or fail, drain the "
                 "device, reset it to retire/remap the bad pages or rows, and replace it if the count keeps "
                 "growing."),
    Rule("AcceleratorThermal",
         f'{N.TEMPERATURE.name}{{sensor=~"core|board"}} > {CORE_HOT_CELSIUS}'
         f' or {N.TEMPERATURE.name}{{sensor="memory"}} > {MEMORY_HOT_CELSIUS}', "warning", for_="5m",
         summary=f"Accelerator hot: {DEVICE}",
         description=f"{DEVICE} ({IDENTITY}) {{{{ $labels.sensor }}}} sensor has read "
                     f"{{{{ $value | printf \"%.0f\" }}}} °C for 5 minutes (limits: core and board "
                     f"{CORE_HOT_CELSIUS} °C, memory {MEMORY_HOT_CELSIUS} °C); expect clock throttling.",
         runbook="Compare with the other devices of the node: one hot device suggests its fan, heat sink or "
                 "airflow; the whole node suggests inlet temperature or cooling. Check the clocks panel for "
                 "throttling."),
    Rule("AcceleratorMemoryRemapFailed",
         f"{N.REMAP_FAILED.name} == 1", "warning",
         summary=f"Memory row remap failed: {DEVICE}",
         description=f"{DEVICE} ({IDENTITY}) could not remap a failing memory row: it has no spare rows left.",
         runbook="The device can no longer repair its memory: drain it and open a hardware case to replace it. "
                 "Until then expect uncorrectable ECC errors and application faults on it."),
    Rule("AcceleratorPCIeLinkDegraded",
         f"{N.PCIE_WIDTH.name} < {N.PCIE_WIDTH_MAX.name}", "warning", for_="15m",
         summary=f"PCIe link narrower than it can be: {DEVICE}",
         description=f"{DEVICE} ({IDENTITY}) has run its PCIe link at {{{{ $value }}}} lanes for 15 minutes, "
                     "fewer than the device and its slot support; host transfers are slower.",
         runbook="Usually a badly seated card, riser or cable: reseat it at the next maintenance. A lower PCIe "
                 "generation alone is power saving at idle and not alerted on."),
    Rule("AcceleratorUnattributedMemoryHigh",
         f"{N.UNATTRIBUTED_MEMORY.name} / {N.MEMORY_TOTAL.name} > {UNATTRIBUTED_RATIO}", "warning", for_="15m",
         summary=f"Device memory held by no known process: {DEVICE}",
         description=f"{{{{ $value | humanizePercentage }}}} of the memory of {DEVICE} ({IDENTITY}) has been in "
                     "use by no reported process for 15 minutes.",
         runbook="Usually a process outside the agent's view (hostPID off, another container runtime) or "
                 "memory leaked by a crashed job. List the device's processes with the vendor tool on the "
                 "node; if none holds the memory, drain and reset the device."),
]

NODE_RULES = [
    Rule("AcceleratorDeviceMissing",
         f"{N.DEVICES_EXPECTED.name} > {N.DEVICES_PRESENT.name}", "critical", for_="5m",
         summary="{{ $labels.vendor }} accelerator missing from the vendor tool on node {{ $labels.node }}",
         description="The PCI bus of node {{ $labels.node }} shows more {{ $labels.vendor }} devices than "
                     "the vendor tool reports, for 5 minutes: a device fell off the bus or its driver "
                     "did not bind.",
         runbook="On the node compare lspci with the vendor tool (nvidia-smi, amd-smi, npu-smi info, "
                 "cnmon) and read the kernel log (dmesg) for the PCI address. A device that fell off the "
                 "bus needs a node reboot; if it stays missing, a hardware case."),
    Rule("AcceleratorTaintBudgetExhausted",
         f"{N.HEALTH_BUDGET_EXHAUSTED.name} == 1", "critical", for_="1m",
         summary="Taint withheld on node {{ $labels.node }}: taint budget exhausted",
         description="The agent on node {{ $labels.node }} wants to taint the node for an unhealthy "
                     "accelerator but does not, because the share of accelerator nodes that already carry "
                     "its taint has reached the configured budget. Pods can still be scheduled onto the "
                     "unhealthy node.",
         runbook="Many nodes failing at once usually has one cause (driver rollout, firmware, power or "
                 "cooling of a rack): find it first. Then cordon the affected nodes by hand or raise the "
                 "budget in the agent's health configuration."),
]

AGENT_RULES = [
    Rule("AcceleratorExporterDown",
         f'up{{job="{JOB}"}} == 0', "warning", for_="5m",
         summary="hetero-exporter on node {{ $labels.node }} cannot be scraped",
         description="Prometheus has failed to scrape {{ $labels.instance }} (node {{ $labels.node }}) "
                     "for 5 minutes: no accelerator metrics, health or fault data from that node.",
         runbook="kubectl -n <namespace> get pods -o wide for the DaemonSet pod on the node; read its logs "
                 "and events (crash loop, OOM kill, image pull, failing probes)."),
    Rule("AcceleratorCollectorDown",
         f"{N.COLLECTOR_SUCCESS.name} == 0", "warning", for_="5m",
         summary="Collector {{ $labels.collector }} failing on node {{ $labels.node }}",
         description="Every cycle of collector {{ $labels.collector }} on node {{ $labels.node }} has failed "
                     "for 5 minutes"
                     '{{ with printf "%s{collector=%%q, node=%%q}" $labels.collector $labels.node | query }}'
                     '{{ with first . }} ({{ .Labels.kind }}: {{ .Labels.reason }}){{ end }}{{ end }}; '
                     "its devices are served stale with health unknown." % N.COLLECTOR_ERROR_INFO.name,
         runbook="unavailable: the vendor binding or tool is missing from the image or the host mounts; "
                 "timeout/late/busy: the vendor tool hangs (driver problem, check dmesg); parse: the tool's output "
                 "changed, capture it and report it with hetero-exporter parse."),
    Rule("AcceleratorKernelLogDown",
         f"{N.KERNEL_LOG_UP.name} == 0", "warning", for_="10m",
         summary="hetero-exporter on node {{ $labels.node }} cannot read the kernel log",
         description="The kernel-log follower on node {{ $labels.node }} has not been reading /dev/kmsg (or its "
                     "configured file) for 10 minutes: Xid, SXid, fallen-off-the-bus and amdgpu RAS lines "
                     "that the vendor tools do not report go unseen.",
         runbook="Check that the DaemonSet mounts /dev/kmsg and that the container may read it (CAP_SYSLOG "
                 "where kernel.dmesg_restrict=1); the agent's log names the reason once at start."),
    # rate-limited (info-only lines past the rule budget) and code-cap (codes folded into "other",
    # worst severity kept) lose no fault: counted on /metrics, not alerted on
    Rule("AcceleratorKernelLogRecordsLost",
         f'increase({N.KERNEL_LOG_DROPPED.name}{{reason!~"rate-limited|code-cap"}}[15m]) > 0', "warning",
         summary="Kernel log records lost on node {{ $labels.node }} ({{ $labels.reason }})",
         description="{{ $value | humanize }} kernel-log records or events were lost on node {{ $labels.node }} "
                     "in 15 minutes (reason {{ $labels.reason }}: overwritten in the ring buffer before they "
                     "were read, past the bounded queue in a storm, or naming a device not seen in time); a "
                     "device fault may have gone unseen.",
         runbook="Read dmesg on the node for a message storm (a flapping device, a looping driver); "
                 "compare with the devices' health. overwritten: the agent was down or too slow; queue-full: "
                 "a storm, raise kernel_log.max_pending if it is legitimate; unresolved: the line named a "
                 "device no collector reported (compare the PCI addresses in dmesg with inspect)."),
    Rule("AcceleratorExporterCertificateExpiring",
         f"{N.TLS_CERTIFICATE_EXPIRY.name} - time() < {CERT_EXPIRY_DAYS} * 86400", "warning",
         summary="hetero-exporter's TLS certificate on node {{ $labels.node }} expires soon",
         description="The certificate hetero-exporter serves on node {{ $labels.node }} expires in "
                     "{{ $value | humanizeDuration }} (negative: already expired); Prometheus and kube-scheduler "
                     "then refuse the connection and its metrics and health signals stop.",
         runbook="Renew the Secret mounted for --web.config.file (cert-manager: check the Certificate's status "
                 "and events); the agent reloads the files without a restart. The agent's log says whether a "
                 "renewed file failed to load."),
    # The gauge is absent in observe mode (no cluster access expected there), 0 in dry-run/enforce
    # when the agent has no credentials or its requests fail: only the modes that act can fire.
    Rule("AcceleratorHealthKubernetesDown",
         f"{N.HEALTH_KUBERNETES_UP.name} == 0", "warning", for_="10m",
         summary="hetero-exporter on node {{ $labels.node }} cannot reach the Kubernetes API",
         description="The health loop on node {{ $labels.node }} runs in dry-run or enforce mode but has had no "
                     "working Kubernetes API access for 10 minutes: a failed accelerator gets no taint, no "
                     "AcceleratorUnhealthy condition and no event, and pods keep being scheduled onto it.",
         runbook="Read the agent's log on the node: 'health loop writes nothing' names the missing credentials "
                 "(no kubeconfig, no in-cluster service account); 'cannot read the node' an unreachable API "
                 "server or a denied request (the ClusterRole in deploy/base/rbac.yaml; the node-restriction "
                 "admission policy needs the node name in the service account token, Kubernetes 1.30+). "
                 "Set health.mode to observe where the agent is not meant to act."),
    # The plugin pods the devices need (issue 38 §4, health/plan/stack.py): 0 while a vendor's device
    # plugin / DRA kubelet plugin pod on the node crash-loops or is not Ready, or none of them runs
    # (component "plugins"); the node's AcceleratorUnhealthy condition names it after the grace.
    Rule("AcceleratorPluginDown",
         # every rule's own label "component" replaces the series' one: kept apart as "plugin"
         f'label_replace({N.STACK_COMPONENT_UP.name} == 0, "plugin", "$1", "component", "(.*)")', "warning",
         for_="10m",
         summary="{{ $labels.vendor }} {{ $labels.plugin }} on node {{ $labels.node }} is down",
         description="For 10 minutes the {{ $labels.vendor }} {{ $labels.plugin }} pods on node {{ $labels.node }} "
                     "have been crash-looping or not Ready (plugins: no device plugin or DRA kubelet "
                     "plugin of the vendor runs there at all): the node's devices may be healthy, but no new pod "
                     "can be given one.",
         runbook="kubectl get pods -A --field-selector spec.nodeName={{ $labels.node }} -o wide, then describe "
                 "the vendor's plugin pod and read its logs (previous container too): a driver or runtime the "
                 "plugin cannot load, a missing host path, a config it rejects. Absent: check the DaemonSet's "
                 "node selector and tolerations against the node's labels and taints. A plugin of another name "
                 "(HAMi, a custom one): set health.stack to false on such nodes."),
    Rule("AcceleratorSnapshotStale",
         f"{N.SNAPSHOT_AGE.name} > {STALE_SNAPSHOT_SECONDS}", "warning", for_="2m",
         summary="hetero-exporter on node {{ $labels.node }} serves a stale snapshot",
         description="The snapshot served on node {{ $labels.node }} is {{ $value | humanizeDuration }} old: "
                     "the collection loop is stuck or the interval is longer than "
                     f"{STALE_SNAPSHOT_SECONDS} s.",
         runbook="Read the agent's logs on the node for a stuck cycle; restart the pod. If the interval is "
                 "deliberately long, raise this rule's threshold."),
]

# --------------------------------------------------------------------------- FinOps recording rules
#
# Cost per hour, in the currency of the finops info series (N.FINOPS_INFO), named level:metric:operations
# (https://prometheus.io/docs/practices/rules/). With S the share of a device a container holds,
# P the device's price per hour, CU its compute units and U its utilization:
#   cost            = sum S * P
#   compute units   = sum S * CU
#   reference cost  = sum S * CU * R, R = the node's reference price per compute unit (below)
#   saving          = reference cost - cost
#   idle cost       = sum S * P over devices with U < IDLE_UTILIZATION
# A device shared by two containers has shares summing to at most 1, so it is charged once.
# Joins are on (node, uuid): node comes from the scrape's relabelling and matches where absent.

IDLE_UTILIZATION = 0.1  # an allocated device busy less than this is idle
PREFIX = N.DEVICE_INFO.name.split("_")[0]  # "accelerator": recording rules are PREFIX_<metric>
_ON = "on(node, uuid) group_left()"


@dataclass(frozen=True)
class Record:
    """A recording rule: ``level:metric:operations`` (``record``) = ``expr``."""
    level: str
    metric: str
    operations: str
    expr: str

    @property
    def record(self) -> str:
        return f"{self.level}:{PREFIX}_{self.metric}:{self.operations}"

    def to_dict(self) -> dict:
        return {"record": self.record, "expr": self.expr}


SHARE, PRICE, UNITS = N.ALLOCATION_SHARE.name, N.PRICE_PER_HOUR.name, N.COMPUTE_UNITS.name
SHARE_COST = f"{SHARE} * {_ON} {PRICE}"  # per container and device: its part of the device's price
# The reference price per compute unit, per node. First the reference device itself where the node
# has one (its price over its compute units: the device info model equals finops_info's reference);
# else any device priced on basis="cost-weight", whose price is reference price * cost_weight (the
# reference profile's cost_weight is 1 and its compute units 1: the A100-SXM4-80GB of profiles.yaml).
# A node with neither (every device priced in the config, none of them the reference) has none,
# and its reference cost and saving are absent rather than wrong.
REFERENCE_DEVICE = (f'label_replace({N.DEVICE_INFO.name}, "reference", "$1", "model", "(.+)")'
                    f" * on(node, reference) group_left() {N.FINOPS_INFO.name}")
REFERENCE_PRICE = Record(
    "node", "reference_price_per_compute_unit_hour", "max",
    f"max by (node) ({PRICE} / {_ON} {UNITS} * {_ON} ({REFERENCE_DEVICE}))"
    f' or max by (node) ({PRICE}{{basis="cost-weight"}} / {_ON} {N.COST_WEIGHT.name})')
COST = Record("namespace", "cost_per_hour", "sum", f"sum by (namespace) ({SHARE_COST})")
UNITS_HELD = Record("namespace", "compute_units", "sum", f"sum by (namespace) ({SHARE} * {_ON} {UNITS})")
REFERENCE_COST = Record(
    "namespace", "reference_cost_per_hour", "sum",
    f"sum by (namespace) ({SHARE} * {_ON} {UNITS} * on(node) group_left() {REFERENCE_PRICE.record})")

FINOPS_RULES = [
    REFERENCE_PRICE,
    COST,
    Record("namespace_pod", "cost_per_hour", "sum", f"sum by (namespace, pod) ({SHARE_COST})"),
    Record("vendor_model", "cost_per_hour", "sum",
           f"sum by (vendor, model) ({SHARE_COST} * on(node, uuid) group_left(model) {N.DEVICE_INFO.name})"),
    UNITS_HELD,
    REFERENCE_COST,
    Record("namespace", "cost_savings_per_hour", "sum", f"{REFERENCE_COST.record} - {COST.record}"),
    Record("namespace", "idle_cost_per_hour", "sum",
           f"sum by (namespace) ({SHARE_COST} * {_ON} ({N.UTILIZATION.name} < bool {IDLE_UTILIZATION}))"),
]

# --------------------------------------------------------------------------- fleet rules (issue 28)
#
# The fleet health SLI: healthy devices / expected devices, per vendor and over the whole cluster,
# "one number for is my fleet good". Per node (the scrape's node label) and vendor:
#   expected = max(devices_expected, devices_present): what the PCI bus shows, or what the tool shows
#              where that is more or the PCI count is absent; a device on the bus that its tool does not
#              report is expected and not healthy. max by node: an agent scraped twice (a rolling
#              update) is counted once.
#   healthy  = devices in health state ok (degraded, failed, unknown and missing are not), each uuid
#              once, capped at expected (partition children, MIG instances, carry health series of
#              their own and no label tells them apart here: the cap keeps the ratio at most 1), 0
#              where none is ok.
# Then sum over nodes; a vendor (or a cluster) with no expected device has no SLI rather than NaN.

EXPECTED, PRESENT = N.DEVICES_EXPECTED.name, N.DEVICES_PRESENT.name
NODE_EXPECTED = Record("node_vendor", "devices_expected", "max",
                       f"max by (node, vendor) (({EXPECTED} >= {PRESENT}) or {PRESENT} or {EXPECTED})")
_OK = f"count by (node, vendor) (max by (node, vendor, uuid) ({N.HEALTH_STATUS.name}{{state=\"ok\"}}) == 1)"
NODE_HEALTHY = Record("node_vendor", "devices_healthy", "count",
                      f"({_OK} <= {NODE_EXPECTED.record}) or ({NODE_EXPECTED.record} < {_OK})"
                      f" or (0 * {NODE_EXPECTED.record})")
VENDOR_SLI = Record("vendor", "devices_healthy", "ratio",
                    f"sum by (vendor) ({NODE_HEALTHY.record}) / (sum by (vendor) ({NODE_EXPECTED.record}) > 0)")
CLUSTER_SLI = Record("cluster", "devices_healthy", "ratio",
                     f"sum({NODE_HEALTHY.record}) / (sum({NODE_EXPECTED.record}) > 0)")


def recent_faults(*matchers: str, window: str = CORRELATION_WINDOW,
                  seconds: int = CORRELATION_WINDOW_SECONDS) -> str:
    """The fault series (one per device and code) with an event within the window: the latest
    event's timestamp is that recent (this sees a code's first event too, whose counter series
    starts at 1 and so has no increase), or the counter grew."""
    m = "{%s}" % ", ".join(matchers) if matchers else ""
    return (f"time() - {N.FAULT_LAST.name}{m} <= {seconds}"
            f" or increase({N.FAULT_EVENTS.name}{m}[{window}]) > 0")


# Annotation lookups for one vendor and code (Go template printf arguments: vendor, code, vendor, code).
_RECENT_FOR_CODE = recent_faults("vendor=%q", "code=%q").replace('"', '\\"')  # inside a Go string
_ARGS = "$labels.vendor $labels.code $labels.vendor $labels.code"
AFFECTED_NODES = (f'{{{{ range $i, $s := printf "topk(10, count by (node) ({_RECENT_FOR_CODE}))" {_ARGS}'
                  ' | query | sortByLabel "node" }}{{ if $i }}, {{ end }}{{ $s.Labels.node }}{{ end }}')
AFFECTED_DRIVERS = (f'{{{{ range $i, $s := printf "count by (driver_version) ({N.DEVICE_INFO.name}'
                    f' and on(node, uuid) ({_RECENT_FOR_CODE}))" {_ARGS}'
                    ' | query | sortByLabel "driver_version" }}{{ if $i }}, {{ end }}'
                    '{{ $s.Labels.driver_version }}: {{ $s.Value }}{{ else }}unknown{{ end }}')

FAULT_ON_MANY_NODES = Rule(
    "AcceleratorFaultOnManyNodes",
    f"count by (vendor, code) (count by (node, vendor, code) ({recent_faults()})) >= {CORRELATED_NODES}",
    "warning",
    summary="{{ $labels.vendor }} fault {{ $labels.code }} on {{ $value | printf \"%.0f\" }} nodes within "
            f"{CORRELATION_WINDOW}: likely a driver, firmware or software rollout, not hardware",
    description="The same {{ $labels.vendor }} fault code {{ $labels.code }} was reported on "
                "{{ $value | printf \"%.0f\" }} nodes within "
                f"{CORRELATION_WINDOW} (threshold {CORRELATED_NODES} nodes). That is most likely a driver, firmware "
                "or software rollout event (or one workload spread over those nodes), not "
                "{{ $value | printf \"%.0f\" }} broken devices. Nodes (at most 10): "
                f"{AFFECTED_NODES}. Affected devices by driver version: {AFFECTED_DRIVERS}.",
    runbook="Do not open hardware cases for these devices yet. Find what changed on these nodes in the last hour: "
            "driver or firmware version (compare driver_version on the Fleet overview), node image or kernel, "
            "device plugin or operator rollout, a new CUDA/ROCm/CANN in a widely used container image, or one "
            "job spread over the nodes. Pause or roll back that change and look the code up in the vendor's "
            "release notes. Per-device fault bursts of this vendor are inhibited while this fires; failed "
            "devices still page and stay tainted: they are out of service whatever the cause.")

FLEET_RULES = [NODE_EXPECTED, NODE_HEALTHY, VENDOR_SLI, CLUSTER_SLI, FAULT_ON_MANY_NODES]

GROUPS = [("hetero-exporter.devices", DEVICE_RULES), ("hetero-exporter.nodes", NODE_RULES),
          ("hetero-exporter.agent", AGENT_RULES), ("hetero-exporter.finops", FINOPS_RULES),
          ("hetero-exporter.fleet", FLEET_RULES)]
ALL_RULES = [r for _, rules in GROUPS for r in rules if isinstance(r, Rule)]  # the alerts
RECORDING_RULES = [r for _, rules in GROUPS for r in rules if isinstance(r, Record)]


def rule_groups() -> dict:
    """The ``groups`` document of a Prometheus rule file."""
    return {"groups": [{"name": name, "rules": [r.to_dict() for r in rules]} for name, rules in GROUPS]}


def _dump(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, width=4096, allow_unicode=True)


def rules_yaml() -> str:
    return "# Generated by alerts/rules.py; edit that file, then run it.\n" + _dump(rule_groups())


def prometheus_rule_yaml() -> str:
    """The same groups as a prometheus-operator PrometheusRule (deploy/base)."""
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "hetero-exporter", "labels": {"app.kubernetes.io/name": "hetero-exporter",
                                                              "app.kubernetes.io/component": "alerts"}},
           "spec": rule_groups()}
    return "# Generated by alerts/rules.py from the same rules as alerts/hetero-exporter.rules.yml.\n" + _dump(doc)


OUTPUTS = {RULES_FILE: rules_yaml, PROMETHEUS_RULE: prometheus_rule_yaml}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    args = ap.parse_args(argv)
    stale = [p for p, make in OUTPUTS.items() if not p.is_file() or p.read_text(encoding="utf-8") != make()]
    if args.check:
        for p in stale:
            print(f"out of date: {p.relative_to(HERE.parent)} (run: python alerts/rules.py)", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(OUTPUTS[p](), encoding="utf-8")
        print(f"wrote {p.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
