"""Cost (FinOps, issue 19): what each team's accelerators cost per hour, and what the chips that are
cheaper per compute unit than the reference device save. The same arithmetic as the recording rules
of alerts/rules.py (group hetero-exporter.finops), written on the raw series here so that the
node, vendor, model and namespace variables filter it:

    cost = share x price;  reference cost = share x compute units x reference price per compute unit;
    saving = reference cost - cost;  idle cost = cost of devices busy less than IDLE_UTILIZATION.

A shared device's shares sum to at most 1, so it is charged once however many pods share it.
"""

from panels import Q, Section, build_dashboard, by_device, sel, stat, table, timeseries

from hetero_exporter.model import names as N

IDLE_UTILIZATION = 0.1  # as alerts/rules.py
ON = "on(node, uuid) group_left()"
NS = "{{namespace}}"

share = sel(N.ALLOCATION_SHARE)
# per container and device: its part of the device's price, with the device's model
cost = by_device(f"{share} * {ON} {sel(N.PRICE_PER_HOUR)}", ("model",))
# the reference price per compute unit of each node: a device priced by cost weight costs
# reference price x cost weight (the reference has cost weight 1 and compute units 1)
COST_WEIGHT_BASIS = 'basis="cost-weight"'
reference_price = f"max by (node) ({sel(N.PRICE_PER_HOUR, COST_WEIGHT_BASIS)} / {ON} {sel(N.COST_WEIGHT)})"
units = by_device(f"{share} * {ON} {sel(N.COMPUTE_UNITS)}", ("model",))
reference_cost = f"({units}) * on(node) group_left() {reference_price}"
idle = f"({cost}) * {ON} ({sel(N.UTILIZATION)} < bool {IDLE_UTILIZATION})"


def saving(by: str) -> str:
    return f"sum by ({by}) ({reference_cost}) - sum by ({by}) ({cost})"


# energy (sources/energy.py): joules per container over the dashboard's range, with the model
# filter through the info join; kWh = J / 3.6e6, carbon = kWh x $carbon_intensity (g CO2e / kWh)
J_PER_KWH = 3.6e6
container_joules = by_device(f"increase({sel(N.CONTAINER_ENERGY)}[$__range])", ("model",))
container_watts = by_device(f"rate({sel(N.CONTAINER_ENERGY)}[$__rate_interval])", ("model",))
unattributed_watts = by_device(f"rate({sel(N.UNATTRIBUTED_ENERGY)}[$__rate_interval])", ("model",))
CARBON = ("Carbon is energy times the carbon_intensity variable (g CO2e per kWh): an example value; "
          "set your grid's or your provider's figure.")

CURRENCY = "Prices are per device-hour in the currency of the agent's finops configuration."

dashboard = build_dashboard(
    title="Accelerators / Cost",
    uid="hetero-cost",
    description="What the accelerators cost per hour by namespace, pod, vendor and model, their energy and "
                "carbon per namespace, the saving of "
                "chips cheaper per compute unit than the reference device, and the cost of allocated "
                "devices left idle. " + CURRENCY,
    var_names=("node", "vendor", "model", "namespace", "carbon_intensity"),
    sections=[
        Section("Now", [[
            stat("Cost per hour", "Allocated accelerator cost per hour, all namespaces selected. " + CURRENCY,
                 f"sum({cost})"),
            stat("Saving per hour",
                 "What the allocated compute units would cost on the reference device, minus what they cost.",
                 f"sum({reference_cost}) - sum({cost})"),
            stat("Idle cost per hour",
                 f"Cost of allocated devices busy less than {IDLE_UTILIZATION:.0%}.", f"sum({idle})"),
            stat("Compute units held", "Compute units (reference device = 1) allocated to the selected namespaces.",
                 f"sum({units})"),
        ]]),
        Section("Cost", [[
            timeseries("Cost by namespace",
                       "Cost per hour of each namespace: its share of each device times the device's price. "
                       "Two pods sharing one device are charged one device between them. " + CURRENCY,
                       Q(f"sum by (namespace) ({cost})", NS), stacked=True),
            timeseries("Cost by vendor and model", "Allocated cost per hour by vendor and device model.",
                       Q(f"sum by (vendor, model) ({cost})", "{{vendor}} {{model}}"), stacked=True),
        ], [
            timeseries("Savings from non-reference chips",
                       "Per namespace: the compute units it holds priced at the reference device's price per "
                       "compute unit, minus what they cost. Positive: the chips are cheaper per compute unit "
                       "than the reference. Needs a device priced by cost weight on the node.",
                       Q(saving("namespace"), NS)),
            timeseries("Idle cost",
                       f"Per namespace: the cost of its allocated devices that are busy less than "
                       f"{IDLE_UTILIZATION:.0%} (0 when none is idle).",
                       Q(f"sum by (namespace) ({idle})", NS), stacked=True),
        ]]),
        Section("Energy", [[
            stat("Energy over the range, kWh", "Energy the selected namespaces' containers were charged over the "
                 "dashboard's range (their share of each device's energy).",
                 f"sum({container_joules}) / {J_PER_KWH:g}"),
            stat("Carbon over the range, kg CO2e", CARBON,
                 f"sum({container_joules}) / {J_PER_KWH:g} * $carbon_intensity / 1000"),
            stat("Unattributed power, W", "Power of the selected devices that no container's share explains "
                 "(idle devices, host processes).", f"sum({unattributed_watts})"),
        ], [
            timeseries("Power by namespace", "Average watts charged to each namespace: its containers' share of "
                       "each device's energy per second.", Q(f"sum by (namespace) ({container_watts})", NS),
                       unit="watt", stacked=True),
            table("Energy and carbon by namespace", "Per namespace over the dashboard's range: kWh and kg CO2e. "
                  + CARBON,
                  Q(f"sum by (namespace) ({container_joules}) / {J_PER_KWH:g}", "kWh"),
                  Q(f"sum by (namespace) ({container_joules}) / {J_PER_KWH:g} * $carbon_intensity / 1000",
                    "kg CO2e")),
        ]]),
        Section("Pods", [[
            timeseries("Top pods by cost", "The ten pods that cost the most per hour.",
                       Q(f"topk(10, sum by (namespace, pod) ({cost}))", "{{namespace}}/{{pod}}")),
            table("Pod cost", "Per pod: cost per hour, compute units held and their saving against the "
                  "reference device.",
                  Q(f"sum by (namespace, pod) ({cost})", "cost"),
                  Q(f"sum by (namespace, pod) ({units})", "compute units"),
                  Q(saving("namespace, pod"), "saving")),
        ], [
            table("Device prices", "Price per hour of each device and its basis: configured in finops.prices, "
                  "or the reference price times the profile's cost weight.",
                  Q(by_device(sel(N.PRICE_PER_HOUR), ("model", "index")), "price")),
            table("Currency and reference", "The currency of the prices and the reference device model of each "
                  "node's finops configuration.", Q(sel(N.FINOPS_INFO), "")),
        ]]),
    ],
)
