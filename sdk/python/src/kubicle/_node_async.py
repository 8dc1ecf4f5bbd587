"""The standalone-node backend of AsyncKubicle (see ``_node.py``)."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional

import httpx

from . import _http, errors
from ._node import check_selector, create_body, fork_body, keep_access, make_ref
from ._ref import Ref


class AsyncNodeBackend:
    def __init__(self, http: httpx.AsyncClient, node_url: str, token: str) -> None:
        self.namespace = ""
        self.url = node_url.rstrip("/")
        self._http, self._token = http, token

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def _call(self, method: str, path: str, *, op: str, sandbox: Optional[str] = None,
                    timeout: Optional[float] = None, **kw: Any) -> Any:
        try:
            resp = await self._http.request(method, self.url + path,
                                            headers=_http.auth(self._token),
                                            timeout=timeout if timeout is not None else
                                            self._http.timeout, **kw)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op=op, sandbox=sandbox) from e
        _http.raise_for(resp, resp.content, op=op, sandbox=sandbox)
        return resp.json()

    async def create(self, *, template: str, name: Optional[str], labels: Mapping[str, str],
                     ttl_seconds: Optional[int], env: Optional[Mapping[str, str]],
                     resources: Optional[Mapping[str, Any]], timeout: float,
                     wait_pending: bool, workspace: Optional[str] = None) -> Ref:
        body = create_body(template=template, name=name, labels=labels,
                           ttl_seconds=ttl_seconds, resources=resources, workspace=workspace)
        j = await self._call("POST", "/v1/sandboxes", op="create", json=body, timeout=timeout)
        return make_ref(self.url, j, env)

    async def get(self, name: str) -> Ref:
        return make_ref(self.url, await self._call("GET", f"/v1/sandboxes/{name}", op="get",
                                                   sandbox=name), None)

    async def list(self, selector: str) -> List[Ref]:
        params = {"labelSelector": selector} if selector else {}
        j = await self._call("GET", "/v1/sandboxes", op="list", params=params)
        return [make_ref(self.url, s, None) for s in j.get("items", [])]

    async def run_target(self, template: str, workspace: Optional[str] = None) -> Any:
        """A standalone node: ``template`` is the node's template name; the
        admin token may run every template."""
        from ._run import RunTarget

        return RunTarget(base=self.url, node_template=template, token=self._token)

    async def resolve(self, ref: Ref) -> None:
        if not ref.token:
            ref.token = self._token
        if not ref.base:
            ref.base = f"{self.url}/v1/sandboxes/{ref.info.id}"

    async def set_suspend(self, ref: Ref, suspend: bool, *, timeout: float) -> Ref:
        verb = "suspend" if suspend else "resume"
        j = await self._call("POST", f"/v1/sandboxes/{ref.info.id}/{verb}", op=verb,
                             sandbox=ref.info.name, timeout=timeout)
        return keep_access(make_ref(self.url, j, ref.env), ref)

    async def delete(self, name: str, *, wait: bool, timeout: float) -> None:
        try:
            await self._call("DELETE", f"/v1/sandboxes/{name}", op="delete", sandbox=name,
                             timeout=timeout)
        except errors.SandboxNotFoundError:
            pass

    async def sweep(self, selector: str, *, timeout: float) -> List[str]:
        j = await self._call("DELETE", "/v1/sandboxes", op="sweep", timeout=timeout,
                             params={"labelSelector": check_selector(selector)})
        return sorted(j.get("deleted", []))

    async def fork(self, ref: Ref, *, count: int, labels: Mapping[str, str],
                   ttl_seconds: Optional[int], timeout: float) -> List[Ref]:
        j = await self._call("POST", f"/v1/sandboxes/{ref.info.id}/fork", op="fork",
                             sandbox=ref.info.name, timeout=timeout,
                             json=fork_body(count=count, labels=labels, ttl_seconds=ttl_seconds))
        return [make_ref(self.url, c, ref.env) for c in j.get("items", [])]
