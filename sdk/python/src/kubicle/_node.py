"""The standalone backend, once for both clients: one kubicle-node's own API
(docs/node.md, "HTTP API") with its admin token, no Kubernetes. A create
returns once the VM's agent answers, so there is nothing to watch. Its
calls are operations of the core (``_sansio.py``)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from httpx import USE_CLIENT_DEFAULT

from . import _http, _run, _wire, errors
from ._ref import Ref
from ._sansio import Op


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
    def __init__(self, node_url: str, token: str) -> None:
        self.namespace = ""
        self.url = node_url.rstrip("/")
        self.token = token
        self.started = True

    def start(self) -> Op[None]:
        return
        yield  # nothing to connect: an operation that does nothing

    def close(self) -> Op[None]:
        return
        yield

    def call(self, method: str, path: str, *, op: str, sandbox: Optional[str] = None,
             timeout: Any = USE_CLIENT_DEFAULT, **kw: Any) -> Op[Any]:
        """The node's JSON answer to ``method path`` with the admin token."""
        resp = yield from _http.send(None, method, self.url + path, op=op, sandbox=sandbox,
                                     headers=_http.auth(self.token), timeout=timeout, **kw)
        return resp.json()

    def create(self, *, template: str, name: Optional[str], labels: Mapping[str, str],
               ttl_seconds: Optional[int], env: Optional[Mapping[str, str]],
               resources: Optional[Mapping[str, Any]], timeout: float,
               wait_pending: bool, workspace: Optional[str] = None,
               token_secret: bool = False) -> Op[Ref]:
        # token_secret is Kubernetes' (the node's answer carries the token).
        body = create_body(template=template, name=name, labels=labels,
                           ttl_seconds=ttl_seconds, resources=resources, workspace=workspace)
        j = yield from self.call("POST", "/v1/sandboxes", op="create", json=body, timeout=timeout)
        return make_ref(self.url, j, env)

    def get(self, name: str) -> Op[Ref]:
        j = yield from self.call("GET", f"/v1/sandboxes/{name}", op="get", sandbox=name)
        return make_ref(self.url, j, None)

    def list(self, selector: str) -> Op[List[Ref]]:
        params = {"labelSelector": selector} if selector else {}
        j = yield from self.call("GET", "/v1/sandboxes", op="list", params=params)
        return [make_ref(self.url, s, None) for s in j.get("items", [])]

    def run_target(self, template: str, workspace: Optional[str] = None) -> Op[_run.RunTarget]:
        """A standalone node: ``template`` is the node's template name; the
        admin token may run every template."""
        return _run.RunTarget(base=self.url, node_template=template, token=self.token)
        yield

    def resolve(self, ref: Ref) -> Op[None]:
        if not ref.token:
            ref.token = self.token  # the admin token may use every sandbox
        if not ref.base:
            ref.base = f"{self.url}/v1/sandboxes/{ref.info.id}"
        return
        yield

    def set_suspend(self, ref: Ref, suspend: bool, *, timeout: float) -> Op[Ref]:
        """POST .../suspend or .../resume: the node answers once it is done."""
        verb = "suspend" if suspend else "resume"
        j = yield from self.call("POST", f"/v1/sandboxes/{ref.info.id}/{verb}", op=verb,
                                 sandbox=ref.info.name, timeout=timeout)
        return keep_access(make_ref(self.url, j, ref.env), ref)

    def delete(self, name: str, *, wait: bool, timeout: float) -> Op[None]:
        try:
            yield from self.call("DELETE", f"/v1/sandboxes/{name}", op="delete", sandbox=name,
                                 timeout=timeout)
        except errors.SandboxNotFoundError:
            pass

    def sweep(self, selector: str, *, timeout: float) -> Op[List[str]]:
        j = yield from self.call("DELETE", "/v1/sandboxes", op="sweep", timeout=timeout,
                                 params={"labelSelector": check_selector(selector)})
        return sorted(j.get("deleted", []))

    def fork(self, ref: Ref, *, count: int, labels: Mapping[str, str],
             ttl_seconds: Optional[int], timeout: float) -> Op[List[Ref]]:
        j = yield from self.call("POST", f"/v1/sandboxes/{ref.info.id}/fork", op="fork",
                                 sandbox=ref.info.name, timeout=timeout,
                                 json=fork_body(count=count, labels=labels,
                                                ttl_seconds=ttl_seconds))
        return [make_ref(self.url, c, ref.env) for c in j.get("items", [])]
