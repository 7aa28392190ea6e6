"""Certificates under attack and over time (issue 25 item 10): an expired or soon-expiring
certificate is said at start and exported as a metric; certificate files that are FIFOs or huge
are refused at start and, swapped in later, never stall a scrape or a probe (the reload runs
off the serving loop and keeps the last good context)."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import logging
import os
import ssl
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

pytest.importorskip("cryptography", reason="the web extra (cryptography) reads certificate dates")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from hetero_exporter.exposition.collector import TlsCertificateCollector  # noqa: E402
from hetero_exporter.exposition.server import MetricsServer  # noqa: E402
from hetero_exporter.web import certificates  # noqa: E402
from hetero_exporter.web import config as web_config  # noqa: E402
from hetero_exporter.web.config import WebConfigError  # noqa: E402

DAY = 86400.0
TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def self_signed(directory, not_before: float, not_after: float, name: str = "server") -> bytes:
    """A self-signed certificate for 127.0.0.1 valid between the two Unix times; its PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(datetime.datetime.fromtimestamp(not_before, datetime.timezone.utc))
            .not_valid_after(datetime.datetime.fromtimestamp(not_after, datetime.timezone.utc))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (directory / f"{name}.crt").write_bytes(pem)
    (directory / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                              serialization.PrivateFormat.PKCS8,
                                                              serialization.NoEncryption()))
    return pem


def load(directory):
    (directory / "web.yml").write_text(TLS)
    return web_config.load(str(directory / "web.yml"))


def expiry_metric(web) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(TlsCertificateCollector(web.certificate_expiry))
    return generate_latest(reg).decode()


def test_an_expired_certificate_is_said_at_start_and_its_expiry_exported(tmp_path, caplog):
    now = time.time()
    self_signed(tmp_path, now - 10 * DAY, now - 2 * DAY)
    with caplog.at_level(logging.WARNING, logger="hetero_exporter.web.certificates"):
        web = load(tmp_path)
    said = [r for r in caplog.records if "TLS certificate expired 2 days ago" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.ERROR
    assert web.certificate_expiry() == pytest.approx(int(now - 2 * DAY), abs=1)
    line = next(ln for ln in expiry_metric(web).splitlines()
                if ln.startswith("accelerator_tls_certificate_expiry_timestamp_seconds "))
    assert float(line.split()[1]) == web.certificate_expiry()


def test_a_valid_certificate_is_quiet_and_one_near_expiry_warns(tmp_path, caplog):
    now = time.time()
    self_signed(tmp_path, now - DAY, now + 90 * DAY)
    with caplog.at_level(logging.WARNING, logger="hetero_exporter.web.certificates"):
        load(tmp_path)
        assert not caplog.records
        self_signed(tmp_path, now - DAY, now + 3 * DAY + 600)
        load(tmp_path)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["TLS certificate expires in 3 days"]
    assert caplog.records[0].levelno == logging.WARNING


def test_expiry_warnings_repeat_once_a_day_and_stop_after_renewal(tmp_path, caplog):
    clock = [1_000_000.0]
    pem = self_signed(tmp_path, clock[0] - DAY, clock[0] + 2 * DAY)
    watch = certificates.Expiry(clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="hetero_exporter.web.certificates"):
        watch.update(pem)
        for _ in range(100):  # a check a second for 100 s: said once
            clock[0] += 1
            watch.check()
        assert len(caplog.records) == 1
        clock[0] += DAY
        watch.check()  # a day later: said again
        clock[0] += DAY
        watch.check()  # expired now: a new kind, said at once (an error)
        assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2 + [logging.ERROR]
        watch.update(self_signed(tmp_path, clock[0] - DAY, clock[0] + 365 * DAY))  # renewed
        clock[0] += 2 * DAY
        watch.check()
    assert len(caplog.records) == 3 and watch.problem() is None


def test_unknown_dates_are_never_guessed():
    watch = certificates.Expiry()
    watch.update(b"not a certificate")
    assert (watch.not_after, watch.problem()) == (None, None)


@pytest.mark.parametrize("make", ["fifo", "huge", "directory"])
def test_a_certificate_file_that_is_no_small_regular_file_is_refused_at_start(tmp_path, make):
    now = time.time()
    self_signed(tmp_path, now - DAY, now + 90 * DAY)
    os.unlink(tmp_path / "server.crt")
    if make == "fifo":
        os.mkfifo(tmp_path / "server.crt")  # nobody writes to it: an open for reading would hang
    elif make == "huge":
        (tmp_path / "server.crt").write_bytes(b"A" * (certificates.MAX_PEM + 1))
    else:
        os.mkdir(tmp_path / "server.crt")
    with pytest.raises(WebConfigError, match=r"tls_server_config\.cert_file: cannot read .*server\.crt: "
                                             r"(not a regular file|over 1048576 bytes)"):
        load(tmp_path)


def test_a_fifo_swapped_in_later_never_stalls_serving_and_the_last_good_certificate_stays(tmp_path, caplog):
    now = time.time()
    self_signed(tmp_path, now - DAY, now + 90 * DAY)
    web = load(tmp_path)
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None, web=web).start()
    client = ssl.create_default_context(cafile=str(tmp_path / "server.crt"))
    served: list[tuple[int, float]] = []
    stop = threading.Event()

    def probe():  # the probes and scrapes that ran while the FIFO was in place
        while not stop.is_set() and len(served) < 200:
            conn = http.client.HTTPSConnection(*srv.address, context=client, timeout=10)
            t0 = time.monotonic()
            try:
                conn.request("GET", "/healthz")
                served.append((conn.getresponse().status, time.monotonic() - t0))
            except OSError:
                served.append((0, time.monotonic() - t0))
            finally:
                conn.close()
            time.sleep(0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="hetero_exporter.web.config"):
            os.unlink(tmp_path / "server.crt")
            os.mkfifo(tmp_path / "server.crt")
            worker = threading.Thread(target=probe)
            worker.start()
            deadline = time.monotonic() + 10
            while not any("do not load" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            worker.join(30)
        assert any("not a regular file" in str(getattr(r, "error", "")) for r in caplog.records)
        assert served and all(status == 200 for status, _ in served), served
        # and it was the old certificate that was served: the client trusts exactly that one
    finally:
        srv.stop()
