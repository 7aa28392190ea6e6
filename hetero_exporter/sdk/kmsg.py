"""Kernel-log records and the vendors' kernel-log rules: what a driver's kernel message says about a device.

Pure: no I/O except reading the vendors' rule files (data beside each fault table,
``collectors/<vendor>/kernel_log.yaml``, named by ``VendorSpec.kernel_log``). The /dev/kmsg
follower, the health integration and the CLI live in ``hetero_exporter/sources/kernel_log.py``.

Capture formats (``split_record`` strips their prefix; never raises):

* raw /dev/kmsg ``pri,seq,usec,flags[,...];message`` (continuation lines `` KEY=VALUE`` -> None)
* dmesg ``[  12.345678] message``; dmesg -T ``[Sun Feb 23 16:24:18 2025] message``; dmesg -e
  ``[Jan25 10:34] message`` / ``[  +0.000123] message``; dmesg -d ``[  12.34 <  0.0001>] message``;
  dmesg --time-format=iso ``2025-01-25T10:34:54,859532+00:00 message`` (util-linux prints the
  fraction after a comma, syslog after a dot: that tells the two apart)
* dmesg -x / --decode ``kern  :err   : <time> message`` (any of the times above or none); a
  facility other than ``kern`` is user space (never a fault)
* dmesg -r / /proc/kmsg ``<3>[  12.34] message`` (facility 0 the kernel's, as /dev/kmsg)
* journalctl -k / syslog ``Nov 01 16:52:04 host kernel: message`` (also ``Nov  1`` and
  ``2025-01-21T04:41:44.283302+00:00 host kernel: message``), with or without an inner
  ``[  12.345]`` stamp
* bare lines (the whole line is the message)

Rules file (``collectors/<vendor>/kernel_log.yaml``)::

    vendor: nvidia
    source: "where the message formats come from"
    needles: ["NVRM", "nvswitch"]    # optional: a record without any of these is not this vendor's
    ignore:                          # optional: lines decided to state no fault, each with its reason;
      - name: bad-register-read      # a record one of them finds is none of the vendor's rules'
        match: 'gpuHandleSanityCheckRegReadError_\\w+: Possible bad register read'
        reason: "why this line is no fault"
    devices:                         # optional: regexes whose (?P<pci>) groups name a device of the vendor
      - 'amdgpu (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7])'
    rules:
      - name: xid
        match: 'NVRM: Xid \\((?:PCI:)?(?P<pci>...)[^)]*\\): (?P<code>\\d+)'   # re.search on Record.text
        code: "{code}"          # str.format over the named groups; "{block:lower}" lower-cases
        decode: {code: int}     # group -> decoder (int, smca-status); adds "<group>_kind" for smca-status
        nonzero: [count]        # groups that must be a number > 0 (all-clear lines print 0)
        unless: 'no .* error'   # guard regex: a record it finds is not this rule's
        fallback: "ras-{kind}"  # the fault-table row used when the code itself is not in the table
        message: "{msg}"        # optional; default: the record's text
        node_level: false       # a fault of the node's fabric (NVSwitch), not of one device
        recovery: false         # evidence of recovery for the device at pci_address
        learn: uuid             # this record maps (?P<pci>) to (?P<uuid>); it is no event
        pci: only-device        # no address on the line: the vendor's only device seen so far, if one
        duplicate_within: 16    # no event when the same vendor/address/code was emitted within N lines
        after: 'NVRM: The NVIDIA GPU (?P<pci>...)$'  # the line continues a record this regex found
                                # at most AFTER_LINES lines before: its (?P<pci>) names the device

Severity, class and action come from the vendor's fault table (``sdk.faults.table``);
codes the table does not know get the row named by ``fallback`` or the table's default.
"""

from __future__ import annotations

import io
import logging
import re
import string
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from hetero_exporter import validate, vendors
from hetero_exporter.sdk import faults
from hetero_exporter.sdk import pciaddr
from hetero_exporter.model.spec import VendorSpec
from hetero_exporter.model.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["Record", "Event", "Matcher", "Rule", "VendorRules", "Ignored", "RulesError", "split_record", "kmsg_record",
           "parse_lines", "parse_text", "load_rules", "decode_smca_status", "MAX_LINE_CHARS", "NO_EVENT",
           "BENIGN", "URGENT", "AFTER_LINES"]

# Matcher.triage: what the rules would make of a text, told by their regexes alone
NO_EVENT, BENIGN, URGENT = "no-event", "benign", "urgent"

