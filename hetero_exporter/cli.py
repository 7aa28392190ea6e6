"""Command line: argument parsing, and dispatch to the assembly (app/).

    hetero-exporter run [--listen HOST:PORT] [--interval S] [--config FILE] [--simulate [SCENARIO]]
                        [--collector.NAME | --no-collector.NAME] [--node-name NAME] [--kubeconfig FILE]
                        [--health-mode observe|dry-run|enforce] [--log-format json|text]
                        [--kernel-log PATH|off]
    hetero-exporter inspect [--simulate [SCENARIO]] [--at T] [--json]
    hetero-exporter top [--simulate [SCENARIO]] [--from http://HOST:PORT] [--interval S] [--once]
    hetero-exporter parse TOOL FILE [--json]        (TOOL kernel-log: a dmesg / journal / kmsg capture)
    hetero-exporter health --dry-run [--json] [--simulate [SCENARIO]] [--node-name NAME] [--kubeconfig FILE]
    hetero-exporter health override --node N --device UUID (--state ok|failed --for DURATION --reason TEXT | --clear)
    hetero-exporter scheduler-extender [--listen HOST:PORT] [--kubeconfig FILE] [--policy binpack|spread]
    hetero-exporter score --pod POD.yaml --nodes NODES.json [--policy binpack|spread] [--json]
    hetero-exporter version
    (run, inspect, top, health) [--host-root DIR]  vendor tools and driver libraries below the host's root
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Any, Callable, Optional, Sequence

from hetero_exporter import __version__
from hetero_exporter import config as config_mod
from hetero_exporter import logs
from hetero_exporter import registry
from hetero_exporter.sdk.contract import ParseError
from hetero_exporter.sdk.capture import DEFAULT_MAX_BYTES as CAPTURE_MAX_BYTES, CaptureError, open_capture, read_capture
from hetero_exporter.model import NodeSnapshot, snapshot_to_json, to_dict
from hetero_exporter.model.errors import EXIT_FAIL, EXIT_OK, EXIT_USAGE, ExitError, InputError, UsageError
from hetero_exporter.model.keys import DEFAULT_DOMAIN
from hetero_exporter.terminal import printable

log = logging.getLogger("hetero_exporter")

KERNEL_LOG_TOOL = "kernel-log"
KERNEL_LOG_PARSE_LIMIT = 1 << 30  # bytes `parse kernel-log` reads (streamed: memory stays bounded)


# --------------------------------------------------------------------------- arguments


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="YAML config file (see docs/install.md: Configuration)")
    p.add_argument("--simulate", nargs="?", const="default", metavar="SCENARIO",
                   help="run on a simulated node: a built-in scenario name or a scenario file "
                        "(default: the built-in 'default')")
    p.add_argument("--simulate-if-absent", action="store_true",
                   help="simulate the default scenario when the PCI bus shows no accelerator")
    p.add_argument("--at", type=float, default=None, metavar="T",
                   help="with --simulate: start the scenario clock at T seconds")
    p.add_argument("--kernel-log", metavar="PATH",
                   help="kernel log to follow as a health source: /dev/kmsg (default), 'syslog' (the same "
                        "ring buffer through syslog(2): CAP_SYSLOG, no device access), a text log "
                        "(/var/log/kern.log, followed like tail -F), or 'off'")
    p.add_argument("--node-name", help="node name (default: $NODE_NAME, else the host name)")
    p.add_argument("--host-root", metavar="DIR",
                   help="where the host's / is mounted (the DaemonSet: /host/root): vendor tools and driver "
                        "libraries are looked for below it (default: config host_root, else $HOST_ROOT)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--interval", type=float, help="seconds between collection cycles (default 10)")
    p.add_argument("--log-format", choices=("json", "text"), help="log line format (default json)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def _vendor_list() -> str:
    """The known vendors' display names, for --help (specs load cheaply: no binding)."""
    from hetero_exporter import vendors
    names = [s.display_name or s.name for s in vendors.specs().values()]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names) or "accelerators"


