"""Workspaces (docs/sdk.md, "Workspaces"): durable ext4 disks on a node that
outlive every sandbox using them. A sandbox or a per-call run attaches one
by name (mounted at /workspace in a Linux guest); while nobody holds it,
its files are read and written through the node's data plane without a VM
(``files(name)``), with the workspace's own token or the node's admin token.

Sync and async. Creating, listing and deleting workspaces goes to a
standalone node's API; with Kubernetes, those are Workspace objects (kubectl
or the operator) and ``files(name, token=..., endpoint=...)`` reaches the
workspace's node directly."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import httpx

from . import _http, errors
from ._dataplane import AsyncDataPlane, DataPlane
from .models import WorkspaceInfo


def workspace_info(j: Mapping[str, Any]) -> WorkspaceInfo:
    return WorkspaceInfo(name=str(j.get("name", "")), size_mib=int(j.get("sizeMiB", 0)),
                         filesystem=str(j.get("filesystem", "ext4")),
                         labels=dict(j.get("labels") or {}), state=str(j.get("state", "")),
                         message=str(j.get("message", "")), attached_to=j.get("attachedTo"),
                         bytes_used=int(j.get("bytesUsed", 0)),
                         created_at=str(j.get("createdAt", "")), token=j.get("token"))


def put_body(size_mib: int, labels: Optional[Mapping[str, str]],
             token_sha256: Optional[str]) -> Dict[str, Any]:
    if not isinstance(size_mib, int) or size_mib < 8:
        raise ValueError("size_mib must be an int of at least 8")
    body: Dict[str, Any] = {"sizeMiB": size_mib}
    if labels:
        body["labels"] = dict(labels)
    if token_sha256:
        body["tokenSha256"] = token_sha256
    return body


def refine(e: errors.KubicleError, name: str) -> errors.KubicleError:
    """A node's 404/409 about a workspace as the workspace's own error."""
    status = getattr(e, "status_code", None)
    msg = getattr(e, "message", str(e))
    if status == 404 and msg.startswith("no workspace"):
        return errors.WorkspaceNotFoundError(msg, reason="NotFound", status_code=404)
    if status == 409 and "attached to" in msg:
        return errors.WorkspaceInUseError(msg, reason="FailedPrecondition", status_code=409)
    return e


class _Handle:
    """What Filesystem needs of its owner: a data plane."""

    def __init__(self, http: Any, base: str, token: str, name: str, async_: bool) -> None:
        self._http, self._base, self._token, self._name, self._async = http, base, token, name, async_

    def _dp(self) -> Any:
        dp = _Refining(DataPlane(self._http, self._base, self._token, self._name), self._name)
        if not self._async:
            return dp

        async def ready() -> Any:  # AsyncFilesystem awaits its owner's _dp()
            return _Refining(AsyncDataPlane(self._http, self._base, self._token, self._name),
                             self._name)
        return ready()


class _Refining:
    """A data plane whose workspace errors are WorkspaceInUseError /
    WorkspaceNotFoundError (path errors stay PathNotFoundError)."""

    def __init__(self, dp: Any, name: str) -> None:
        self._dp, self._name = dp, name

    def __getattr__(self, attr: str) -> Any:
        fn = getattr(self._dp, attr)
        name = self._name

        if attr == "read_stream":
            return fn  # errors surface while iterating; they stay as they are

        def call(*a: Any, **kw: Any) -> Any:
            try:
                out = fn(*a, **kw)
            except errors.KubicleError as e:
                r = refine(e, name)
                if r is e:
                    raise
                raise r from e
            if hasattr(out, "__await__"):
                async def wait() -> Any:
                    try:
                        return await out
                    except errors.KubicleError as e:
                        r = refine(e, name)
                        if r is e:
                            raise
                        raise r from e
                return wait()
            return out
        return call


def _node_of(client: Any) -> Any:
    backend = client._backend
    if not hasattr(backend, "url") or not hasattr(backend, "_token"):
        raise errors.UnsupportedError(
            "with Kubernetes, workspaces are Workspace objects (kubectl apply); "
            "reach one's files with files(name, token=..., endpoint=...)", reason="Unimplemented")
    return backend


class Workspaces:
    """``client.workspaces``: create, get, list, delete (standalone node) and
    ``files(name)``."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def _call(self, method: str, path: str, name: Optional[str], **kw: Any) -> Any:
        node = _node_of(self._client)
        try:
            return node._call(method, path, op="workspace", **kw)
        except errors.KubicleError as e:
            r = refine(e, name or "")
            if r is e:
                raise
            raise r from e

    def create(self, name: str, size_mib: int, *, labels: Optional[Mapping[str, str]] = None,
               token_sha256: Optional[str] = None) -> WorkspaceInfo:
        """Makes the workspace (an empty ext4 of ``size_mib``), or returns the
        existing one of that size (ConflictError for another size). The
        token is in the answer only when the node minted it."""
        return workspace_info(self._call("PUT", f"/v1/workspaces/{name}", name,
                                         json=put_body(size_mib, labels, token_sha256),
                                         timeout=120.0))

    def get(self, name: str) -> WorkspaceInfo:
        return workspace_info(self._call("GET", f"/v1/workspaces/{name}", name))

    def list(self) -> List[WorkspaceInfo]:
        return [workspace_info(w) for w in self._call("GET", "/v1/workspaces", None).get("items", [])]

    def delete(self, name: str) -> None:
        """Removes it and its disk: WorkspaceInUseError while attached."""
        self._call("DELETE", f"/v1/workspaces/{name}", name)

    def files(self, name: str, *, token: Optional[str] = None,
              endpoint: Optional[str] = None) -> Any:
        """The workspace's files without a VM, as ``sandbox.filesystem``:
        write, read, read_to, exists, stat, list, remove. While a sandbox or
        run holds it, every call raises WorkspaceInUseError. ``token``: the
        workspace's (default: a standalone node's admin token);
        ``endpoint``: its node's data plane (default: the standalone node)."""
        from .client import Filesystem

        if endpoint is None or token is None:
            node = _node_of(self._client)
            endpoint = endpoint or node.url
            token = token or node._token
        if "://" not in endpoint:
            endpoint = f"{self._client._transport.scheme}://{endpoint}"
        base = f"{endpoint.rstrip('/')}/v1/workspaces/{name}"
        return Filesystem(_Handle(self._client._http, base, token, name, False))  # type: ignore[arg-type]


