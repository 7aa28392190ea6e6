"""Kubernetes REST calls on resource paths, without the client's generated API classes.

Importing ``CoreV1Api`` costs ~21 MiB of RSS (issue 16): its module imports every core/v1
model class, while the agent reads and writes plain JSON. ``Api`` sends the requests the
generated methods send, through the same ``kubernetes.client.ApiClient`` (its path and query
encoding, default headers such as User-Agent, authentication with token refresh, TLS, proxy,
timeouts), and never touches the model layer:

- ``Api(api_client).get / post / patch(path, ...) -> dict``: the JSON body, ``K8sError`` on any
  failure (``client.call`` semantics). ``path`` is a template (``/api/v1/nodes/{name}``) filled
  from ``params``, each value quoted whole; ``query`` uses the API's own parameter names
  (``fieldSelector``), ``None`` values left out, sent sorted by name (the order of the generated
  methods, whose parameters follow the API's alphabetical list).
- ``Api.watch(path, ...) -> WatchStream``: one ``?watch=true`` request whose events are read
  line by line from the response, each line bounded (``MAX_EVENT_BYTES``); ``close()`` from
  another thread ends a blocking read at once.

Headers are those of the generated methods: ``Accept: application/json`` (after a Table, where a
list is asked as one: ``TABLE, application/json``, so a server without Tables answers the list), the patch's
``Content-Type`` (strategic merge for built-in kinds, merge or JSON patch when asked), and no
Content-Type on a POST (the client sends its JSON body without one; the API server reads JSON).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Union

from hetero_exporter.k8s.client import DEFAULT_TIMEOUT_SECONDS, K8sError, call, decode_json, error_from_body

JSON = "application/json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"  # a list as rows of printed columns (meta.k8s.io/v1)
PATCH_TYPES = (STRATEGIC_MERGE_PATCH, MERGE_PATCH, JSON_PATCH)

# One watch event is one object in JSON: etcd stores at most 1.5 MiB per object (protobuf), its
# JSON is at most about twice that. A longer line is not an event but a broken or hostile stream.
MAX_EVENT_BYTES = 4 << 20
READ_BYTES = 64 << 10  # per read of a stream: a chunk announced as 1 GiB is read in pieces
MAX_ERROR_BODY = 64 << 10  # bytes of an error answer kept for its message

Timeout = Union[float, tuple[float, float]]  # seconds: total, or (connect, read)
Query = Mapping[str, Union[str, int, bool, None]]


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class Api:
    """Typed REST calls over one ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, timeout: float = DEFAULT_TIMEOUT_SECONDS):
        self.api_client = api_client
        self.timeout = timeout

    # ------------------------------------------------------------------ JSON in, JSON out

    def get(self, path: str, params: Optional[Mapping[str, str]] = None, *, query: Optional[Query] = None,
            timeout: Optional[Timeout] = None, accept: str = JSON) -> dict:
        """``accept``: another representation first (a Table: ``TABLE``), plain JSON after it."""
        return self.request("GET", path, params, query=query, timeout=timeout, accept=accept)

    def post(self, path: str, params: Optional[Mapping[str, str]] = None, *, body: Any,
             query: Optional[Query] = None, timeout: Optional[Timeout] = None) -> dict:
        return self.request("POST", path, params, query=query, body=body, timeout=timeout)

    def patch(self, path: str, params: Optional[Mapping[str, str]] = None, *, body: Any,
              content_type: str = STRATEGIC_MERGE_PATCH, query: Optional[Query] = None,
              timeout: Optional[Timeout] = None) -> dict:
        if content_type not in PATCH_TYPES:
            raise ValueError(f"content_type: one of {', '.join(PATCH_TYPES)}, not {content_type!r}")
        if (content_type == JSON_PATCH) != isinstance(body, list):
            raise ValueError("body: a JSON patch is a list of operations, the other patches an object")
        return self.request("PATCH", path, params, query=query, body=body, content_type=content_type,
                            timeout=timeout)

    def request(self, method: str, path: str, params: Optional[Mapping[str, str]] = None, *,
                query: Optional[Query] = None, body: Any = None, content_type: Optional[str] = None,
                timeout: Optional[Timeout] = None, accept: str = JSON) -> dict:
        """One request; the decoded JSON body, ``K8sError`` on any failure."""
        def send(_preload_content: bool = False, _request_timeout: Optional[Timeout] = None) -> Any:
            return self.open(method, path, params, query=query, body=body, content_type=content_type,
                             timeout=_request_timeout, accept=accept)
        return call(send, timeout=self.timeout if timeout is None else timeout)

    # ------------------------------------------------------------------ the one way out

    def open(self, method: str, path: str, params: Optional[Mapping[str, str]] = None, *,
             query: Optional[Query] = None, body: Any = None, content_type: Optional[str] = None,
             timeout: Optional[Timeout] = None, accept: str = JSON) -> Any:
        """Send the request; the urllib3 response, its body unread. Raises what the client raises
        (``ApiException`` for an error answer on clients of the "python-legacy" generator, urllib3
        and OS errors for transport failures); newer clients return error answers as responses."""
        client = self.api_client
        headers = {"Accept": JSON if accept == JSON else f"{accept}, {JSON}"}
        if content_type:
            headers["Content-Type"] = content_type
        pairs = sorted((k, v) for k, v in (query or {}).items() if v is not None)
        if hasattr(client, "param_serialize"):  # clients of openapi-generator 7 ("python", pydantic; 37.x)
            request = client.param_serialize(method=method, resource_path=path, path_params=dict(params or {}),
                                             query_params=pairs, header_params=headers, body=body,
                                             auth_settings=["BearerToken"])
            return client.call_api(*request, _request_timeout=timeout).response
        # older clients ("python-legacy"): the same arguments, by keyword, to the older call_api
        return client.call_api(path, method, path_params=dict(params or {}), query_params=pairs,
                               header_params=headers, body=body, auth_settings=["BearerToken"],
                               _return_http_data_only=True, _preload_content=False,
                               _request_timeout=timeout)

    # ------------------------------------------------------------------ watches

    def watch(self, path: str, params: Optional[Mapping[str, str]] = None, *, query: Optional[Query] = None,
              resource_version: Optional[str] = None, timeout_seconds: int = 300,
              request_timeout: float = DEFAULT_TIMEOUT_SECONDS) -> "WatchStream":
        """Open a watch (bookmarks on, ``timeoutSeconds`` on the server side, a read timeout a
        little longer); ``WatchExpired`` when answered 410, ``K8sError`` on any other failure."""
        import urllib3
        try:
            from kubernetes.client.exceptions import ApiException
        except ImportError:  # pragma: no cover - clients before 12
            from kubernetes.client.rest import ApiException
        q = {**(query or {}), "watch": True, "allowWatchBookmarks": True, "resourceVersion": resource_version,
             "timeoutSeconds": int(timeout_seconds)}
        try:
            resp = self.open("GET", path, params, query=q,
                             timeout=(request_timeout, timeout_seconds + request_timeout))
        except ApiException as e:
            if e.status == 410:
                raise WatchExpired() from None
            raise error_from_body(int(e.status or 0), getattr(e, "body", None), str(e.reason or ""),
                                  prefix="watch: ") from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise K8sError(f"watch: no answer from the API server: {type(e).__name__}: {e}") from None
        status = int(getattr(resp, "status", 200))
        if not 200 <= status <= 299:
            try:
                raw = resp.read(MAX_ERROR_BODY)
            except (urllib3.exceptions.HTTPError, OSError):
                raw = b""
            finally:
                resp.close()
                resp.release_conn()
            if status == 410:
                raise WatchExpired()
            raise error_from_body(status, raw, "", prefix="watch: ")
        return WatchStream(resp)


