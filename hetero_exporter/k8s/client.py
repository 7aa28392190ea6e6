"""Cluster access shared by every Kubernetes feature (health remedy, pod cache, node cache).

The API is small on purpose:

- ``connect(kubeconfig=None) -> Cluster``: credentials from ``--kubeconfig``, else the
  ``KUBECONFIG`` environment variable, else the in-cluster service account, else none. A
  ``Cluster`` without an ``api_client`` carries ``reason`` ("Kubernetes features off: ...")
  so callers log one clear line and the rest of the agent runs.
- ``call(fn, *args, **kwargs) -> dict``: run a request function with a request timeout and
  return the JSON body as plain dicts: ``k8s.api.Api``'s (what the agent uses: REST paths on
  the ``ApiClient``, without the generated API classes and their ~21 MiB of model classes), or
  any typed method of the ``kubernetes`` client (``CoreV1Api(cluster.api_client).read_node``).
  Working on JSON, not on the generated models, keeps us independent of the client's model
  layer (which changed between client majors) and lets a patch send back exactly what the
  server sent.
- ``K8sError``: every failure of ``call`` (HTTP status, timeout, refused connection), with
  ``status`` (None for transport failures), ``conflict`` and ``retryable``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from hetero_exporter import smallfile

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 10.0  # per request: connect + read
MAX_KUBECONFIG_BYTES = 4 << 20  # a kubeconfig with embedded certificates for many clusters is ~100 KiB
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@dataclass(frozen=True)
class Cluster:
    """Cluster access, or why there is none. ``source`` says where credentials came from."""

    api_client: Any = None  # kubernetes.client.ApiClient
    source: str = ""
    reason: str = ""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS

    @property
    def enabled(self) -> bool:
        return self.api_client is not None


class K8sError(Exception):
    """A failed API call. ``status`` is the HTTP status, None when no answer came back."""

    def __init__(self, message: str, status: Optional[int] = None, reason: str = "",
                 body: Optional[Mapping[str, Any]] = None):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body = dict(body or {})

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def retryable(self) -> bool:
        """Worth trying again later: no answer, a server error, throttling, or a conflict."""
        return self.status is None or self.status >= 500 or self.status in (409, 429)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else {}: an API answer is read as hostile."""
    return value if isinstance(value, dict) else {}


def dict_at(obj: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is a JSON object, else {}."""
    return as_dict(obj.get(key))


def list_at(obj: Mapping[str, Any], key: str) -> list[Any]:
    """``obj[key]`` when it is a JSON array, else []."""
    value = obj.get(key)
    return value if isinstance(value, list) else []


def off(reason: str) -> Cluster:
    return Cluster(reason=f"Kubernetes features off: {reason}")


def connect(kubeconfig: Optional[str] = None, *, env: Optional[Mapping[str, str]] = None,
            timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> Cluster:
    """Credentials from ``kubeconfig``, else ``$KUBECONFIG``, else in-cluster, else none."""
    env = os.environ if env is None else env
    path = kubeconfig or env.get("KUBECONFIG")
    if not path and not env.get("KUBERNETES_SERVICE_HOST"):
        # before the import: the client and its dependencies cost ~19 MiB of RSS, which a node
        # without cluster access should not pay (issue 18)
        return off("no --kubeconfig, no KUBECONFIG and not running in a pod")
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as e:
        return off(f"the kubernetes client is not installed ({e}); pip install 'hetero-exporter[k8s]'")
    cfg = client.Configuration()
    if path:
        source = f"kubeconfig {path}" if kubeconfig else f"KUBECONFIG={path}"
        try:
            # the client opens the file itself: refuse a FIFO (it would hang the start) or a huge file first
            smallfile.read_regular(path, MAX_KUBECONFIG_BYTES)
            config.load_kube_config(config_file=path, client_configuration=cfg)
        except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
            return off(f"cannot load {source}: {e}")
    else:
        source = "in-cluster service account"
        try:
            config.load_incluster_config(client_configuration=cfg)
        except (ConfigException, OSError) as e:
            return off(f"in-cluster credentials unusable: {e}")
    return Cluster(api_client=client.ApiClient(cfg), source=source, timeout_seconds=timeout_seconds)


@functools.lru_cache(maxsize=1)
def _json_decoder() -> Callable[[bytes], Any]:
    """msgspec's JSON decoder where it is installed (the extender extra; the image has it),
    else ``json.loads``. An accelerator Node is ~16 KB of JSON, most of it the devices
    annotation's escaped text, and the budget's whole listing is one such Node per accelerator
    node: msgspec decodes it about twice as fast (BENCHMARKS.md "Decoding the API server's
    answers"). Imported at the first answer, not with this module: a node without cluster
    access loads this module and never decodes."""
    try:
        import msgspec
    except ImportError:
        return json.loads
    return msgspec.json.Decoder().decode


def decode_json(data: bytes) -> Any:
    """An API answer (or a watch line) decoded; ValueError when it is not JSON: bad syntax,
    NaN or Infinity (not JSON's; json would take them), a number out of range, nesting deeper
    than the decoder recurses, invalid UTF-8."""
    try:
        return _json_decoder()(data)
    except (ValueError, RecursionError) as e:
        raise ValueError(str(e)) from None
    except Exception as e:  # noqa: BLE001 - msgspec's DecodeError and ValidationError (not ValueErrors)
        raise ValueError(f"{type(e).__name__}: {e}") from None


def error_from_body(status: int, raw: bytes | str | None, fallback: str, prefix: str = "") -> K8sError:
    """The K8sError of an error answer: its metav1.Status message and reason when it has one."""
    body: dict = {}
    try:
        parsed = json.loads(raw or b"{}")
        if isinstance(parsed, dict):
            body = parsed
    except (ValueError, TypeError):
        pass
    message = str(body.get("message") or fallback or f"HTTP {status}")
    return K8sError(f"{prefix}HTTP {status}: {message}", status=status, reason=str(body.get("reason") or ""), body=body)


def call(fn: Callable[..., Any], *args: Any, timeout: "float | tuple[float, float]" = DEFAULT_TIMEOUT_SECONDS,
         **kwargs: Any) -> dict:
    """Run an API method and return the decoded JSON body; raise ``K8sError`` on any failure."""
    try:
        from kubernetes.client.exceptions import ApiException
    except ImportError:  # pragma: no cover - connect() would have said so
        from kubernetes.client.rest import ApiException
    import urllib3
    try:
        resp = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException as e:
        raise error_from_body(int(e.status or 0), getattr(e, "body", None), str(e.reason or "")) from None
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise K8sError(f"no answer from the API server: {type(e).__name__}: {e}") from None
    try:
        data = resp.data if hasattr(resp, "data") else resp.read()
        status = int(getattr(resp, "status", 200))
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise K8sError(f"answer cut short: {type(e).__name__}: {e}") from None
    finally:
        release = getattr(resp, "release_conn", None)
        if release is not None:
            release()
    if not 200 <= status <= 299:
        raise error_from_body(status, data, "")
    try:
        out = decode_json(data or b"{}")
    except ValueError:
        raise K8sError(f"HTTP {status}: the API server answered with something that is not JSON",
                       status=status) from None
    return out if isinstance(out, dict) else {"items": out}
