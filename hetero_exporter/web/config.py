"""The Prometheus exporter web configuration (``--web.config.file``): exporter-toolkit's format,
the same file node_exporter reads.

    tls_server_config: {cert_file, key_file | cert, key (inline PEM), client_auth_type,
                        client_ca_file | client_ca, client_allowed_sans, min_version, max_version,
                        cipher_suites, prefer_server_cipher_suites, curve_preferences}
    http_server_config: {headers: {...}, http2: <ignored: HTTP/1.1 only>}
    basic_auth_users: {user: bcrypt hash}
    rate_limit: {burst: N, interval: 1s}

Unknown keys, wrong types and values Python's ``ssl`` cannot honour are refused with one line
naming the field (``WebConfigError``, a ``ValueError``: the CLI exits 2). Relative paths are
relative to the file's folder. Certificate files are re-read when they change (rotation without
restart); the rest is read once.

Python's ``ssl`` cannot accept a client certificate without verifying it, so
``RequireAnyClientCert`` is refused (use ``RequireAndVerifyClientCert`` with a CA);
``RequestClientCert`` (asks, never verifies, never refuses) is served as ``NoClientCert``.
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import hashlib
import importlib.util
import logging
import os
import re
import ssl
import threading
import time
from typing import Any, Callable, Optional

from hetero_exporter import validate as v
from hetero_exporter.web import certificates
from hetero_exporter.web.server import WebSettings
from hetero_exporter.errors import InputError

log = logging.getLogger(__name__)


class WebConfigError(InputError):
    """The web config file cannot be used (the message names the key): exit 2."""


# exporter-toolkit's fixed set: these headers only, some with fixed values
ALLOWED_HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (), "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": (), "Content-Security-Policy": (),
}

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}

CLIENT_AUTH = {  # exporter-toolkit name -> (ssl verify mode, needs a CA); None: refused
    "": (ssl.CERT_NONE, False), "NoClientCert": (ssl.CERT_NONE, False),
    "RequestClientCert": (ssl.CERT_NONE, False),
    "RequireAnyClientCert": None, "RequireClientCert": None,
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}

# Go's crypto/tls names (tls.CipherSuites()) -> OpenSSL's; TLS 1.3 suites are not configurable
# in Go either (accepted, ignored)
GO_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA", "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256", "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256", "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
}
TLS13_CIPHERS = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
GO_CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}

_MAX_FILE = 1 << 20  # characters: a web config is a few lines
# bcrypt cost factors above this are refused: every uncached login (and every made-up user, whose
# decoy hash costs what the dearest user's does) takes one hash, 2^cost rounds: 12 is ~0.25 s on
# a current core, 13 took 2.4 s and 14 3.9 s on a loaded CI machine, 31 takes days. The checks
# wait in one queue (web/authqueue.py), so a scrape must fit several of them in its timeout.
MAX_BCRYPT_COST = 12
_BCRYPT = re.compile(r"\$2[abxy]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

TLS_KEYS = ("cert_file", "key_file", "cert", "key", "client_auth_type", "client_ca_file", "client_ca",
            "client_allowed_sans", "min_version", "max_version", "cipher_suites",
            "prefer_server_cipher_suites", "curve_preferences")


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    cert_file: str = ""
    key_file: str = ""
    cert: str = ""
    key: str = ""
    client_ca_file: str = ""
    client_ca: str = ""
    verify_mode: ssl.VerifyMode = ssl.CERT_NONE
    allowed_sans: tuple[str, ...] = ()
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    ciphers: str = ""           # OpenSSL cipher string for TLS <= 1.2 ("" = OpenSSL's defaults)
    prefer_server_ciphers: bool = True
    curve: str = ""


def load(path: str) -> WebSettings:
    """Read and check the web configuration file; WebConfigError names the field at fault."""
    where = f"web config {path}"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(_MAX_FILE + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise WebConfigError(f"{where}: cannot read: {e}") from None
    if len(text) > _MAX_FILE:
        raise WebConfigError(f"{where}: larger than {_MAX_FILE} characters")
    try:
        doc = v.load_yaml(text)
    except ValueError as e:  # validate.NotYaml, or an integer too long to convert
        raise WebConfigError(f"{where}: not valid YAML: {e}") from None
    return parse(doc, os.path.dirname(os.path.abspath(path)), where)


def parse(doc: Any, base_dir: str, where: str = "web config") -> WebSettings:
    """The checked settings of one parsed document (relative paths against base_dir)."""
    def fail(field: str, message: str) -> WebConfigError:
        return WebConfigError(f"{where}: {field}: {message}")

    if doc is None:
        return WebSettings()
    top = _mapping(doc, "(top level)", ("tls_server_config", "http_server_config", "basic_auth_users",
                                        "rate_limit"), fail)
    tls = _tls(_mapping(top.get("tls_server_config"), "tls_server_config", TLS_KEYS, fail), base_dir, fail)
    http_cfg = _mapping(top.get("http_server_config"), "http_server_config", ("http2", "headers"), fail)
    if "http2" in http_cfg and not isinstance(http_cfg["http2"], bool):
        raise fail("http_server_config.http2", "expects true or false")
    headers = _headers(http_cfg.get("headers"), fail)
    users = _users(top.get("basic_auth_users"), fail)
    rate = _rate_limit(_mapping(top.get("rate_limit"), "rate_limit", ("burst", "interval"), fail), fail)
    context = None
    if tls is not None:
        build = _context_builder(tls, fail)
        # built now: a bad certificate fails at start (exit 2), not at the first scrape
        context = _Reloading(build, [p for p in (tls.cert_file, tls.key_file, tls.client_ca_file) if p])
    return WebSettings(ssl_context=context, allowed_sans=tls.allowed_sans if tls else (),
                       auth=BasicAuth(users) if users else None, headers=headers, rate_limit=rate,
                       certificate_expiry=(lambda: context.expiry.not_after) if context else None)


# --------------------------------------------------------------------------- sections

def _mapping(value: Any, field: str, known: tuple[str, ...], fail: Callable[..., WebConfigError]) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(field, f"expects a mapping, got {type(value).__name__}")
    for key in value:
        if key not in known:
            prefix = "" if field == "(top level)" else f"{field}."
            raise fail(f"{prefix}{key}", f"unknown field (known: {', '.join(known)})")
    return value


def _string(value: Any, field: str, fail: Callable[..., WebConfigError]) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise fail(field, f"expects a string, got {type(value).__name__}")
    return value


def _strings(value: Any, field: str, fail: Callable[..., WebConfigError]) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(field, "expects a list of strings")
    return value


def _tls(section: dict, base_dir: str, fail: Callable[..., WebConfigError]) -> Optional[TlsSettings]:
    f = {k: _string(section.get(k), f"tls_server_config.{k}", fail)
         for k in ("cert_file", "key_file", "cert", "key", "client_auth_type", "client_ca_file", "client_ca",
                   "min_version", "max_version")}
    if not any(f[k] for k in ("cert_file", "key_file", "cert", "key", "client_ca_file", "client_ca",
                              "client_auth_type")):
        return None  # exporter-toolkit: no TLS settings -> plain HTTP
    for path_key, inline_key in (("cert_file", "cert"), ("key_file", "key")):
        if f[path_key] and f[inline_key]:
            raise fail(f"tls_server_config.{path_key}", f"set one of {path_key} or {inline_key}, not both")
        if not f[path_key] and not f[inline_key]:
            raise fail(f"tls_server_config.{path_key}", f"missing (set {path_key} or {inline_key})")
    if f["client_ca_file"] and f["client_ca"]:
        raise fail("tls_server_config.client_ca_file", "set one of client_ca_file or client_ca, not both")
    auth_name = f["client_auth_type"]
    if auth_name not in CLIENT_AUTH:
        raise fail("tls_server_config.client_auth_type",
                   f"unknown {auth_name!r} (one of {', '.join(k for k in CLIENT_AUTH if k)})")
    mode = CLIENT_AUTH[auth_name]
    if mode is None:
        raise fail("tls_server_config.client_auth_type",
                   f"{auth_name} (any certificate, unverified) cannot be served by Python's ssl; "
                   "use RequireAndVerifyClientCert with client_ca_file")
    verify_mode, needs_ca = mode
    has_ca = bool(f["client_ca_file"] or f["client_ca"])
    if has_ca and verify_mode == ssl.CERT_NONE:
        raise fail("tls_server_config.client_ca_file",
                   "a client CA is configured without a client_auth_type that verifies "
                   "(VerifyClientCertIfGiven or RequireAndVerifyClientCert)")
    if needs_ca and not has_ca:
        raise fail("tls_server_config.client_ca_file", f"required by client_auth_type {auth_name}")
    sans = _strings(section.get("client_allowed_sans"), "tls_server_config.client_allowed_sans", fail)
    if sans and verify_mode != ssl.CERT_REQUIRED:
        raise fail("tls_server_config.client_allowed_sans", "requires client_auth_type RequireAndVerifyClientCert")
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        name = f[key] or default
        if name not in TLS_VERSIONS:
            raise fail(f"tls_server_config.{key}", f"unknown TLS version {name!r} (one of {', '.join(TLS_VERSIONS)})")
        versions[key] = TLS_VERSIONS[name]
    if versions["min_version"] > versions["max_version"]:
        raise fail("tls_server_config.min_version", "is above max_version")
    prefer = section.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise fail("tls_server_config.prefer_server_cipher_suites", "expects true or false")
    return TlsSettings(
        cert_file=_join(base_dir, f["cert_file"]), key_file=_join(base_dir, f["key_file"]),
        cert=f["cert"], key=f["key"], client_ca_file=_join(base_dir, f["client_ca_file"]), client_ca=f["client_ca"],
        verify_mode=verify_mode, allowed_sans=tuple(sans), min_version=versions["min_version"],
        max_version=versions["max_version"],
        ciphers=_ciphers(section.get("cipher_suites"), versions["min_version"], fail),
        prefer_server_ciphers=prefer, curve=_curve(section.get("curve_preferences"), fail))


def _join(base_dir: str, path: str) -> str:
    return os.path.join(base_dir, path) if path else ""


def _ciphers(value: Any, min_version: ssl.TLSVersion, fail: Callable[..., WebConfigError]) -> str:
    names = _strings(value, "tls_server_config.cipher_suites", fail)
    if not names:
        return ""
    openssl_names = []
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name in names:
        if name in TLS13_CIPHERS:
            continue
        if name not in GO_CIPHERS:
            raise fail("tls_server_config.cipher_suites", f"unknown cipher {name!r}")
        try:
            probe.set_ciphers(GO_CIPHERS[name])
        except ssl.SSLError:
            raise fail("tls_server_config.cipher_suites",
                       f"{name} ({GO_CIPHERS[name]}) is not available in this Python's OpenSSL") from None
        openssl_names.append(GO_CIPHERS[name])
    if not openssl_names and min_version < ssl.TLSVersion.TLSv1_3:
        raise fail("tls_server_config.cipher_suites",
                   "lists only TLS 1.3 suites, which are not configurable: add TLS 1.2 suites or set min_version: TLS13")
    return ":".join(openssl_names)


def _curve(value: Any, fail: Callable[..., WebConfigError]) -> str:
    names = _strings(value, "tls_server_config.curve_preferences", fail)
    for name in names:
        if name not in GO_CURVES:
            raise fail("tls_server_config.curve_preferences", f"unknown curve {name!r} (one of {', '.join(GO_CURVES)})")
    if len(names) > 1:
        raise fail("tls_server_config.curve_preferences", "Python's ssl can set one curve only: list one")
    return GO_CURVES[names[0]] if names else ""


def _headers(value: Any, fail: Callable[..., WebConfigError]) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise fail("http_server_config.headers", "expects a mapping of header: value")
    out = []
    for name, v in value.items():
        if name not in ALLOWED_HEADERS:
            raise fail(f"http_server_config.headers.{name}",
                       f"this header can not be configured (one of {', '.join(ALLOWED_HEADERS)})")
        text = _string(v, f"http_server_config.headers.{name}", fail)
        allowed = ALLOWED_HEADERS[name]
        if allowed and text not in allowed:
            raise fail(f"http_server_config.headers.{name}", f"expects one of {', '.join(allowed)}, got {text!r}")
        if any(c in text for c in "\r\n\0"):
            raise fail(f"http_server_config.headers.{name}", "contains a line break")
        if text:  # blank: unset
            out.append((name, text))
    return tuple(out)


def _users(value: Any, fail: Callable[..., WebConfigError]) -> dict[str, bytes]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail("basic_auth_users", "expects a mapping of user: bcrypt hash")
    users = {}
    for user, hashed in value.items():
        if not isinstance(user, str) or not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise fail(f"basic_auth_users.{user}", "expects a bcrypt hash ($2y$10$... from htpasswd -nBC 10)")
        if _cost(hashed.encode()) > MAX_BCRYPT_COST:
            raise fail(f"basic_auth_users.{user}",
                       f"bcrypt cost {_cost(hashed.encode())} is above {MAX_BCRYPT_COST}: every login not yet "
                       "cached would take seconds (hash it again with htpasswd -nBC 10)")
        users[user] = hashed.encode()
    if users and importlib.util.find_spec("bcrypt") is None:
        raise fail("basic_auth_users", "needs the bcrypt package (pip install bcrypt)")
    return users


def _rate_limit(section: dict, fail: Callable[..., WebConfigError]) -> Optional[tuple[int, float]]:
    if not section:
        return None
    burst = section.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise fail("rate_limit.burst", "expects a whole number >= 0")
    interval = _duration(section.get("interval", 0), fail)
    if interval <= 0:
        return None  # exporter-toolkit: no interval, no limit
    if burst < 1:
        raise fail("rate_limit.burst", "must be at least 1 with an interval (0 would refuse every request)")
    return burst, interval


def _duration(value: Any, fail: Callable[..., WebConfigError]) -> float:
    """A Go duration ("1s", "250ms", "1m30s") or whole nanoseconds -> seconds."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value * 1e-9
    if isinstance(value, str) and value in ("0", ""):
        return 0.0
    if isinstance(value, str) and re.fullmatch(f"(?:{_DURATION.pattern})+", value):
        return sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(value))
    raise fail("rate_limit.interval", f"expects a duration like 1s or 250ms, got {value!r}")


