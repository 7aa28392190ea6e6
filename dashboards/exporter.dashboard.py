"""The exporter itself: scrape health, collector success and duration, snapshot age, attribution
sources, the kernel-log follower, and the quality of every field (where it comes from, whether it is ok)."""

from panels import JOB, Q, Section, build_dashboard, external, increase, rate, sel, table, timeseries

from hetero_exporter.model import names as N

COL = "{{node}} {{collector}}"
job = f'job="{JOB}"'

dashboard = build_dashboard(
    title="Accelerators / Exporter",
    uid="hetero-exporter-self",
    description="Is the agent healthy on every node, and how good is the data it serves.",
    var_names=("node", "vendor"),
    sections=[
        Section("Agents", [[
            timeseries("Scrape up", "1 when Prometheus scraped the agent successfully.",
                       Q(external("up", job), "{{node}}"), max_value=1),
            timeseries("Scrape duration", "How long a scrape of /metrics takes.",
                       Q(external("scrape_duration_seconds", job), "{{node}}"), unit="s"),
            timeseries("Samples per scrape", "Series the agent serves.",
                       Q(external("scrape_samples_scraped", job), "{{node}}")),
            timeseries("Snapshot age", "Seconds since the snapshot being served was taken.",
                       Q(sel(N.SNAPSHOT_AGE), "{{node}}"), unit="s"),
        ]]),
        Section("Collectors", [[
            timeseries("Collector success", "1 when the collector's last cycle succeeded.",
                       Q(sel(N.COLLECTOR_SUCCESS), COL), max_value=1),
            timeseries("Collector duration", "Duration of each collector's last cycle.",
                       Q(sel(N.COLLECTOR_DURATION), COL), unit="s"),
            timeseries("Since last success", "Seconds since each collector's last successful cycle.",
                       Q(f"time() - {sel(N.COLLECTOR_LAST_SUCCESS)}", COL), unit="s"),
        ], [
            timeseries("Collector errors", "Failed cycles by kind (unavailable, timeout, busy, parse, exception).",
                       Q(increase(N.COLLECTOR_ERRORS), COL + " {{kind}}"), stacked=True),
            table("Why collectors fail", "The reason of each collector's last failed cycle.",
                  Q(sel(N.COLLECTOR_ERROR_INFO))),
            timeseries("Devices: PCI bus vs vendor tool", "Devices the PCI bus shows and the vendor tool reports.",
                       Q(sel(N.DEVICES_EXPECTED), "{{node}} {{vendor}} on the bus"),
                       Q(sel(N.DEVICES_PRESENT), "{{node}} {{vendor}} reported")),
        ]]),
        Section("Attribution sources", [[
            timeseries("Attribution source up", "1 when a source of pid -> pod attribution (procfs, pod-cache, "
                       "podresources) answered its last refresh; stale = 1 when it serves what it last knew.",
                       Q(sel(N.ATTRIBUTION_SOURCE_UP), "{{node}} {{source}} up"),
                       Q(sel(N.ATTRIBUTION_SOURCE_STALE), "{{node}} {{source}} stale"), max_value=1),
            timeseries("Attribution source age", "Seconds since each attribution source's last successful refresh.",
                       Q(f"time() - {sel(N.ATTRIBUTION_SOURCE_LAST_SUCCESS)}", "{{node}} {{source}}"), unit="s"),
            timeseries("Attribution source items", "What each source holds (pods, allocated devices, cached pids).",
                       Q(sel(N.ATTRIBUTION_SOURCE_ITEMS), "{{node}} {{source}}")),
        ]]),
        Section("Kernel log", [[
            timeseries("Kernel log follower up", "1 when the agent follows /dev/kmsg (or its configured file); "
                       "0: not mounted, or no CAP_SYSLOG (the agent's log says which).",
                       Q(sel(N.KERNEL_LOG_UP), "{{node}}"), max_value=1),
            timeseries("Kernel log records read", "Records per second the follower reads.",
                       Q(rate(N.KERNEL_LOG_RECORDS), "{{node}}")),
            timeseries("Kernel log lag", "Seconds the follower is behind the kernel log (0 when caught up).",
                       Q(sel(N.KERNEL_LOG_LAG), "{{node}}"), unit="s"),
        ], [
            timeseries("Faults from the kernel log", "Device faults the kernel log stated (source kmsg: Xid, SXid, "
                       "amdgpu RAS, resets, ring timeouts), by vendor and code.",
                       Q(increase(N.KERNEL_LOG_EVENTS), "{{node}} {{vendor}} {{code}}"), stacked=True),
            timeseries("Kernel log records lost", "Records overwritten before they were read, or events past the "
                       "bounded queue in a storm.",
                       Q(increase(N.KERNEL_LOG_DROPPED), "{{node}} {{reason}}"), stacked=True),
        ]]),
        Section("Pipelines, the health stream and the agent's own guards", [[
            timeseries("Export failures", "Exports to a pipeline (otlp, nvsentinel) that failed or were dropped, "
                       "in each interval.",
                       Q(increase(N.EXPORT_FAILURES), "{{node}} {{exporter}}"), stacked=True),
            timeseries("Health stream clients", "Clients watching the local health stream, by stream.",
                       Q(sel(N.HEALTH_STREAM_CLIENTS), "{{node}} {{stream}}")),
            timeseries("Health stream drops", "Clients dropped or refused, and updates a client did not get, in "
                       "each interval, by stream and reason.",
                       Q(increase(N.HEALTH_STREAM_CLIENTS_DROPPED), "{{node}} {{stream}} client {{reason}}"),
                       Q(increase(N.HEALTH_STREAM_MESSAGES_DROPPED), "{{node}} {{stream}} update {{reason}}")),
        ], [
            timeseries("TLS certificate expiry", "Seconds until the served TLS certificate (--web.config.file) "
                       "expires.",
                       Q(f"{sel(N.TLS_CERTIFICATE_EXPIRY)} - time()", "{{node}}"), unit="s"),
            timeseries("Vendor-tool processes killed", "Processes of vendor-tool calls killed past the deadline "
                       "outside the call's process group (a daemon the tool forked), in each interval.",
                       Q(increase(N.TOOL_PROCESSES_KILLED), "{{node}}")),
        ]]),
        Section("Field quality", [[
            table("Field status", "Devices per vendor, field and quality status (ok, unsupported, error, stale).",
                  Q(f"count by (vendor, field, status) ({sel(N.FIELD_STATUS)})")),
            table("Where each field comes from",
                  "Per vendor and field: the API call or CLI field, measured/sampled/derived/estimated, "
                  "averaging window and relative error bound.",
                  Q(f"max by (vendor, field, source, method, window_seconds, error_bound) ({sel(N.QUALITY_INFO)})")),
        ]], height=10),
    ],
)