MAX_LINE_CHARS = 16384  # longer lines are cut (the kernel's own record limit is ~1 KiB)
_MAX_MESSAGE = 512
_MAX_DEVICES = 1024  # learned addresses / uuids kept per matcher (bounded whatever the input)
# Verdicts remembered by message text: a storm repeats a few texts (Xid 13 per SM) hundreds of
# thousands of times, so a repeat costs a dict look-up, not the rules' regexes (~10 us). Bounded:
# at most _MEMO_ENTRIES texts of at most _MEMO_TEXT characters (< 2.5 MiB).
_MEMO_ENTRIES = 4096
_MEMO_TEXT = 512
# What a rule states, by the groups its code depends on (Xid 13 whatever the pid and name): a
# storm of distinct texts costs a regex search and a dict look-up per rule, not the code's
# formatting and the fault table (~10 us). Bounded; cleared when full (it refills itself).
_VERDICT_ENTRIES = 4096


# ---------------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Record:
    """One kernel-log record, whatever the capture format."""

    line: int  # 1-based line number in the input (or the kmsg sequence number when following /dev/kmsg)
    text: str  # the message without the format's prefix
    time: Optional[str] = None  # as printed (dmesg seconds, dmesg -T date, journal date, kmsg µs)
    seq: Optional[int] = None  # /dev/kmsg sequence number
    priority: Optional[int] = None  # syslog level 0..7 where the format says it
    # False where the format says the line is not the kernel's (a /dev/kmsg record of another
    # facility: `logger --kmsg`, a syslog line of another tag): never a fault, it can be forged
    kernel: bool = True


_KMSG = re.compile(r"(\d{1,3}),(\d+),(\d+),[^;,]*(?:,[^;]*)?;(.*)", re.S)
_CONT = re.compile(r" [A-Za-z0-9_+.\-]+=")
# dmesg seconds, with -d's delta ("[  12.3 <  0.1>]"), and -e's ("[Jan25 10:34]", "[  +0.000123]")
_DMESG = re.compile(r"\[\s*(\+?\d+\.\d+)(?:\s*<\s*\d+\.\d+>)?\]\s?(.*)", re.S)
_DMESG_E = re.compile(r"\[((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[ \d]?\d \d\d:\d\d)\]\s?(.*)", re.S)
# dmesg --time-format=iso: util-linux prints "%Y-%m-%dT%H:%M:%S,%06ld%+03d:%02d" (a comma)
_DMESG_ISO = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}[+-]\d\d:\d\d) (.*)", re.S)
_RAW_PRI = re.compile(r"<(\d{1,3})>(.*)", re.S)  # dmesg -r, /proc/kmsg: <facility * 8 + level>
_DMESG_T = re.compile(r"\[((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(.*)", re.S)
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_DECODE = re.compile(r"([a-z0-9]+)\s*:\s*(emerg|alert|crit|err|warn|notice|info|debug)\s*: ?(.*)", re.S)
_DECODE_ISO = re.compile(rf"({_ISO})\s(.*)", re.S)
_JOURNAL = re.compile(r"((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?)"
                      r" \S+ kernel: ?(.*)", re.S)
_JOURNAL_ISO = re.compile(rf"({_ISO}) \S+ kernel: ?(.*)", re.S)
# a syslog / journal line of any other tag ("host myapp[123]: ..."): user space, not the kernel
_SYSLOG_OTHER = re.compile(r"(?:(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?"
                           rf"|{_ISO}) \S+ [^\s:\[]+(?:\[\d+\])?: ?(.*)", re.S)
_LEVELS = {"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warn": 4, "notice": 5, "info": 6, "debug": 7}


def _inner_stamp(text: str) -> str:
    """A syslog / journal line that still carries the kernel's ``[  12.345]`` stamp."""
    m = _DMESG.match(text)
    return m.group(2) if m else text


def split_record(raw: str, line: int) -> Optional[Record]:
    """The record a captured line holds; None for a /dev/kmsg continuation line (`` KEY=VALUE``)
    and for an empty one. Never raises."""
    try:
        return _split(raw, line)
    except Exception:  # noqa: BLE001 - a hostile line is a bare record, never an error
        try:
            return Record(line=line, text=str(raw)[:MAX_LINE_CHARS]) if raw else None
        except Exception:  # noqa: BLE001
            return None


def kmsg_record(line: int, seq: int, usec: str, priority: int, message: str) -> Record:
    """The Record of a /dev/kmsg record whose header is parsed (``priority,seq,usec,...;message``).
    The priority's facility bits (>> 3) say whose it is: 0 the kernel's, anything else user space.
    The message is cut at MAX_LINE_CHARS."""
    return Record(line=line, text=message[:MAX_LINE_CHARS].rstrip("\r\n"), time=usec, seq=seq, priority=priority & 7, kernel=priority >> 3 == 0)