# --------------------------------------------------------------------------- TLS context

def _context_builder(tls: TlsSettings,
                     fail: Callable[..., WebConfigError]) -> Callable[[], tuple[ssl.SSLContext, bytes]]:
    """build() -> (the context, the certificate chain's PEM it serves)."""
    def build() -> tuple[ssl.SSLContext, bytes]:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version, ctx.maximum_version = tls.min_version, tls.max_version
        if tls.ciphers:
            ctx.set_ciphers(tls.ciphers)
        if tls.prefer_server_ciphers:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        if tls.curve:
            ctx.set_ecdh_curve(tls.curve)
        cert = _load_chain(ctx, tls, fail)
        if tls.verify_mode != ssl.CERT_NONE:
            field = "tls_server_config.client_ca_file" if tls.client_ca_file else "tls_server_config.client_ca"
            try:
                ca = _pem(tls.client_ca_file, tls.client_ca, "client_ca", fail).decode("ascii")
                ctx.load_verify_locations(cadata=ca)
            except (ssl.SSLError, ValueError) as e:
                raise fail(field, f"cannot load the client CA: {e}") from None
            ctx.verify_mode = tls.verify_mode
        return ctx, cert
    return build


def _pem(path: str, inline: str, name: str, fail: Callable[..., WebConfigError]) -> bytes:
    """The PEM of ``<name>_file`` (a regular file, capped) or of the inline ``<name>``."""
    if not path:
        return inline.encode()
    try:
        return certificates.read_pem(path)
    except ValueError as e:
        raise fail(f"tls_server_config.{name}_file", str(e)) from None