class AsyncWorkspaces(Workspaces):
    """``AsyncKubicle.workspaces``: as Workspaces, awaited."""

    async def _call(self, method: str, path: str, name: Optional[str], **kw: Any) -> Any:  # type: ignore[override]
        node = _node_of(self._client)
        try:
            return await node._call(method, path, op="workspace", **kw)
        except errors.KubicleError as e:
            r = refine(e, name or "")
            if r is e:
                raise
            raise r from e

    async def create(self, name: str, size_mib: int, *,  # type: ignore[override]
                     labels: Optional[Mapping[str, str]] = None,
                     token_sha256: Optional[str] = None) -> WorkspaceInfo:
        return workspace_info(await self._call("PUT", f"/v1/workspaces/{name}", name,
                                               json=put_body(size_mib, labels, token_sha256),
                                               timeout=120.0))

    async def get(self, name: str) -> WorkspaceInfo:  # type: ignore[override]
        return workspace_info(await self._call("GET", f"/v1/workspaces/{name}", name))

    async def list(self) -> List[WorkspaceInfo]:  # type: ignore[override]
        j = await self._call("GET", "/v1/workspaces", None)
        return [workspace_info(w) for w in j.get("items", [])]

    async def delete(self, name: str) -> None:  # type: ignore[override]
        await self._call("DELETE", f"/v1/workspaces/{name}", name)

    def files(self, name: str, *, token: Optional[str] = None,
              endpoint: Optional[str] = None) -> Any:
        from .aio import AsyncFilesystem

        if endpoint is None or token is None:
            node = _node_of(self._client)
            endpoint = endpoint or node.url
            token = token or node._token
        if "://" not in endpoint:
            endpoint = f"{self._client._transport.scheme}://{endpoint}"
        base = f"{endpoint.rstrip('/')}/v1/workspaces/{name}"
        return AsyncFilesystem(_Handle(self._client._http, base, token, name, True))  # type: ignore[arg-type]
