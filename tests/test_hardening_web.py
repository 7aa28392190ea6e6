"""Issue 35, items 7, 10 and 11 (bcrypt): the bounded HTTP server under a flood of body senders
just above the rate floor, a rate limit drained by the anonymous before an authenticated client's
first request, and uncached basic-auth checks queued behind a flood of wrong passwords. Each
attack is a scaled-down copy on 127.0.0.1; the assertions are outcomes (answers received, the
position of the scraper's check in the bcrypt queue), never timings."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import threading
import time
from typing import Optional

import pytest
from prometheus_client import CollectorRegistry

from test_web_config import HASH, MTLS, PASSWORD, TLS, auth_header, client_context, https, pki, settings  # noqa: F401
from test_web_server import SlowBodies, metrics_server, wait_for
from hetero_exporter.exposition.server import MetricsServer
from hetero_exporter.scoring.extender import Extender
from hetero_exporter.scoring.scorer import Scorer
from hetero_exporter.scoring.server import ExtenderServer
from hetero_exporter.web import config as web_config
from hetero_exporter.web.config import WebConfigError
from hetero_exporter.web.server import Limits

FILTER = json.dumps({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [{"metadata": {"name": "n1"}}]}})


def serve(face: str, limits: Limits):
    if face == "agent":
        return metrics_server(limits).start()
    return ExtenderServer(("127.0.0.1", 0), Extender(Scorer(), None), limits=limits,
                          max_body_bytes=limits.max_body_bytes).start()


def call(address, method: str = "GET", path: str = "/healthz", body: Optional[str] = None,
         headers: Optional[dict] = None, source: str = "") -> int:
    """One request on a new connection (10 s allowed): its status, 0 when none came."""
    conn = http.client.HTTPConnection(*address, timeout=10, source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        r.read()
        return r.status
    except (OSError, http.client.HTTPException):
        return 0
    finally:
        conn.close()


# A scaled-down copy of the finding (140 senders at 20 KiB/s against a cap of 128 and a 16 KiB/s
# floor): 20 senders at 2 KiB/s against a cap of 16 and a 1 KiB/s floor, the extender's 5 s deadline.
SCALED = dict(max_connections=16, min_body_rate=1024, body_timeout=5.0, max_body_bytes=1 << 20)


def answers_during(srv, face: str, rounds: int = 10) -> list[int]:
    assert wait_for(lambda: srv.http.open_connections >= srv.http.max_connections, 60)
    out = []
    for _ in range(rounds):
        out.append(call(srv.address, "GET", "/healthz"))
        if face == "extender":
            out.append(call(srv.address, "POST", "/filter", FILTER, {"Content-Type": "application/json"}))
        else:
            out.append(call(srv.address, "GET", "/metrics"))
        time.sleep(0.1)
    return out


@pytest.mark.parametrize("face", ["agent", "extender"])
@pytest.mark.parametrize("length, evicted", [(1_000_000, "evicted_slow_body"), (8192, "evicted_body")])
def test_bodies_above_the_rate_floor_do_not_lock_out_probes_and_the_scheduler(face, length, evicted):
    """Item 7: a body that cannot be whole by the deadline at the rate it comes (1 MB at 2 KiB/s)
    is the first closed for room, however far above the floor that rate is; and where every body
    would be whole in time (8 KiB at 2 KiB/s), the one with the most still to come makes room."""
    srv = serve(face, Limits(**SCALED))
    try:
        with SlowBodies(srv.address, 20, length, rate=2048, tick=0.1, reconnects=3000):
            answers = answers_during(srv, face)
        # the old code answered none; a newcomer may still meet a full cap now and then while the
        # flood's own reconnects are reading their heads (on a loaded machine 17 of 20 were seen)
        assert answers.count(200) >= len(answers) * 3 // 4, answers
        assert srv.http.stats[evicted] > 0
    finally:
        srv.stop()


@pytest.mark.parametrize("face", ["agent", "extender"])
def test_a_body_just_above_the_floor_is_cut_at_the_deadline(face):
    srv = serve(face, Limits(**{**SCALED, "body_timeout": 2.0}))
    try:
        with SlowBodies(srv.address, 1, 1_000_000, reconnects=0, rate=2048, tick=0.1) as flood:
            assert wait_for(lambda: flood.dropped == 1, 60)
        assert srv.http.stats["request_timeout"] == 1 and srv.http.stats["slow_body"] == 0
    finally:
        srv.stop()


# --------------------------------------------------------------------------- rate limit (item 10)


def test_an_authenticated_scrapers_first_request_is_not_limited_by_an_anonymous_flood(pki):  # noqa: F811
    """Item 10: the flood drained the bucket before the scraper's credentials were ever
    verified, so every scrape got 429 (20 of 20): an uncached check is made before the limit."""
    web = settings(pki, f"basic_auth_users:\n  prometheus: '{HASH}'\nrate_limit:\n  burst: 2\n  interval: 1h\n")
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None, web=web).start()
    try:
        flood = [call(srv.address, path="/") for _ in range(20)]
        assert flood.count(429) >= 18
        good = auth_header("prometheus", PASSWORD)
        assert [call(srv.address, path="/", headers=good) for _ in range(20)] == [200] * 20
        assert call(srv.address, path="/", headers=auth_header("prometheus", "wrong")) == 429
    finally:
        srv.stop()


@pytest.mark.integration
def test_a_client_with_a_verified_certificate_is_not_limited_by_an_anonymous_flood(pki):  # noqa: F811
    web = settings(pki, TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"
                              "rate_limit:\n  burst: 2\n  interval: 1h\n")
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None, web=web).start()
    try:
        anonymous = [https(srv.address, client_context(pki), "/")[0] for _ in range(5)]
        assert anonymous.count(429) >= 3
        assert [https(srv.address, client_context(pki, "prometheus"), "/")[0] for _ in range(5)] == [200] * 5
    finally:
        srv.stop()


# --------------------------------------------------------------------------- bcrypt (item 11)


def test_a_bcrypt_cost_above_the_cap_is_refused_at_load_with_one_line(tmp_path):
    """A cost-31 hash takes days a check (each unknown user too: the decoy has the users' cost)."""
    for cost in (13, 31):
        dear = HASH.replace("$04$", f"${cost}$", 1)  # the format checks; no need to hash at that cost
        (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prometheus: '{dear}'\n")
        with pytest.raises(WebConfigError) as e:
            web_config.load(str(tmp_path / "web.yml"))
        assert f"basic_auth_users.prometheus: bcrypt cost {cost} is above {web_config.MAX_BCRYPT_COST}" in str(e.value)
        assert "\n" not in str(e.value)
    ok = HASH.replace("$04$", f"${web_config.MAX_BCRYPT_COST:02d}$", 1)
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  prometheus: '{ok}'\n")
    assert web_config.load(str(tmp_path / "web.yml")).auth is not None


class GatedAuth:
    """BasicAuth whose slow checks wait for the test to let each one through (a slow bcrypt
    without a clock): ``checked`` is the order in which the checks ran."""

    def __init__(self, inner):
        self.inner = inner
        self.gate = threading.Semaphore(0)
        self.open = False
        self.checked: list[str] = []
        self.seen = 0  # requests the server has looked at

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def cached(self, authorization):
        self.seen += 1
        return self.inner.cached(authorization)

    def verify(self, authorization):
        self.checked.append(authorization)
        if not self.open:
            self.gate.acquire(timeout=60)
        return self.inner.verify(authorization)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def send_get(address, authorization: str, source: str) -> socket.socket:
    s = socket.create_connection(address, timeout=30, source_address=(source, 0))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: %s\r\n\r\n" % authorization.encode())
    return s


def status_of(s: socket.socket) -> int:
    data = b""
    try:
        while b"\r\n" not in data and len(data) < 4096:
            piece = s.recv(4096)
            if not piece:
                break
            data += piece
    except OSError:
        pass
    finally:
        s.close()
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0


def test_wrong_passwords_do_not_queue_bcrypt_work_ahead_of_the_scraper():
    """Item 11: 30 hosts' distinct wrong passwords (made-up users) and one host's wrong passwords
    for the real user were each hashed in turn on one thread, ahead of the scraper's first
    login: it waited 31 hashes and more (seconds each at a high cost). Now a host has one check
    waiting per user, known users are not queued behind made-up ones, and what does not fit is
    answered 503 at once."""
    users = {"prometheus": HASH.encode()}
    auth = GatedAuth(web_config.BasicAuth(users))
    srv = MetricsServer("127.0.0.1:0", CollectorRegistry(auto_describe=False), lambda: None,
                        web=web_config.WebSettings(auth=auth)).start()
    socks = []
    try:
        for i in range(30):
            socks.append(send_get(srv.address, basic(f"user{i}", f"guess{i}"), f"127.0.0.{10 + i}"))
        for i in range(5):
            socks.append(send_get(srv.address, basic("prometheus", f"guess{i}"), "127.0.0.1"))
        assert wait_for(lambda: auth.seen >= len(socks), 60)
        good = basic("prometheus", PASSWORD)
        scraper = send_get(srv.address, good, "127.0.0.2")
        assert wait_for(lambda: auth.seen >= len(socks) + 1, 60)
        for _ in range(100):  # bounded: let the checks through one at a time until the scraper's ran
            if good in auth.checked:
                break
            ran = len(auth.checked)
            auth.gate.release()
            wait_for(lambda: len(auth.checked) > ran or good in auth.checked, 60)
        assert good in auth.checked
        assert auth.checked.index(good) <= 4, len(auth.checked)
        auth.open = True
        for _ in range(100):
            auth.gate.release()
        assert status_of(scraper) == 200
        assert {status_of(s) for s in socks} <= {401, 503}
    finally:
        auth.open = True
        for _ in range(100):
            auth.gate.release()
        for s in socks:
            s.close()
        srv.stop()


def test_the_auth_queue_hashes_identical_credentials_once_and_lanes_take_turns():
    from hetero_exporter.web.authqueue import AuthQueue
    started: list[tuple[str, object]] = []
    queue = AuthQueue(lambda header, done: started.append((header, done)), lane_size=2)
    answers: list[tuple[str, bool]] = []

    def waiter(name):
        return lambda ok: answers.append((name, ok))

    assert queue.submit("u1", None, "10.0.0.1", waiter("a"))           # runs at once
    assert queue.submit("u2", None, "10.0.0.2", waiter("b"))
    assert not queue.submit("u3", None, "10.0.0.2", waiter("c"))       # one per address in a lane
    assert queue.submit("u3", None, "10.0.0.3", waiter("c"))
    assert not queue.submit("u4", None, "10.0.0.4", waiter("d"))       # the lane is full
    assert queue.submit("good", "prometheus", "10.0.0.9", waiter("p1"))
    assert queue.submit("good", "prometheus", "10.0.0.9", waiter("p2"))  # the same credentials wait once
    order = []
    for _ in range(10):  # bounded: finish what runs, in turn
        if not started:
            break
        header, done = started.pop(0)
        order.append(header)
        done(header == "good")
    assert order == ["u1", "u2", "good", "u3"]  # the user's lane did not wait behind the made-up names
    assert ("p1", True) in answers and ("p2", True) in answers and len(queue) == 0