def _load_chain(ctx: ssl.SSLContext, tls: TlsSettings, fail: Callable[..., WebConfigError]) -> bytes:
    """Load the certificate chain and key into ctx from the bytes read once; the chain's PEM."""
    cert, key = _pem(tls.cert_file, tls.cert, "cert", fail), _pem(tls.key_file, tls.key, "key", fail)
    with certificates.pem_path(cert) as cert_path, certificates.pem_path(key) as key_path:
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as e:
            raise fail("tls_server_config.key_file" if tls.key_file else "tls_server_config.key",
                       f"certificate and key do not load as a pair: {e}") from None
        except OSError as e:
            raise fail("tls_server_config.cert_file", f"cannot load: {e}") from None
    return cert


class _Reloading:
    """Calls return the current context. They run on the serving loop, so they do no I/O but a
    stat of the files at most once a second: a file that changed is rebuilt on a thread of its
    own, and the loop goes on serving the last good context meanwhile (and for good when the
    rebuild fails: logged). ``expiry`` watches the served certificate's dates."""

    def __init__(self, build: Callable[[], tuple[ssl.SSLContext, bytes]], paths: list[str]):
        self._build, self._paths = build, paths
        self._stamp = self._stamps()
        self.expiry = certificates.Expiry()
        self._ctx, cert = build()
        self.expiry.update(cert)
        self._checked = time.monotonic()
        self._reloading = False
        self.reloads = 0  # rebuilds that succeeded

    def _stamps(self) -> tuple:
        out: list[Optional[tuple[int, int, int]]] = []
        for p in self._paths:
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def __call__(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked < 1.0 or self._reloading:
            return self._ctx
        self._checked = now
        stamp = self._stamps()
        if stamp != self._stamp:
            self._stamp = stamp
            self._reloading = True
            threading.Thread(target=self._reload, name="tls-reload", daemon=True).start()
        else:
            self.expiry.check()
        return self._ctx

    def _reload(self) -> None:
        try:
            self._ctx, cert = self._build()
            self.expiry.update(cert)
            self.reloads += 1
            log.info("TLS certificates reloaded")
        except WebConfigError as e:
            log.warning("TLS certificates changed but do not load; keeping the previous ones",
                        extra={"error": str(e)})
        finally:
            self._reloading = False


# --------------------------------------------------------------------------- basic auth

# bcrypt of "fakepassword" (exporter-toolkit's): unknown users cost a hash too (no timing oracle);
# where users' hashes cost more than 10 rounds a decoy of that cost is made at load (BasicAuth)
_DECOY = b"$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
_COST = re.compile(rb"^\$2[abxy]?\$(\d\d)\$")


def _cost(hashed: bytes) -> int:
    m = _COST.match(hashed)
    return int(m.group(1)) if m else 10


def decoy_for(users: dict[str, bytes]) -> bytes:
    """A hash of the highest cost among ``users``' (an unknown user then costs what the dearest
    known one does: a wrong password for a known user must not take longer than for a made-up
    one, or user names can be told apart by timing)."""
    cost = max((_cost(h) for h in users.values()), default=10)
    if cost == _cost(_DECOY):
        return _DECOY
    import bcrypt
    return bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(rounds=min(max(cost, 4), 31)))


