"""The data plane's transport: one pooled httpx client per Kubicle client.

Today the node's data plane is plain http. TLS plugs in here: pass
``verify=`` (a CA bundle path, an ``ssl.SSLContext``, or False) and
``data_plane_scheme="https"``; nothing else in the SDK builds URLs or
connections."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

import httpx

from . import _wire, errors

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