class WatchStream:
    """The events of one open watch: iterate ``(type, object)`` pairs (ADDED, MODIFIED, DELETED,
    BOOKMARK). An ERROR event raises ``WatchExpired`` (code 410) or ``K8sError``; so do a line
    that is not JSON, a line over ``max_event_bytes`` and a broken stream, except after
    ``close()``, when iteration just ends."""

    def __init__(self, resp: Any, max_event_bytes: int = MAX_EVENT_BYTES):
        self.resp = resp
        self.max_event_bytes = max_event_bytes
        self.closed = False

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        import urllib3
        try:
            for line in self._lines():
                event = _event(line)
                if event is not None:
                    yield event
        except (urllib3.exceptions.HTTPError, OSError) as e:
            if not self.closed:
                raise K8sError(f"watch: stream broken: {type(e).__name__}: {e}") from None
        finally:
            self._release()

    def _lines(self) -> Iterator[bytes]:
        """Complete lines (a last one without its newline is a cut stream: dropped, as the
        client's ``iter_resp_lines`` does); at most ``max_event_bytes`` + one read buffered."""
        buf = bytearray()
        for piece in self.resp.stream(READ_BYTES, decode_content=False):
            if self.closed:
                return
            pos, scan = 0, len(buf)  # what was kept has no newline
            buf += piece
            end = buf.find(b"\n", scan)
            while end >= 0:
                yield bytes(buf[pos:end])
                pos = end + 1
                end = buf.find(b"\n", pos)
            if pos:
                del buf[:pos]  # once per read, not once per line
            if len(buf) > self.max_event_bytes:
                raise K8sError(f"watch: an event longer than {self.max_event_bytes} bytes")

    def close(self) -> None:
        """End the stream now, from any thread (a blocked read returns)."""
        self.closed = True
        resp = self.resp
        for attempt in (lambda: resp.shutdown(), lambda: resp.connection.sock.shutdown(2)):
            try:
                attempt()
                return
            except Exception:  # noqa: BLE001 - best effort: the stream ends at its timeout anyway
                continue

    def _release(self) -> None:
        try:
            self.resp.close()  # a stream left half read must not go back to the pool as it is
            self.resp.release_conn()
        except Exception:  # noqa: BLE001 - the connection is being dropped anyway
            pass


def _event(line: bytes) -> Optional[tuple[str, dict]]:
    """(type, object) of one watch line; None for a blank line or an event without an object."""
    if not line.strip():
        return None
    try:
        event = decode_json(line)
    except ValueError:
        raise K8sError(f"watch: a line that is not JSON: {line[:80]!r}") from None
    etype = event.get("type") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(obj, dict) or not isinstance(etype, str):
        return None
    if etype == "ERROR":
        code = obj.get("code")
        if code == 410:
            raise WatchExpired()
        raise K8sError(f"watch: ERROR {code}: {str(obj.get('message', ''))[:200]}",
                       status=code if isinstance(code, int) else None)
    return (etype, obj) if etype in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK") else None