def _max_bytes(text: str) -> int:
    """``parse --max-bytes N``: a whole number of bytes, at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of bytes, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hetero-exporter",
        description="Accelerator telemetry and health agent for "
                    f"{_vendor_list()}.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="collect on an interval and serve /metrics",
                         epilog="Collectors: --collector.NAME enables, --no-collector.NAME disables "
                                f"({', '.join(sorted(registry.collector_entries()))}).")
    _add_common(run)
    run.add_argument("--listen", help="HOST:PORT to serve on (default 0.0.0.0:9400)")
    run.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                     help="TLS and basic auth for the endpoints (exporter-toolkit format, as node_exporter's)")
    run.add_argument("--health-mode", choices=("observe", "dry-run", "enforce"),
                     help="what the health loop may do to the node (default observe)")

    insp = sub.add_parser("inspect", help="collect once and print one table for all accelerators")
    _add_common(insp)
    insp.add_argument("--json", action="store_true", help="print the schema-1 JSON snapshot")

    tp = sub.add_parser("top", help="a live view of every accelerator on the node (q quits)")
    _add_common(tp)
    tp.add_argument("--from", dest="source", metavar="URL",
                    help="watch a running agent (http://HOST:9400: its /snapshot) instead of sampling here")
    tp.add_argument("--once", action="store_true", help="print one frame and exit (scripts, bug reports)")

    hl = _add_health(sub)
    parse = sub.add_parser("parse", help="turn a captured vendor output into the model")
    parse.add_argument("tool", metavar="TOOL", help="which tool printed FILE: " + ", ".join(
        sorted(set(registry.parsers()) | {KERNEL_LOG_TOOL})))
    parse.add_argument("file", metavar="FILE", help="the captured output ('-' for stdin)")
    parse.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parse.add_argument("--max-bytes", type=_max_bytes, default=CAPTURE_MAX_BYTES, metavar="N",
                       help="refuse a capture larger than N bytes (default 64 MiB; kernel-log streams "
                            "with its own limit)")

    ext = sub.add_parser("scheduler-extender", help="serve the kube-scheduler extender (/filter, /prioritize)")
    _add_scoring(ext)
    ext.add_argument("--listen", default="0.0.0.0:9401", help="HOST:PORT to serve on (default 0.0.0.0:9401)")
    ext.add_argument("--metrics-listen", metavar="HOST:PORT",
                     help="also serve /metrics (and the probes) alone on HOST:PORT, for a NetworkPolicy that "
                          "admits Prometheus there and only kube-scheduler to --listen")
    ext.add_argument("--web.config.file", dest="web_config_file", metavar="FILE",
                     help="TLS (kube-scheduler's enableHTTPS + tlsConfig) and basic auth (exporter-toolkit format)")
    ext.add_argument("--max-body-bytes", type=_max_bytes, default=64 * 2**20, metavar="N",
                     help="refuse (413) a request body over N bytes (default 64 MiB: ~2,000 whole Nodes; "
                          "node-cache mode sends names only)")
    ext.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else in-cluster; without "
                                          "any, only nodes-in-request mode is served)")
    ext.add_argument("--log-format", choices=("json", "text"), help="log line format (default json)")
    ext.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))

    score = sub.add_parser("score", help="the extender's decision for a pod, offline, with explanations")
    _add_scoring(score)
    score.add_argument("--pod", required=True, metavar="POD.yaml", help="the pod (or a workload with a pod template)")
    score.add_argument("--nodes", required=True, metavar="NODES.json",
                       help="node documents: a list, a map node -> document, or a NodeList")
    score.add_argument("--now", type=float, metavar="UNIX_SECONDS",
                       help="the time staleness is judged at (default: now)")
    score.add_argument("--json", action="store_true", help="print the /explain JSON instead of a table")

    version = sub.add_parser("version", help="print the version")
    # what each command runs: func(args, extra); the collector flags (--collector.NAME) are
    # the only unknown arguments a command may take, and only those that collect take them
    run.set_defaults(func=cmd_run, collects=True)
    insp.set_defaults(func=cmd_inspect, collects=True)
    hl.set_defaults(func=cmd_health, collects=True)
    # the screen is the view: log lines would tear it (collector failures are row states there)
    tp.set_defaults(func=cmd_top, collects=True, log_level="error")
    parse.set_defaults(func=_without_extra(cmd_parse), collects=False)
    ext.set_defaults(func=_without_extra(cmd_scheduler_extender), collects=False)
    score.set_defaults(func=_without_extra(cmd_score), collects=False)
    version.set_defaults(func=_without_extra(cmd_version), collects=False)
    return ap


def _add_health(sub: Any) -> argparse.ArgumentParser:
    """``health --dry-run [--json]`` (and its ``override`` subcommand)."""
    hl = sub.add_parser("health", help="print what the health loop would do on this node now, and why")
    _add_common(hl)
    hl.add_argument("--dry-run", action="store_true",
                    help="plan only (the agent acts from `run --health-mode enforce`)")
    hl.add_argument("--json", action="store_true",
                    help="with --dry-run: print the plan as JSON (per device: class, state, reasons, device "
                         "taint; per node: taint, condition, cordon, evictions)")
    _add_override(hl)
    return hl


def _add_override(health: argparse.ArgumentParser) -> None:
    """``health override``: an operator's override of one device's health on its Node."""
    sub = health.add_subparsers(dest="health_command", metavar="override")
    ov = sub.add_parser("override", help="set (or --clear) an operator's override of a device's health, "
                                         "which the agent honours until it expires")
    ov.add_argument("--node", required=True, help="the Node the device is on")
    ov.add_argument("--device", required=True, metavar="UUID", help="the device's uuid (as /metrics shows it)")
    ov.add_argument("--state", help="ok (a failed device serves again) or failed (take it out of service)")
    ov.add_argument("--for", dest="for_", metavar="DURATION", help="how long: 90s, 30m, 2h, 1d (at most 30d)")
    ov.add_argument("--reason", help="why, for the events and whoever looks next (one line)")
    ov.add_argument("--clear", action="store_true", help="remove the device's override now")
    ov.add_argument("--domain", default=DEFAULT_DOMAIN, help="annotation domain (health.domain)")
    ov.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    ov.add_argument("--log-format", choices=("json", "text"), help="log line format (default json)")
    ov.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    ov.set_defaults(func=_without_extra(cmd_health_override), collects=False)


def _without_extra(cmd: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace, Sequence[str]], int]:
    """A command that takes no collector flags: an unknown argument is a usage error."""
    def call(args: argparse.Namespace, extra: Sequence[str]) -> int:
        if extra:
            raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
        return cmd(args)
    return call


def _collector_flags(extra: Sequence[str]) -> dict[str, bool]:
    """``--collector.NAME`` / ``--no-collector.NAME`` -> {NAME: enabled}."""
    flags: dict[str, bool] = {}
    known = registry.collector_entries()
    for arg in extra:
        for prefix, value in (("--collector.", True), ("--no-collector.", False)):
            if arg.startswith(prefix):
                name = arg[len(prefix):]
                if name not in known:
                    raise UsageError(f"unknown collector {name!r}; known: {', '.join(sorted(known))}")
                flags[name] = value
                break
        else:
            raise UsageError(f"unrecognized argument {arg!r}")
    return flags


SCENARIO_T_MAX = 10 * 365 * 86400.0  # --at: scenario seconds
FRESH_SECONDS_MAX = 30 * 86400.0  # --fresh-seconds


def check_flags(args: argparse.Namespace) -> None:
    """The flags argparse leaves unchecked (a float it parsed may be 0, NaN or 1e12), checked as
    the config file's keys are: ValidationError naming the flag (exit 2)."""
    from hetero_exporter import validate as v
    checks = {
        "interval": config_mod.interval,
        "at": lambda p, x: v.number(p, x, minimum=0, maximum=SCENARIO_T_MAX, unit="seconds"),
        "fresh_seconds": lambda p, x: v.number(p, x, minimum=0, maximum=FRESH_SECONDS_MAX, unit="seconds"),
        "now": lambda p, x: v.number(p, x, minimum=0, maximum=1e11, unit="unix seconds"),
        "listen": v.host_port, "domain": v.dns_subdomain,
        "node_name": lambda p, x: v.string(p, x, non_empty=True, max_length=253),
    }
    for name, check in checks.items():
        value = getattr(args, name, None)
        if value is not None:
            check("--" + name.replace("_", "-"), value)


