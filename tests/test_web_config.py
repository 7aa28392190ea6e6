"""The web configuration (exporter-toolkit's format): TLS with certificates made by the openssl
CLI, client certificates required and verified, allowed SANs, basic auth, extra headers, rate
limit, certificate reload; and every bad file refused with the field named (the CLI exits 2)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time

import bcrypt
import pytest
from prometheus_client import CollectorRegistry

from conftest import require_tool
from hetero_exporter.exposition.server import MetricsServer
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.scoring.server import ExtenderServer
from hetero_exporter.web import config as web_config
from hetero_exporter.web.config import WebConfigError

PASSWORD = "s3cret"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: quick tests
EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(cwd, *args: str) -> None:
    subprocess.run([require_tool("openssl"), *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA; server (127.0.0.1), prometheus and intruder client certificates it signed; a
    self-signed stranger claiming the prometheus name."""
    d = tmp_path_factory.mktemp("pki")
    openssl(d, "req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test-ca")
    for name, san, usage in (("server", "DNS:localhost,IP:127.0.0.1", "serverAuth"),
                             ("server2", "DNS:localhost,IP:127.0.0.1", "serverAuth"),
                             ("prometheus", "DNS:prometheus", "clientAuth"),
                             ("intruder", "DNS:intruder", "clientAuth")):
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
        openssl(d, "req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    openssl(d, "req", "-x509", *EC, "-keyout", "stranger.key", "-out", "stranger.crt", "-days", "2",
            "-subj", "/CN=prometheus", "-addext", "subjectAltName=DNS:prometheus")
    return d


def settings(pki, text: str):
    path = pki / "web.yml"
    path.write_text(text)
    return web_config.load(str(path))


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
MTLS = TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"


def client_context(pki, cert: str = "") -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return ctx