_STAMPS = (_DMESG, _DMESG_T, _DMESG_E, _DMESG_ISO)  # dmesg's time prefixes: (time, message)


def _stamp(rest: str, more: tuple[re.Pattern, ...] = ()) -> tuple[Optional[str], str]:
    """(time, message) of a text after a dmesg -x / -r prefix: any dmesg time, or none."""
    for pat in (*more, *_STAMPS):
        m = pat.fullmatch(rest)
        if m:
            return m.group(1), m.group(2)
    return None, rest


def _split(raw: str, line: int) -> Optional[Record]:
    if not isinstance(raw, str):
        raw = str(raw)
    raw = raw[:MAX_LINE_CHARS].rstrip("\r\n")
    if not raw.strip():
        return None
    if _CONT.match(raw):
        return None  # /dev/kmsg dictionary continuation (SUBSYSTEM=, DEVICE=)
    m = _KMSG.fullmatch(raw)
    if m:
        return kmsg_record(line, int(m.group(2)), m.group(3), int(m.group(1)), m.group(4))
    for pat in _STAMPS:
        m = pat.fullmatch(raw)
        if m:
            return Record(line=line, text=m.group(2), time=m.group(1))
    m = _RAW_PRI.fullmatch(raw)
    if m:
        prio, rest = int(m.group(1)), m.group(2)
        t, rest = _stamp(rest)
        return Record(line=line, text=rest, time=t, priority=prio & 7, kernel=prio >> 3 == 0)
    m = _JOURNAL.fullmatch(raw) or _JOURNAL_ISO.fullmatch(raw)
    if m:
        return Record(line=line, text=_inner_stamp(m.group(2)), time=m.group(1))
    m = _SYSLOG_OTHER.fullmatch(raw)
    if m:
        return Record(line=line, text=m.group(1), kernel=False)
    m = _DECODE.fullmatch(raw)
    if m:
        priority = _LEVELS.get(m.group(2))
        t, rest = _stamp(m.group(3), (_DECODE_ISO,))
        return Record(line=line, text=rest, time=t, priority=priority, kernel=m.group(1) == "kern")
    return Record(line=line, text=raw.strip() if raw[:1].isspace() else raw)


# ---------------------------------------------------------------------------------- events

@dataclass(frozen=True)
class Event:
    """A fault the kernel log states (DESIGN.md "parse kernel-log" outline)."""

    line: int
    time: Optional[str]
    vendor: str
    pci_address: Optional[str]
    uuid: Optional[str]
    code: str
    fault_class: str
    action: str
    severity: str
    message: str
    source: str = "kmsg"
    node_level: bool = False  # e.g. an NVSwitch SXid: a fault of the node's fabric, not of one GPU
    recovery: bool = False  # evidence of recovery (reset succeeded...) for the device at pci_address

    def to_dict(self) -> dict:
        return {"line": self.line, "time": self.time, "vendor": self.vendor,
                "pci_address": self.pci_address, "uuid": self.uuid, "code": self.code,
                "class": self.fault_class, "action": self.action, "severity": self.severity,
                "source": self.source, "message": self.message,
                "node_level": self.node_level, "recovery": self.recovery}


# ---------------------------------------------------------------------------------- rules

class RulesError(InputError):
    """A kernel-log rules file that cannot be used (named with the file and the rule)."""


def _int(text: Optional[str]) -> Optional[str]:
    if text is None:
        return None
    t = text.strip()
    try:
        return str(int(t, 16) if t.lower().startswith("0x") else int(t, 10))
    except ValueError:
        return None


# SMCA / ACA MCA_STATUS bits (AMD's MCA architecture, as amdgpu's aca / umc_v12_0 code reads them)
_VAL, _UC, _PCC, _TCC, _DEFERRED, _POISON = 1 << 63, 1 << 61, 1 << 57, 1 << 55, 1 << 44, 1 << 43


def decode_smca_status(text: Optional[str]) -> Optional[str]:
    """``uncorrectable`` (UC, PCC or TCC), ``deferred``, ``poison`` or ``correctable`` for a valid
    MCA_STATUS value; None when the value is not valid (Val clear) or not a number."""
    if text is None:
        return None
    try:
        v = int(text.strip(), 16)
    except ValueError:
        return None
    if not v & _VAL:
        return None
    if v & (_UC | _PCC | _TCC):
        return "uncorrectable"
    if v & _DEFERRED:
        return "deferred"
    if v & _POISON:
        return "poison"
    return "correctable"


