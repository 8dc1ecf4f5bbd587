"""The data plane's transport: pooled httpx clients.

A cluster node serves its data plane over TLS with a CA of its own, which
it publishes on its heartbeat Lease (annotation ``kubicle.dev/serving-ca``,
docs/operator.md). The Kubernetes backends read it and reach that node
through a pooled client verifying against exactly that CA (``TlsPool``:
one client per distinct CA); a node whose Lease publishes none is plain
http, as the protocol says. Verification is never turned off by the SDK.
The client's own ``verify=`` (a CA bundle path or an ``ssl.SSLContext``)
and ``data_plane_scheme=`` serve a standalone node and override the Lease
when given."""

from __future__ import annotations

import dataclasses
import ssl
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

import httpx

from . import _wire, errors
from ._sansio import Op, call

Verify = Union[bool, str, ssl.SSLContext]


@dataclass(frozen=True)
class TransportConfig:
    scheme: str = "http"
    verify: Verify = True
    request_timeout: float = 30.0   # every call but exec and waits
    max_connections: int = 1024     # fan-outs of hundreds share one pool

    def httpx_kwargs(self) -> Dict[str, Any]:
        verify: Any = self.verify
        if isinstance(verify, str):
            verify = ssl.create_default_context(cafile=verify)
        return {
            "verify": verify,
            "timeout": httpx.Timeout(self.request_timeout),
            "limits": httpx.Limits(max_connections=self.max_connections,
                                   max_keepalive_connections=min(self.max_connections, 256)),
            "trust_env": False,  # the data plane is never reached through a proxy
        }


def sync_client(cfg: TransportConfig) -> httpx.Client:
    return httpx.Client(**cfg.httpx_kwargs())


def async_client(cfg: TransportConfig) -> httpx.AsyncClient:
    return httpx.AsyncClient(**cfg.httpx_kwargs())


def ssl_context(verify: Verify) -> ssl.SSLContext:
    """The context raw sockets (port streams) use for a `verify=` setting."""
    if isinstance(verify, ssl.SSLContext):
        return verify
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    ctx = ssl.create_default_context()
    if verify is False:   # the caller's explicit choice, as httpx takes it
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def tls_context(ca_pem: str) -> ssl.SSLContext:
    """Verifies the chain against `ca_pem` only, and the host name or
    address in the URL against the certificate."""
    ctx = ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH, cadata=ca_pem)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class TlsPool:
    """One pooled client per node CA, made on first use, closed with the
    pool. `make` builds a client from a TransportConfig (sync or async)."""

    def __init__(self, cfg: TransportConfig, make: Any) -> None:
        self._cfg, self._make = cfg, make
        self._lock = threading.Lock()
        self._by_ca: Dict[str, Any] = {}

    def client(self, ca_pem: str) -> Any:
        with self._lock:
            c = self._by_ca.get(ca_pem)
            if c is None:
                cfg = dataclasses.replace(self._cfg, scheme="https", verify=tls_context(ca_pem))
                c = self._by_ca[ca_pem] = self._make(cfg)
            return c

    def take_all(self) -> List[Any]:
        with self._lock:
            out, self._by_ca = list(self._by_ca.values()), {}
            return out


@dataclass(frozen=True)
class NodeTransport:
    """How to reach one cluster node's data plane: its scheme, the pooled
    client verifying it (None: the client's default) and the SSL context
    raw sockets (port streams) use (None: from the client's ``verify=``)."""

    scheme: str
    http: Any = None
    ssl: Optional[ssl.SSLContext] = None


def node_transport(ca_pem: Optional[str], cfg: TransportConfig, pool: TlsPool) -> NodeTransport:
    """A node publishing a CA on its Lease is https verified against exactly
    that CA, unless the client's own ``verify=`` was given (it wins); a node
    publishing none is the client's scheme (plain http by the protocol)."""
    if ca_pem is None:
        return NodeTransport(cfg.scheme)
    if cfg.verify is not True:
        return NodeTransport("https")
    return NodeTransport("https", pool.client(ca_pem), tls_context(ca_pem))


def auth(token: str) -> Dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def raise_for(resp: httpx.Response, body: bytes, *, op: str, sandbox: Optional[str]) -> None:
    if resp.status_code < 400:
        return
    code, message = _wire.parse_error(body)
    raise _wire.error_for(resp.status_code, code, message, op=op, sandbox=sandbox)


def transport_error(e: Exception, *, op: str, sandbox: Optional[str]) -> errors.KubicleError:
    if isinstance(e, httpx.TimeoutException):
        if op == "exec":
            return errors.ExecTimeoutError(f"the node did not answer in time: {e}", sandbox=sandbox)
        return errors.SandboxTimeoutError(f"the node did not answer in time: {e}",
                                          reason="Timeout", sandbox=sandbox)
    return errors.ApiError(f"cannot reach the node: {e}", reason="Unreachable", sandbox=sandbox)


def send(http: Any, method: str, url: str, *, op: str, sandbox: Optional[str],
         **kw: Any) -> Op[httpx.Response]:
    """One request (``http`` None: the client's own pool) and its answer,
    an error answer or a failed connection raised as the SDK's error."""
    try:
        resp = yield call("request", http, method, url, **kw)
    except httpx.TransportError as e:
        raise transport_error(e, op=op, sandbox=sandbox) from e
    raise_for(resp, resp.content, op=op, sandbox=sandbox)
    return resp


def check_token(ref: Any) -> Op[None]:
    """Raises AuthError unless the node's VM takes the token (GET of the
    sandbox: one round trip). Guards create() against a VM holding the hash
    of a token other than its Secret's (docs/sdk.md, "k.sandboxes")."""
    yield from send(ref.http, "GET", ref.base, headers=auth(ref.token), op="get",
                    sandbox=ref.info.name)
