"""Health and faults: device health states, active reasons, fault events, ECC, missing devices
and the Kubernetes actions the health loop took (taints, conditions, events)."""

from panels import (Q, Section, TAINT_KEY, build_dashboard, by_device, external, in_state, increase, sel,
                    table, timeseries)

from hetero_exporter.model import names as N

DEV = "{{node}} {{vendor}}#{{index}} {{model}}"
identity = ("model", "index", "pci_address")

dashboard = build_dashboard(
    title="Accelerators / Health and faults",
    uid="hetero-health",
    description="Why devices are unhealthy, what the vendors reported, and what the agent did about it.",
    sections=[
        Section("Health", [[
            timeseries("Devices by health state", "Devices in each health state.",
                       Q(f"count by (state) ({in_state('.*')})", "{{state}}"), stacked=True),
            table("Devices not ok", "Devices whose health state is degraded, failed or unknown.",
                  Q(in_state("degraded|failed|unknown"))),
        ], [
            table("Active health reasons", "One row per active reason: fault code and a readable reason.",
                  Q(by_device(sel(N.HEALTH_REASON), identity))),
        ]]),
        Section("Faults", [[
            timeseries("Fault events", "Vendor fault events per device, code and recommended action.",
                       Q(f"sum by (node, vendor, uuid, model, index, code, action) "
                         f"({by_device(increase(N.FAULT_EVENTS))})", DEV + " {{code}} {{action}}"),
                       stacked=True),
            table("Fault counts and last seen", "Events per device and code since the agent started, and "
                  "seconds since the latest one.",
                  Q(by_device(sel(N.FAULT_EVENTS), identity), "events"),
                  Q(by_device(f"time() - {sel(N.FAULT_LAST)}", identity), "seconds ago")),
        ], [
            timeseries("ECC errors", "ECC errors per interval by severity; uncorrected errors need action.",
                       Q(f"sum by (node, vendor, model, severity) ({by_device(increase(N.ECC_ERRORS))})",
                         "{{node}} {{vendor}} {{model}} {{severity}}")),
            timeseries("Devices missing from the bus",
                       "Devices the PCI bus shows minus devices the vendor tool reports, per node and vendor.",
                       Q(f"{sel(N.DEVICES_EXPECTED)} - {sel(N.DEVICES_PRESENT)}", "{{node}} {{vendor}}")),
        ]]),
        Section("Kubernetes actions", [[
            timeseries("Nodes found unhealthy", "1 when the node policy finds the node unhealthy, whatever the "
                       "health mode (observe and dry-run only report it).",
                       Q(sel(N.HEALTH_NODE_UNHEALTHY), "{{node}}"), max_value=1),
            timeseries("Health actions", "Kubernetes actions of the health loop (taint, untaint, condition, "
                       "event, cordon) by result.",
                       Q(f"sum by (node, action, result) ({increase(N.HEALTH_ACTIONS)})",
                         "{{node}} {{action}} {{result}}"), stacked=True),
            timeseries("Kubernetes API reachable", "1 when the health loop's last round trip to the API succeeded.",
                       Q(sel(N.HEALTH_KUBERNETES_UP), "{{node}}"), max_value=1),
        ], [
            timeseries("Taint budget", "Accelerator nodes seen at the last budget check (total, tainted: the "
                       "largest count any agent reports), and 1 on the nodes whose taint the budget withholds.",
                       Q(f"max by (state) ({sel(N.HEALTH_BUDGET_NODES)})", "nodes {{state}}"),
                       Q(sel(N.HEALTH_BUDGET_EXHAUSTED), "{{node}} taint withheld")),
            table("Nodes with the accelerator taint",
                  f"Nodes carrying the {TAINT_KEY} taint, from kube-state-metrics (absent without it).",
                  Q(external("kube_node_spec_taint", f'key="{TAINT_KEY}"'))),
        ]]),
        Section("Policy, overrides and the vendor stack", [[
            timeseries("Fault promotions", "Devices whose fault code was promoted (health.promote: N occurrences "
                       "in a window), by vendor, code and the state it promoted to.",
                       Q(f"sum by (node, vendor, code, to) ({increase(N.HEALTH_PROMOTIONS)})",
                         "{{node}} {{vendor}} {{code}} to {{to}}"), stacked=True),
            table("Health overrides", "Devices an operator holds in a state (hetero-exporter health override), "
                  "and the seconds until the override ends.",
                  Q(by_device(f"{sel(N.HEALTH_OVERRIDE_UNTIL)} - time()", identity), "seconds left")),
            timeseries("Vendor stack components", "1 when a vendor's plugin pods on the node are all Ready and none "
                       "crash-loops, 0 otherwise, by vendor and component.",
                       Q(sel(N.STACK_COMPONENT_UP), "{{node}} {{vendor}} {{component}}"), max_value=1),
        ], [
            timeseries("Objects another writer holds", "The health loop's own objects (its NodeFeature, taint slot "
                       "Leases) that another writer holds or changed, at the last check, by kind.",
                       Q(sel(N.HEALTH_FOREIGN_OBJECTS), "{{node}} {{kind}}")),
            timeseries("Devices forgotten as removed", "Remembered devices forgotten in each interval: from an "
                       "earlier boot, on neither the PCI bus nor their tool.",
                       Q(increase(N.DEVICES_REMOVED), "{{node}} {{vendor}}"), stacked=True),
        ]]),
    ],
)