_DECODERS: dict[str, Callable[[Optional[str]], Optional[str]]] = {
    "int": _int,
    "smca-status": decode_smca_status,
}


class _Format(string.Formatter):
    """str.format with ``:lower`` / ``:upper`` specs; a missing group is ''."""

    def get_value(self, key: Any, args: Any, kwargs: Mapping[str, Any]) -> Any:
        v = kwargs.get(key) if isinstance(key, str) else None
        return "" if v is None else v

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "lower":
            return str(value).lower()
        if format_spec == "upper":
            return str(value).upper()
        return super().format_field(value, format_spec)


_FMT = _Format()


@dataclass(frozen=True)
class Rule:
    name: str
    vendor: str
    match: re.Pattern
    code: str = ""
    unless: Optional[re.Pattern] = None
    decode: Mapping[str, str] = field(default_factory=dict)
    nonzero: tuple[str, ...] = ()
    fallback: Optional[str] = None
    message: Optional[str] = None
    node_level: bool = False
    recovery: bool = False
    learn: Optional[str] = None
    pci: Optional[str] = None
    duplicate_within: int = 0
    after: Optional[re.Pattern] = None  # the record this one continues (its (?P<pci>) names the device)


@dataclass(frozen=True)
class Ignored:
    """A line decided to state no fault, and why (a rules file's ``ignore`` entry)."""

    name: str
    match: re.Pattern
    reason: str


def _key_groups(rule: Rule) -> tuple[str, ...]:
    """The match groups a rule's code, fallback and checks depend on (not its pci, nor the free
    text around them): equal values give an equal verdict."""
    names = set(rule.nonzero) | set(rule.decode)
    for template in (rule.code, rule.fallback or ""):
        for _lit, fieldname, _spec, _conv in string.Formatter().parse(template):
            base = re.match(r"\w+", fieldname or "")  # "{x[0]}" and "{x.y}" read group x
            if base:
                names.add(base.group())
    return tuple(sorted(n for n in names if n in rule.match.groupindex))


@dataclass(frozen=True)
class _Verdict:
    """What a rule states for its key groups' values: the code, its fault-table row, the decoded
    groups (for the message) and whether it is urgent (more than an info fault, or a recovery)."""

    code: str
    info: faults.FaultInfo
    decoded: tuple[tuple[str, str], ...]
    urgent: bool


@dataclass(frozen=True)
class VendorRules:
    vendor: str
    source: str
    rules: tuple[Rule, ...]
    needles: tuple[str, ...] = ()
    devices: tuple[re.Pattern, ...] = ()
    ignored: tuple[Ignored, ...] = ()

    def wants(self, text: str) -> bool:
        return not self.needles or any(n in text for n in self.needles)

    def ignoring(self, text: str) -> Optional[Ignored]:
        """The ``ignore`` entry that decides this text states no fault, if one does."""
        return next((i for i in self.ignored if i.match.search(text)), None)


_RULE_KEYS = {"name", "match", "code", "unless", "decode", "nonzero", "fallback", "message",
              "node_level", "recovery", "learn", "pci", "duplicate_within", "after"}
_IGNORE_KEYS = {"name", "match", "reason"}
AFTER_LINES = 4  # a continued record's header is at most this many lines before (dmesg's indented lines)


def _compile(pattern: Any, where: str) -> re.Pattern:
    if not isinstance(pattern, str) or not pattern:
        raise RulesError(f"{where}: a regex string is needed")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise RulesError(f"{where}: bad regex {pattern!r}: {e}") from None