class BasicAuth:
    """Checks ``Authorization: Basic`` against bcrypt hashes. A check costs one bcrypt (tens of
    ms), so verdicts are cached as exporter-toolkit does, keyed by a SHA-256 of user, hash and
    password (the password is never kept); successes and failures in separate bounded caches,
    so a stream of wrong passwords cannot evict a good client's entry. One bcrypt at a time
    (the server queues the checks: web/authqueue.py)."""

    def __init__(self, users: dict[str, bytes], cache_size: int = 100):
        self._users = users
        self._decoy = decoy_for(users) if users else _DECOY
        self._size = cache_size
        self._ok: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._bad: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()

    @staticmethod
    def _credentials(authorization: Optional[str]) -> Optional[tuple[str, bytes]]:
        if not authorization:
            return None
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            raw = base64.b64decode(token.strip(), validate=True)
        except ValueError:
            return None
        user, sep, password = raw.partition(b":")
        if not sep:
            return None
        return user.decode("utf-8", "surrogateescape"), password

    def _key(self, user: str, password: bytes) -> bytes:
        hashed = self._users.get(user, self._decoy)
        return hashlib.sha256(b"\0".join((user.encode("utf-8", "surrogateescape"), hashed, password))).digest()

    def cached(self, authorization: Optional[str]) -> Optional[bool]:
        creds = self._credentials(authorization)
        if creds is None:
            return False
        key = self._key(*creds)
        with self._lock:
            if key in self._ok:
                self._ok.move_to_end(key)
                return True
            if key in self._bad:
                return False
        return None

    def user(self, authorization: Optional[str]) -> Optional[str]:
        creds = self._credentials(authorization)
        return creds[0] if creds is not None and creds[0] in self._users else None

    def verify(self, authorization: Optional[str]) -> bool:
        creds = self._credentials(authorization)
        if creds is None:
            return False
        user, password = creds
        import bcrypt
        with self._bcrypt_lock:
            try:
                ok = bcrypt.checkpw(password, self._users.get(user, self._decoy))
            except ValueError:  # a password over bcrypt's 72 bytes never matches (as Go's bcrypt)
                ok = False
        ok = ok and user in self._users
        key = self._key(user, password)
        with self._lock:
            cache = self._ok if ok else self._bad
            cache[key] = None
            while len(cache) > self._size:
                cache.popitem(last=False)
        return ok