def https(address, ctx, path="/healthz", method="GET", body=None, headers=None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPSConnection(*address, context=ctx, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def refused(address, ctx) -> bool:
    """The TLS connection (or its first request) fails: handshake alert, reset or close."""
    try:
        https(address, ctx)
    except (OSError, http.client.HTTPException):
        return True
    return False


@pytest.fixture(params=["agent", "extender"])
def serve(request):
    """serve(web settings) -> address of a started server of either face."""
    started = []

    def start(web):
        if request.param == "agent":
            srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None, web=web)
        else:
            srv = ExtenderServer(("127.0.0.1", 0), Extender(Scorer(), None), web=web)
        started.append(srv.start())
        return srv.address
    yield start
    for srv in started:
        srv.stop()


# --------------------------------------------------------------------------- TLS

@pytest.mark.integration
def test_tls_serves_both_faces_and_refuses_plain_http(pki, serve):
    address = serve(settings(pki, TLS))
    status, _, body = https(address, client_context(pki))
    assert (status, body) == (200, b"ok\n")
    plain = socket.create_connection(address, timeout=10)
    plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        answer = plain.recv(100)
    except ConnectionResetError:
        answer = b""
    assert not answer.startswith(b"HTTP/")


@pytest.mark.integration
def test_client_certificate_required_and_verified(pki, serve):
    address = serve(settings(pki, MTLS))
    assert https(address, client_context(pki, "prometheus"))[0] == 200
    assert refused(address, client_context(pki))              # no certificate
    assert refused(address, client_context(pki, "stranger"))  # not signed by the CA


@pytest.mark.integration
def test_client_certificate_verified_if_given(pki, serve):
    address = serve(settings(pki, TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"))
    assert https(address, client_context(pki))[0] == 200
    assert https(address, client_context(pki, "prometheus"))[0] == 200
    assert refused(address, client_context(pki, "stranger"))


@pytest.mark.integration
def test_client_allowed_sans(pki, serve):
    address = serve(settings(pki, MTLS + "  client_allowed_sans: [prometheus]\n"))
    assert https(address, client_context(pki, "prometheus"))[0] == 200
    assert refused(address, client_context(pki, "intruder"))  # signed by the CA, another name


@pytest.mark.integration
def test_extender_over_mutual_tls_as_kube_scheduler_calls_it(pki):
    srv = ExtenderServer(("127.0.0.1", 0), Extender(Scorer(), None), web=settings(pki, MTLS)).start()
    try:
        body = json.dumps({"Pod": {"metadata": {"name": "p"}, "spec": {"containers": []}}, "Nodes": {"items": []}})
        status, headers, answer = https(srv.address, client_context(pki, "prometheus"), "/filter", "POST",
                                        body.encode(), {"Content-Type": "application/json"})
        assert status in (200, 400) and headers["x-trace-id"] and json.loads(answer)
    finally:
        srv.stop()


@pytest.mark.integration
def test_cipher_suites_inline_pem_and_tls_versions(pki):
    text = ("tls_server_config:\n  cert: |\n" + _indent((pki / "server.crt").read_text()) +
            "  key: |\n" + _indent((pki / "server.key").read_text()) +
            "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n")
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None,
                        web=settings(pki, text)).start()
    try:
        with socket.create_connection(srv.address, timeout=10) as raw:
            with client_context(pki).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.version() == "TLSv1.2" and tls.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    finally:
        srv.stop()


def _indent(pem: str) -> str:
    return "".join(f"    {line}\n" for line in pem.splitlines())


@pytest.mark.integration
def test_rotated_certificates_are_served_without_restart(pki, tmp_path):
    for name in ("server.crt", "server.key", "ca.crt"):
        shutil.copy(pki / name, tmp_path / name)
    (tmp_path / "web.yml").write_text(TLS)
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None,
                        web=web_config.load(str(tmp_path / "web.yml"))).start()

    def served() -> bytes:
        with socket.create_connection(srv.address, timeout=10) as raw:
            with client_context(pki).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                return tls.getpeercert(binary_form=True)
    try:
        first = served()
        for name in ("server2.crt", "server2.key"):
            shutil.copy(pki / name, tmp_path / name.replace("server2", "server"))
        deadline = time.monotonic() + 10
        while served() == first and time.monotonic() < deadline:
            time.sleep(0.2)
        assert served() != first
    finally:
        srv.stop()


# --------------------------------------------------------------------------- basic auth, headers, rate

def auth_header(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def plain_get(address, path: str, headers=None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}
    finally:
        conn.close()


def test_basic_auth_right_wrong_missing(pki, serve):
    web = settings(pki, f"basic_auth_users:\n  prometheus: '{HASH}'\n")
    address = serve(web)
    good = auth_header("prometheus", PASSWORD)
    assert web.auth.cached(good["Authorization"]) is None
    assert plain_get(address, "/", good)[0] == 200
    assert web.auth.cached(good["Authorization"]) is True  # later scrapes skip bcrypt
    for headers in ({}, auth_header("prometheus", "wrong"), auth_header("nobody", PASSWORD),
                    {"Authorization": "Basic !!!"}, {"Authorization": "Bearer x"}):
        status, answer = plain_get(address, "/", headers)
        assert status == 401 and answer["www-authenticate"].startswith("Basic"), headers
    assert plain_get(address, "/healthz")[0] == 200  # probes need no password


def test_extra_headers_and_rate_limit(pki):
    web = settings(pki, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                        "    Content-Security-Policy: \"default-src 'none'\"\n  http2: true\n"
                        "rate_limit:\n  burst: 2\n  interval: 1h\n")
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None, web=web).start()
    try:
        status, headers = plain_get(srv.address, "/")
        assert status == 200 and headers["x-frame-options"] == "deny"
        assert headers["content-security-policy"] == "default-src 'none'"
        assert plain_get(srv.address, "/")[0] == 200
        assert plain_get(srv.address, "/")[0] == 429
        # issue 25, item 11: kubelet's probes are not limited by the flood (a 429 there restarts
        # a healthy agent)
        assert [plain_get(srv.address, p)[0] for p in ("/healthz", "/readyz") * 10].count(429) == 0
    finally:
        srv.stop()


def test_an_authenticated_scraper_is_not_limited_by_unauthenticated_traffic(pki):
    web = settings(pki, f"basic_auth_users:\n  prometheus: '{HASH}'\nrate_limit:\n  burst: 2\n  interval: 1h\n")
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None, web=web).start()
    try:
        good = auth_header("prometheus", PASSWORD)
        assert plain_get(srv.address, "/", good)[0] == 200  # verified once (takes a token)
        flood = [plain_get(srv.address, "/")[0] for _ in range(20)]
        assert flood.count(429) >= 18  # the anonymous are limited
        assert [plain_get(srv.address, "/", good)[0] for _ in range(10)] == [200] * 10
        assert plain_get(srv.address, "/healthz")[0] == 200
    finally:
        srv.stop()


# --------------------------------------------------------------------------- bad files