def parse_rules(doc: Any, where: str) -> VendorRules:
    """A rules document (the YAML's content) -> VendorRules; RulesError names what is wrong."""
    if not isinstance(doc, Mapping) or not doc.get("vendor") or not isinstance(doc.get("rules"), list):
        raise RulesError(f"{where}: a kernel-log rules file needs 'vendor' and a list of 'rules'")
    vendor = str(doc["vendor"])
    out = []
    for i, raw in enumerate(doc["rules"]):
        w = f"{where}: rule {i}"
        if not isinstance(raw, Mapping):
            raise RulesError(f"{w}: a mapping is needed")
        unknown = set(raw) - _RULE_KEYS
        if unknown:
            raise RulesError(f"{w}: unknown keys {sorted(unknown)}")
        name = str(raw.get("name") or f"rule-{i}")
        w = f"{where}: rule {name}"
        match = _compile(raw.get("match"), f"{w}: match")
        decode = dict(raw.get("decode") or {})
        for g, d in decode.items():
            if d not in _DECODERS:
                raise RulesError(f"{w}: decoder {d!r} of {g!r} is not one of {sorted(_DECODERS)}")
        learn = raw.get("learn")
        if learn not in (None, "uuid"):
            raise RulesError(f"{w}: learn {learn!r} is not 'uuid'")
        if learn and not {"pci", "uuid"} <= set(match.groupindex):
            raise RulesError(f"{w}: learn: uuid needs (?P<pci>) and (?P<uuid>) groups")
        if not learn and not raw.get("code"):
            raise RulesError(f"{w}: 'code' is needed")
        if raw.get("pci") not in (None, "only-device"):
            raise RulesError(f"{w}: pci {raw.get('pci')!r} is not 'only-device'")
        nonzero = tuple(str(g) for g in (raw.get("nonzero") or ()))
        for g in (*nonzero, *decode):
            if g not in match.groupindex:
                raise RulesError(f"{w}: group {g!r} is not in the match regex")
        after = _compile(raw["after"], f"{w}: after") if raw.get("after") is not None else None
        if after is not None and "pci" not in after.groupindex:
            raise RulesError(f"{w}: after needs a (?P<pci>) group")
        out.append(Rule(
            name=name, vendor=vendor, match=match, code=str(raw.get("code") or ""),
            unless=_compile(raw["unless"], f"{w}: unless") if raw.get("unless") else None,
            decode=decode, nonzero=nonzero,
            fallback=str(raw["fallback"]) if raw.get("fallback") else None,
            message=str(raw["message"]) if raw.get("message") else None,
            node_level=bool(raw.get("node_level", False)), recovery=bool(raw.get("recovery", False)),
            learn=learn, pci=raw.get("pci"), duplicate_within=int(raw.get("duplicate_within") or 0),
            after=after))
    devices = tuple(_compile(p, f"{where}: devices") for p in (doc.get("devices") or ()))
    for p in devices:
        if "pci" not in p.groupindex:
            raise RulesError(f"{where}: devices regex {p.pattern!r} needs a (?P<pci>) group")
    needles = tuple(str(n) for n in (doc.get("needles") or ()))
    return VendorRules(vendor, str(doc.get("source", "")), tuple(out), needles, devices,
                       _parse_ignored(doc.get("ignore"), where))