# --------------------------------------------------------------------------- commands


def options(args: argparse.Namespace, extra: Sequence[str] = ()) -> Any:
    """The app's Options of a command that collects (its collector flags checked here)."""
    from hetero_exporter.app.commands import options_for
    return options_for(getattr(args, "command", None) or "", args, _collector_flags(extra))


def agent(args: argparse.Namespace, extra: Sequence[str] = (), *, clock: Optional[Callable[[], float]] = None) -> Any:
    """The Agent a parsed command line builds (nothing started): ``run``'s, ``inspect``'s,
    ``health``'s; ``clock`` over the environment's (tests drive a simulation by hand)."""
    from hetero_exporter.app.agent import Agent
    return Agent.build(options(args, extra), clock=clock)


def cmd_version(_args: argparse.Namespace) -> int:
    print(f"hetero-exporter {__version__}")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from hetero_exporter.app import commands
    return commands.inspect(options(args, extra), args.json)


def cmd_run(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from hetero_exporter.app import commands
    return commands.run(options(args, extra), args.web_config_file)


def cmd_top(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from hetero_exporter.app import top
    return top.top(options(args, extra), args.source, args.once)


def cmd_health(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from hetero_exporter.app import commands
    if not args.dry_run:
        raise UsageError("health: say --dry-run (what the agent would do) or override (an operator's override)")
    return commands.health(options(args, extra), as_json=bool(args.json))


def cmd_health_override(args: argparse.Namespace) -> int:
    from hetero_exporter.app import override
    return override.run(override.check(args))


def _print_parsed(result: Any, as_json: bool) -> None:
    from hetero_exporter import table
    if isinstance(result, NodeSnapshot):
        print(snapshot_to_json(result, indent=2) if as_json else table.render(result), end="\n" if as_json else "")
        return
    doc = result.to_dict() if hasattr(result, "to_dict") else to_dict(result)
    if as_json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        for k, v in doc.items():
            print(f"{k:<16} {'-' if v is None else v}")


def cmd_parse_kernel_log(args: argparse.Namespace) -> int:
    """``parse kernel-log FILE``: streamed line by line (memory bounded by the events kept),
    at most KERNEL_LOG_PARSE_LIMIT bytes."""
    from hetero_exporter.sources import kernel_log as kl
    from hetero_exporter.sdk.kmsg import parse_lines
    try:  # a regular file (devices and FIFOs refused, sdk/capture.py) or stdin
        stream = sys.stdin.buffer if args.file == "-" else open_capture(
            args.file, KERNEL_LOG_PARSE_LIMIT, limit_hint=" of parse kernel-log",
            # /dev/zero never ends, /dev/kmsg blocks at its end
            hint="save it first (dmesg > FILE, or cat /dev/kmsg with a timeout) and parse the file")
    except CaptureError as e:
        print(f"hetero-exporter parse: {e}", file=sys.stderr)
        return EXIT_FAIL
    try:
        events, n = parse_lines(kl.iter_lines(stream, KERNEL_LOG_PARSE_LIMIT, args.file))
    except ValueError as e:
        print(f"hetero-exporter parse: {e}", file=sys.stderr)
        return EXIT_FAIL
    except OSError as e:
        print(f"hetero-exporter parse: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return EXIT_FAIL
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    doc = {"schema": 1, "events": [e.to_dict() for e in events]}
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(kl.render_events({**doc, "lines": n}), end="")
    return EXIT_OK


def cmd_parse(args: argparse.Namespace) -> int:
    if args.tool == KERNEL_LOG_TOOL:
        return cmd_parse_kernel_log(args)
    try:
        fn = registry.parser(args.tool)
    except KeyError as e:
        raise UsageError(e.args[0]) from None
    try:  # regular files and stdin only, at most --max-bytes, decoded by BOM (sdk/capture.py)
        text = read_capture(args.file, args.max_bytes)
    except CaptureError as e:
        print(f"hetero-exporter parse: {e}", file=sys.stderr)
        return EXIT_FAIL
    try:
        result = fn(text)
    except ParseError as e:
        print(f"hetero-exporter parse: {args.file}: {e}", file=sys.stderr)
        return EXIT_FAIL
    _print_parsed(result, args.json)
    return EXIT_OK


def _add_scoring(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default="binpack", choices=("binpack", "spread"),
                   help="placement policy of pods that do not name one (default binpack)")
    p.add_argument("--domain", default=DEFAULT_DOMAIN,
                   help="annotation domain: <domain>/devices on nodes, <domain>/request on pods")
    p.add_argument("--fresh-seconds", type=float, default=180.0,
                   help="annotations younger than this are fully trusted (default 180)")


def _scorer(args: argparse.Namespace) -> Any:
    from hetero_exporter.app.extender import scorer
    return scorer(args.policy, args.fresh_seconds)


def cmd_score(args: argparse.Namespace) -> int:
    import time

    import yaml

    from hetero_exporter.scoring import explain, offline
    try:
        with open(args.pod, encoding="utf-8") as f:
            pod = yaml.safe_load(f)
        with open(args.nodes, encoding="utf-8") as f:
            nodes = json.load(f)
    except yaml.YAMLError as e:
        raise InputError(f"{args.pod}: not YAML: {e}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{args.nodes}: not JSON: {e}") from None
    try:  # RequestError: the pod's request; ValueError: a node document (offline.score)
        doc = offline.score(pod, nodes, _scorer(args), args.now if args.now is not None else time.time(),
                            args.domain)
    except ValueError as e:
        raise InputError(str(e)) from None
    print(json.dumps(doc, indent=2) if args.json else explain.render(doc), end="\n" if args.json else "")
    return EXIT_OK if any(r["feasible"] for r in doc["nodes"]) else EXIT_FAIL


def cmd_scheduler_extender(args: argparse.Namespace) -> int:
    from hetero_exporter.app import extender
    return extender.serve(args)


def _exit_on_sigterm() -> Any:
    """Until a command installs its own (run's graceful stop), SIGTERM and SIGHUP exit through
    SystemExit, so finally blocks and atexit remove what simulation wrote. The previous handlers
    by signal, or None off the main thread (where signals cannot be set)."""
    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)
    try:  # a hang-up cleans up as SIGTERM does (no config reload: documented)
        return {signum: signal.signal(signum, _exit) for signum in (signal.SIGTERM, signal.SIGHUP)}
    except ValueError:
        return None


def _signal_exit(e: BaseException) -> Optional[SystemExit]:
    """The SystemExit our SIGTERM handler raised, when CPython wrapped it in another exception on
    the way up (3.11 turns an exception in a class body's ``__set_name__``, as during an import,
    into a RuntimeError whose cause it is); None for any other error."""
    seen = 0
    while e is not None and seen < 16:
        if isinstance(e, SystemExit):
            return e
        e, seen = e.__cause__ or e.__context__, seen + 1  # type: ignore[assignment]
    return None


def _remove_simulation_workdirs() -> None:
    """No simulation work directory outlives the command, however it ended."""
    workdir = sys.modules.get("hetero_exporter.simulate.workdir")  # loaded only when simulating
    if workdir is not None:
        workdir.remove_all()


MAX_ERROR = 2000  # characters of an error line


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    logs.setup(getattr(args, "log_format", None) or "json", getattr(args, "log_level", "info"))
    # the commands that collect start vendor tools and simulations: a signal stops them cleanly
    restore_sigterm = _exit_on_sigterm() if args.collects else None
    try:
        check_flags(args)
        return args.func(args, extra)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"hetero-exporter: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ExitError as e:
        # an InputError (ConfigError, ScenarioError, PolicyError, a bad flag) is one line naming
        # the field: a bad input given by the user, not a crash. It may quote what a peer or a file
        # said: printable, so that it stays one line of text on the user's terminal.
        print(f"hetero-exporter: error: {printable(str(e), MAX_ERROR)}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # a file the command was given cannot be read, a port cannot be bound
        print(f"hetero-exporter: error: {printable(str(e), MAX_ERROR)}", file=sys.stderr)
        return EXIT_FAIL
    except Exception as e:
        stop = _signal_exit(e)  # a SIGTERM that arrived during an import: exit as the signal asked
        if stop is None:
            raise
        raise SystemExit(stop.code) from None
    finally:
        for signum, handler in (restore_sigterm or {}).items():
            signal.signal(signum, handler)
        _remove_simulation_workdirs()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