BAD = [
    ("nope: 1\n", "nope: unknown field"),
    ("[1, 2]\n", "(top level): expects a mapping"),
    ("a: [\n", "not valid YAML"),
    ("basic_auth_users: {a: x}\nbasic_auth_users: {b: y}\n", "duplicate key"),
    ("tls_server_config:\n  cert_file: server.crt\n", "tls_server_config.key_file: missing"),
    (TLS + "  bogus: 1\n", "tls_server_config.bogus: unknown field"),
    (TLS + "  cert: x\n", "tls_server_config.cert_file: set one of"),
    (TLS + "  client_auth_type: Sometimes\n", "tls_server_config.client_auth_type: unknown"),
    (TLS + "  client_auth_type: RequireAnyClientCert\n", "tls_server_config.client_auth_type: RequireAnyClientCert"),
    (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", "tls_server_config.client_ca_file: required"),
    (TLS + "  client_ca_file: ca.crt\n", "tls_server_config.client_ca_file: a client CA is configured"),
    (TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n  client_allowed_sans: [a]\n",
     "tls_server_config.client_allowed_sans"),
    (MTLS + "  client_allowed_sans: a\n", "tls_server_config.client_allowed_sans: expects a list"),
    (TLS + "  min_version: TLS14\n", "tls_server_config.min_version: unknown TLS version"),
    (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "tls_server_config.min_version: is above"),
    (TLS + "  cipher_suites: [TLS_FOO]\n", "tls_server_config.cipher_suites: unknown cipher"),
    (TLS + "  cipher_suites: [TLS_RSA_WITH_3DES_EDE_CBC_SHA]\n", "tls_server_config.cipher_suites: TLS_RSA_WITH_3DES"),
    (TLS + "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "tls_server_config.cipher_suites: lists only TLS 1.3"),
    (TLS + "  curve_preferences: [CurveP256, X25519]\n", "tls_server_config.curve_preferences: Python"),
    (TLS + "  curve_preferences: [Curve25519]\n", "tls_server_config.curve_preferences: unknown curve"),
    (TLS + "  prefer_server_cipher_suites: 1\n", "tls_server_config.prefer_server_cipher_suites"),
    ("tls_server_config:\n  cert_file: absent.crt\n  key_file: server.key\n", "tls_server_config.cert_file: cannot read"),
    ("tls_server_config:\n  cert_file: server.crt\n  key_file: prometheus.key\n", "tls_server_config.key_file: "),
    (MTLS.replace("ca.crt", "server.key"), "tls_server_config.client_ca_file: cannot load"),
    ("http_server_config:\n  headers:\n    Server: x\n", "http_server_config.headers.Server: this header can not"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "http_server_config.headers.X-Frame-Options"),
    ("http_server_config:\n  http2: 'yes'\n", "http_server_config.http2"),
    ("http_server_config:\n  h3: true\n", "http_server_config.h3: unknown field"),
    ("basic_auth_users:\n  admin: plaintext\n", "basic_auth_users.admin: expects a bcrypt hash"),
    ("rate_limit:\n  burst: 1\n  interval: fast\n", "rate_limit.interval"),
    ("rate_limit:\n  burst: -1\n  interval: 1s\n", "rate_limit.burst"),
    ("rate_limit:\n  interval: 1s\n", "rate_limit.burst: must be at least 1"),
]


@pytest.mark.integration
@pytest.mark.parametrize("text, message", BAD)
def test_bad_files_are_refused_naming_the_field(pki, text, message):
    with pytest.raises(WebConfigError) as e:
        settings(pki, text)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(WebConfigError, match="cannot read"):
        web_config.load(str(tmp_path / "absent.yml"))
    (tmp_path / "empty.yml").write_text("")
    web = web_config.load(str(tmp_path / "empty.yml"))
    assert web.ssl_context is None and web.auth is None


@pytest.mark.parametrize("command", [["run", "--simulate"], ["scheduler-extender"]])
def test_cli_exits_2_with_one_line_naming_the_field(tmp_path, command):
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: a.crt\n")
    proc = subprocess.run([sys.executable, "-m", "hetero_exporter", *command, "--listen", "127.0.0.1:0",
                           "--web.config.file", str(tmp_path / "web.yml")],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "KUBECONFIG": "/nonexistent"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "tls_server_config.key_file" in lines[0]


def test_an_unknown_user_costs_as_many_bcrypt_rounds_as_the_dearest_known_one(monkeypatch):
    """Issue 25, item 12: a known user's wrong password took 100 ms, an unknown user's 55 (a
    cost-12 hash against the cost-10 decoy): user names could be enumerated by timing. The decoy
    now has the users' cost; measured by the rounds bcrypt is asked for, not by a clock."""
    bcrypt = pytest.importorskip("bcrypt")
    from hetero_exporter.web.config import BasicAuth
    known = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=12))
    auth = BasicAuth({"alice": known})
    seen = []
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda pw, h: (seen.append(h[:7]), real(pw, h))[1])
    import base64
    for user in ("alice", "mallory"):
        assert not auth.verify("Basic " + base64.b64encode(f"{user}:wrong".encode()).decode())
    assert seen[0] == seen[1] == known[:7]  # "$2b$12$": the same cost for both