def _parse_ignored(raw: Any, where: str) -> tuple[Ignored, ...]:
    """A rules document's ``ignore`` list: each entry names its line and says why it is no fault."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RulesError(f"{where}: 'ignore' must be a list")
    out = []
    for i, entry in enumerate(raw):
        w = f"{where}: ignore {i}"
        if not isinstance(entry, Mapping) or set(entry) - _IGNORE_KEYS:
            raise RulesError(f"{w}: a mapping of {sorted(_IGNORE_KEYS)} is needed")
        reason = str(entry.get("reason") or "").strip()
        if not entry.get("name") or not reason:
            raise RulesError(f"{w}: 'name' and 'reason' are needed")
        out.append(Ignored(str(entry["name"]), _compile(entry.get("match"), f"{w}: match"), reason))
    return tuple(out)


_cache: dict[tuple[str, str, int], VendorRules] = {}


def load_rules(spec: VendorSpec) -> Optional[VendorRules]:
    """The kernel-log rules of a vendor (None when its spec names none); RulesError when the
    file is missing or malformed."""
    if not spec.kernel_log:
        return None
    key = (spec.name, spec.kernel_log, vendors.generation())
    got = _cache.get(key)
    if got is not None:
        return got
    path = spec.data_path(spec.kernel_log)
    if not path.is_file():
        raise RulesError(f"{spec.name}: kernel-log rules {path} not found")
    try:
        doc = validate.load_yaml(path.read_text(encoding="utf-8"))
    except ValueError as e:  # validate.NotYaml
        raise RulesError(f"{path}: {e}") from None
    rules = parse_rules(doc, str(path))
    if rules.vendor != spec.name:
        raise RulesError(f"{path}: vendor {rules.vendor!r} is not the spec's {spec.name!r}")
    _cache[key] = rules
    return rules


# ---------------------------------------------------------------------------------- matching

class Matcher:
    """Matches records against the vendors' rules; stateful over one log: learns
    ``NVRM: GPU at PCI:0000:9b:00: GPU-<uuid>`` lines (pci -> uuid) and each vendor's device
    addresses (for rules whose lines name no device). Memory is bounded whatever the input.

    ``evaluated`` counts the records whose rules really ran (not a repeat the memo answered, not
    a record no vendor's needles name): the follower's rate limit charges those. ``triage`` tells
    by the rules' regexes alone whether a text can wait (a storm past that limit); ``urgent``
    whether an event may never wait behind others."""

    def __init__(self, specs: Optional[Iterable[VendorSpec]] = None,
                 *, rules: Optional[Iterable[VendorRules]] = None,
                 urgent_codes: Optional[Mapping[str, Iterable[str]]] = None):
        loaded: list[VendorRules] = list(rules or ())
        explicit = specs is not None
        for s in (specs if specs is not None else vendors.specs().values()):
            try:
                r = load_rules(s)
            except (RulesError, OSError) as e:
                if explicit:
                    raise
                log.warning("kernel-log rules of %s not used: %s", s.name, e)
                continue
            if r is not None:
                loaded.append(r)
        self.vendor_rules: tuple[VendorRules, ...] = tuple(loaded)
        # vendor -> codes a configured fault-table override may make more than info: always urgent
        self._urgent_codes = {str(v): frozenset(map(str, c)) for v, c in (urgent_codes or {}).items()}
        self._keys = {id(r): _key_groups(r) for vr in self.vendor_rules for r in vr.rules}
        self._verdicts: dict[tuple[int, tuple], Optional[_Verdict]] = {}
        # vendors whose rules infer a device from those seen (pci: only-device): the triage keeps
        # remembering their devices, or a skipped line would change whom a later line names
        self._tracked = frozenset(vr.vendor for vr in self.vendor_rules
                                  if any(r.pci == "only-device" for r in vr.rules))
        self._uuids: OrderedDict[str, str] = OrderedDict()  # pci -> uuid
        # rules that continue an earlier record (after:): id(rule) -> (line, pci) of its last header
        self._continued = tuple(r for vr in self.vendor_rules for r in vr.rules if r.after is not None)
        self._heads: dict[int, tuple[int, str]] = {}
        self._devices: dict[str, OrderedDict[str, None]] = {}  # vendor -> pci addresses seen
        self._recent: deque[tuple[int, str, Optional[str], str]] = deque(maxlen=256)
        # text -> what its rules made; None marks a text whose verdict depends on the matcher's
        # state (a learn line, a device inferred from the devices seen): never replayed
        self._memo: OrderedDict[str, Optional[tuple[tuple[Rule, Event], ...]]] = OrderedDict()
        self.evaluated = 0
        # the last match's verdict depends on the matcher's state, so the memo must not replay it:
        # a learn line, a device inferred from those seen, an event the duplicate window held back
        self._stateful = False

    # ---- state
    def uuid_of(self, pci: Optional[str]) -> Optional[str]:
        return self._uuids.get(pci) if pci else None

    def _remember(self, vendor: str, pci: Optional[str]) -> None:
        if not pci:
            return
        seen = self._devices.setdefault(vendor, OrderedDict())
        seen[pci] = None
        seen.move_to_end(pci)
        while len(seen) > _MAX_DEVICES:
            seen.popitem(last=False)

    def _learn_uuid(self, pci: str, uuid: str) -> None:
        self._uuids[pci] = uuid
        self._uuids.move_to_end(pci)
        while len(self._uuids) > _MAX_DEVICES:
            self._uuids.popitem(last=False)

    def _duplicate(self, line: int, vendor: str, pci: Optional[str], code: str, window: int) -> bool:
        return any(v == vendor and p == pci and c == code and 0 <= line - ln <= window
                   for ln, v, p, c in self._recent)

    # ---- matching
    def match(self, record: Record) -> list[Event]:
        text = record.text
        if not text or not record.kernel:
            return []  # only the kernel's records count: user space can write any text
        replayed = self.replay(text, record.line, record.time)
        if replayed is not None:
            return replayed
        wanted = [vr for vr in self.vendor_rules if vr.wants(text)]
        if not wanted:
            return []
        self.evaluated += 1
        out: list[tuple[Rule, Event]] = []
        self._stateful = False
        for vr in wanted:
            if vr.ignored and vr.ignoring(text) is not None:
                continue  # decided to state no fault (the rules file says why)
            for pat in vr.devices:
                m = pat.search(text)
                if m:
                    self._remember(vr.vendor, pciaddr.normalize(m.group("pci")))
            self._note_heads(vr.vendor, record.line, text)
            for rule in vr.rules:
                ev = self._apply(rule, record)
                if ev is not None:
                    out.append((rule, ev))
                    break  # one event per record and vendor: the first rule that states it
        if len(text) <= _MEMO_TEXT and text not in self._memo:
            self._memo[text] = None if self._stateful else tuple(out)
            if len(self._memo) > _MEMO_ENTRIES:
                self._memo.popitem(last=False)
        return [ev for _rule, ev in out]

    def _note_heads(self, vendor: str, line: int, text: str) -> None:
        """Remember where a record that a later line continues (a rule's ``after``) named its
        device. Such a text is never replayed from the memo: its line number matters."""
        for rule in self._continued:
            if rule.vendor != vendor or rule.after is None:
                continue
            m = rule.after.search(text)
            if m:
                self._stateful = True
                pci = pciaddr.normalize(m.group("pci"))
                if pci:
                    self._heads[id(rule)] = (line, pci)

    def _head(self, rule: Rule, line: int) -> Optional[str]:
        """The device a continued record's header named, if it was at most AFTER_LINES before."""
        got = self._heads.get(id(rule))
        return got[1] if got is not None and 0 < line - got[0] <= AFTER_LINES else None

    def replay(self, text: str, line: int, time: Optional[str]) -> Optional[list[Event]]:
        """``match`` of a kernel record with this text, answered from the memo; None when the
        memo does not know the text (then build the Record and call ``match``). Lets a follower
        skip making a Record for each of a storm's repeats."""
        made = self._memo.get(text)
        if made is None:
            return None
        self._memo.move_to_end(text)
        return self._replay(made, line, time)

    def _replay(self, made: tuple[tuple[Rule, Event], ...], line: int, time: Optional[str]) -> list[Event]:
        """What the rules made of this text before, for this record (its line, time, the uuid
        learned since), with the duplicate window applied as _apply does."""
        out = []
        for rule, ev in made:  # the device was remembered at first sight (only a single one matters)
            if rule.duplicate_within and self._duplicate(line, ev.vendor, ev.pci_address, ev.code,
                                                         rule.duplicate_within):
                continue
            self._recent.append((line, ev.vendor, ev.pci_address, ev.code))
            # the constructor, not dataclasses.replace: a storm replays this ~100,000 times a second
            out.append(Event(line, time, ev.vendor, ev.pci_address, self.uuid_of(ev.pci_address),
                             ev.code, ev.fault_class, ev.action, ev.severity, ev.message, ev.source,
                             ev.node_level, ev.recovery))
        return out

    def urgent(self, ev: Event) -> bool:
        """Whether an event must never wait behind info ones: more than an info fault (the
        health rules skip info faults), a recovery, or a code the configuration overrides."""
        return ev.severity != "info" or ev.recovery or ev.code in self._urgent_codes.get(ev.vendor, ())

    def triage(self, text: str) -> str:
        """What the rules would make of a kernel record's text, by their regexes alone (a few
        microseconds): NO_EVENT (no vendor's rule states anything), BENIGN (at most an info
        fault: the health rules skip those) or URGENT (more, a recovery, or a line that teaches
        the matcher a uuid: run ``match`` on it). Not ``evaluated``; never raises on content."""
        out = NO_EVENT
        for vr in self.vendor_rules:
            if not vr.wants(text) or (vr.ignored and vr.ignoring(text) is not None):
                continue
            if any(r.vendor == vr.vendor and r.after is not None and r.after.search(text)
                   for r in self._continued):
                return URGENT  # a header a later line continues: match it, or that line loses its device
            tracked = vr.vendor in self._tracked
            if tracked:
                for pat in vr.devices:
                    m = pat.search(text)
                    if m:
                        self._remember(vr.vendor, pciaddr.normalize(m.group("pci")))
            for rule in vr.rules:
                m = rule.match.search(text)
                if m is None or (rule.unless is not None and rule.unless.search(text)):
                    continue
                if rule.learn or rule.recovery:
                    return URGENT
                v = self._verdict(rule, m)
                if v is None:
                    continue
                if v.urgent:
                    return URGENT
                if tracked and "pci" in rule.match.groupindex and m.group("pci"):
                    self._remember(vr.vendor, pciaddr.normalize(m.group("pci")))
                out = BENIGN
                break
        return out

    def _verdict(self, rule: Rule, m: re.Match) -> Optional[_Verdict]:
        """What ``rule`` states for this match (None: nothing, e.g. an all-clear count of 0),
        from the cache when its key groups were seen before."""
        key = (id(rule), tuple(m.group(g) for g in self._keys[id(rule)]))
        try:
            return self._verdicts[key]
        except KeyError:
            pass
        groups: dict[str, Any] = dict(zip(self._keys[id(rule)], key[1]))
        v = self._judge(rule, groups)
        if len(self._verdicts) >= _VERDICT_ENTRIES:
            self._verdicts.clear()
        self._verdicts[key] = v
        return v

    def _judge(self, rule: Rule, groups: dict[str, Any]) -> Optional[_Verdict]:
        for g in rule.nonzero:
            n = _int(groups.get(g))
            if n is None or int(n) <= 0:
                return None
        decoded = []
        for g, d in rule.decode.items():
            value = _DECODERS[d](groups.get(g))
            if value is None:
                return None
            name = f"{g}_kind" if d == "smca-status" else g
            groups[name] = value
            decoded.append((name, value))
        if rule.learn:
            return _Verdict("", faults.FaultInfo("", "", "none", "info"), tuple(decoded), True)
        code = _FMT.vformat(rule.code, (), groups).strip()
        if not code:
            return None
        table = faults.table(rule.vendor)
        info = table.lookup(code)
        if not info.known and rule.fallback:
            fb = table.lookup(_FMT.vformat(rule.fallback, (), groups).strip())
            if fb.known:
                info = fb
        urgent = (info.severity != "info" or rule.recovery
                  or code in self._urgent_codes.get(rule.vendor, ()))
        return _Verdict(code, info, tuple(decoded), urgent)

    def _apply(self, rule: Rule, record: Record) -> Optional[Event]:
        text = record.text
        m = rule.match.search(text)
        if m is None or (rule.unless is not None and rule.unless.search(text)):
            return None
        verdict = self._verdict(rule, m)
        if verdict is None:
            return None
        raw_pci = m.group("pci") if "pci" in rule.match.groupindex else None
        pci = pciaddr.normalize(raw_pci) if raw_pci else None
        if rule.learn == "uuid":
            self._stateful = True
            uuid = (m.group("uuid") or "").strip()
            if pci and uuid:
                self._learn_uuid(pci, uuid)
                self._remember(rule.vendor, pci)
            return None
        if pci is None and rule.after is not None:
            self._stateful = True
            pci = self._head(rule, record.line)
        if pci is None and rule.pci == "only-device":
            self._stateful = True
            seen: Mapping[str, None] = self._devices.get(rule.vendor) or {}
            if len(seen) == 1:
                pci = next(iter(seen))
        self._remember(rule.vendor, pci)
        code, info = verdict.code, verdict.info
        if rule.duplicate_within and self._duplicate(record.line, rule.vendor, pci, code,
                                                     rule.duplicate_within):
            self._stateful = True
            return None
        if rule.message:
            groups: dict[str, Any] = m.groupdict()
            groups.update(verdict.decoded)
            groups["_text"] = text
            message = _FMT.vformat(rule.message, (), groups)
        else:
            message = text
        self._recent.append((record.line, rule.vendor, pci, code))
        return Event(line=record.line, time=record.time, vendor=rule.vendor, pci_address=pci,
                     uuid=self.uuid_of(pci), code=code, fault_class=info.fault_class,
                     action=info.action, severity=info.severity,
                     message=message.strip()[:_MAX_MESSAGE], node_level=rule.node_level,
                     recovery=rule.recovery)


# ---------------------------------------------------------------------------------- parsing

def _lines(lines: Iterable[str]) -> Iterator[str]:
    for raw in lines:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        yield raw if len(raw) <= MAX_LINE_CHARS else raw[:MAX_LINE_CHARS]


def parse_lines(lines: Iterable[str], *, max_events: int = 100_000,
                matcher: Optional[Matcher] = None) -> tuple[list[Event], int]:
    """(events, lines read) for a capture read line by line (a file object streams: memory is
    bounded by ``max_events``, whatever the input size). Never raises on content."""
    m = matcher if matcher is not None else Matcher()
    events: list[Event] = []
    n = 0
    for n, raw in enumerate(_lines(lines), start=1):
        rec = split_record(raw, n)
        if rec is None:
            continue
        try:
            got = m.match(rec)
        except Exception as e:  # noqa: BLE001 - a rule that trips on a record skips that record
            log.debug("kernel-log line %d not matched: %s", n, e)
            continue
        for ev in got:
            if len(events) < max_events:
                events.append(ev)
    return events, n


def parse_text(text: str) -> dict:
    """What ``hetero-exporter parse kernel-log FILE --json`` prints."""
    events, _ = parse_lines(io.StringIO(text))
    return {"schema": 1, "events": [e.to_dict() for e in events]}
