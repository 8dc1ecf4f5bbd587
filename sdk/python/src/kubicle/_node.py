"""The standalone backend: one kubicle-node's own API (docs/node.md, "HTTP
API") with its admin token, no Kubernetes. A create returns once the VM's
agent answers, so there is nothing to watch."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import httpx

from . import _http, _wire, errors
from ._ref import Ref


def create_body(*, template: str, name: Optional[str], labels: Mapping[str, str],
                ttl_seconds: Optional[int], resources: Optional[Mapping[str, Any]],
                workspace: Optional[str] = None) -> Dict[str, Any]:
    if not template:
        raise ValueError("template is required")
    if resources:
        raise errors.UnsupportedError(
            "a standalone node's create takes no resources: the template's vCPUs and memory "
            "apply (use Kubernetes mode, or a node template of that shape)",
            reason="Unimplemented")
    body: Dict[str, Any] = {"template": template}
    if name:
        body["id"] = name
    if labels:
        body["labels"] = dict(labels)
    if ttl_seconds is not None:
        body["ttlSeconds"] = int(ttl_seconds)
    if workspace:
        body["workspace"] = workspace
    return body


def fork_body(*, count: int, labels: Mapping[str, str], ttl_seconds: Optional[int]) -> Dict[str, Any]:
    if not 1 <= count <= 64:
        raise ValueError("count must be in [1, 64] on a standalone node")
    body: Dict[str, Any] = {"count": count}
    if labels:
        body["labels"] = dict(labels)
    if ttl_seconds is not None:
        body["ttlSeconds"] = int(ttl_seconds)
    return body


def make_ref(node_url: str, j: Dict[str, Any], env: Optional[Mapping[str, str]]) -> Ref:
    info = _wire.node_sandbox_info(j)
    return Ref(info=info, raw=j, base=f"{node_url}/v1/sandboxes/{info.id}",
               token=j.get("token"), env=dict(env or {}))


def keep_access(fresh: Ref, old: Ref) -> Ref:
    """``fresh`` with what ``old`` knew of reaching the sandbox (a node's
    answer other than a create's carries no token)."""
    fresh.token = old.token or fresh.token
    fresh.base = old.base or fresh.base
    fresh.http, fresh.ssl = old.http, old.ssl
    return fresh


def check_selector(selector: str) -> str:
    if not selector.strip():
        raise ValueError("a sweep needs metadata (e.g. {'run': run_id}): nothing deletes "
                         "every sandbox by accident")
    return selector


class NodeBackend:
    def __init__(self, http: httpx.Client, node_url: str, token: str) -> None:
        self.namespace = ""
        self.url = node_url.rstrip("/")
        self._http, self._token = http, token

    def close(self) -> None:
        pass

    def _call(self, method: str, path: str, *, op: str, sandbox: Optional[str] = None,
              timeout: Optional[float] = None, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, self.url + path, headers=_http.auth(self._token),
                                      timeout=timeout if timeout is not None else
                                      self._http.timeout, **kw)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op=op, sandbox=sandbox) from e
        _http.raise_for(resp, resp.content, op=op, sandbox=sandbox)
        return resp.json()

    def create(self, *, template: str, name: Optional[str], labels: Mapping[str, str],
               ttl_seconds: Optional[int], env: Optional[Mapping[str, str]],
               resources: Optional[Mapping[str, Any]], timeout: float,
               wait_pending: bool, workspace: Optional[str] = None) -> Ref:
        body = create_body(template=template, name=name, labels=labels,
                           ttl_seconds=ttl_seconds, resources=resources, workspace=workspace)
        j = self._call("POST", "/v1/sandboxes", op="create", json=body, timeout=timeout)
        return make_ref(self.url, j, env)

    def get(self, name: str) -> Ref:
        return make_ref(self.url, self._call("GET", f"/v1/sandboxes/{name}", op="get",
                                             sandbox=name), None)

    def list(self, selector: str) -> List[Ref]:
        params = {"labelSelector": selector} if selector else {}
        j = self._call("GET", "/v1/sandboxes", op="list", params=params)
        return [make_ref(self.url, s, None) for s in j.get("items", [])]

    def run_target(self, template: str, workspace: Optional[str] = None) -> Any:
        """A standalone node: ``template`` is the node's template name; the
        admin token may run every template."""
        from ._run import RunTarget

        return RunTarget(base=self.url, node_template=template, token=self._token)

    def resolve(self, ref: Ref) -> None:
        if not ref.token:
            ref.token = self._token  # the admin token may use every sandbox
        if not ref.base:
            ref.base = f"{self.url}/v1/sandboxes/{ref.info.id}"

    def set_suspend(self, ref: Ref, suspend: bool, *, timeout: float) -> Ref:
        """POST .../suspend or .../resume: the node answers once it is done."""
        verb = "suspend" if suspend else "resume"
        j = self._call("POST", f"/v1/sandboxes/{ref.info.id}/{verb}", op=verb,
                       sandbox=ref.info.name, timeout=timeout)
        return keep_access(make_ref(self.url, j, ref.env), ref)

    def delete(self, name: str, *, wait: bool, timeout: float) -> None:
        try:
            self._call("DELETE", f"/v1/sandboxes/{name}", op="delete", sandbox=name,
                       timeout=timeout)
        except errors.SandboxNotFoundError:
            pass

    def sweep(self, selector: str, *, timeout: float) -> List[str]:
        j = self._call("DELETE", "/v1/sandboxes", op="sweep", timeout=timeout,
                       params={"labelSelector": check_selector(selector)})
        return sorted(j.get("deleted", []))

    def fork(self, ref: Ref, *, count: int, labels: Mapping[str, str],
             ttl_seconds: Optional[int], timeout: float) -> List[Ref]:
        j = self._call("POST", f"/v1/sandboxes/{ref.info.id}/fork", op="fork",
                       sandbox=ref.info.name, timeout=timeout,
                       json=fork_body(count=count, labels=labels, ttl_seconds=ttl_seconds))
        return [make_ref(self.url, c, ref.env) for c in j.get("items", [])]
