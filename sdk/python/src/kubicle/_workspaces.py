"""Workspaces (docs/sdk.md, "Workspaces"): durable ext4 disks on a node that
outlive every sandbox using them. A sandbox or a per-call run attaches one
by name (mounted at /workspace in a Linux guest); while nobody holds it,
its files are read and written through the node's data plane without a VM
(``files(name)``), with the workspace's own token or the node's admin token.

Sync and async, in both modes. On a standalone node these are its
/v1/workspaces routes with the admin token. With Kubernetes they are
Workspace objects in the client's namespace (the operator places each on a
node and mints its token into a Secret; that node makes the disk), and
``files(name)`` finds the data plane from the object as a Sandbox's is
found (``_kube.py``, ``_workspace_obj.py``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import _workspace_obj, errors
from ._dataplane import AsyncDataPlane, DataPlane
from ._workspace_obj import FilesTarget
from ._api import DEFAULT_CREATE_TIMEOUT, DEFAULT_DELETE_TIMEOUT
from .models import WorkspaceInfo


def workspace_info(j: Mapping[str, Any]) -> WorkspaceInfo:
    """A standalone node's answer as WorkspaceInfo (its name is the node's)."""
    name = str(j.get("name", ""))
    return WorkspaceInfo(name=name, size_mib=int(j.get("sizeMiB", 0)),
                         filesystem=str(j.get("filesystem", "ext4")),
                         labels=dict(j.get("labels") or {}), state=str(j.get("state", "")),
                         message=str(j.get("message", "")), attached_to=j.get("attachedTo"),
                         bytes_used=int(j.get("bytesUsed", 0)),
                         created_at=str(j.get("createdAt", "")), token=j.get("token"), id=name)


def check_size_mib(size_mib: int) -> None:
    if not isinstance(size_mib, int) or isinstance(size_mib, bool) or size_mib < 8:
        raise ValueError("size_mib must be an int of at least 8")


def put_body(size_mib: int, labels: Optional[Mapping[str, str]],
             token_sha256: Optional[str]) -> Dict[str, Any]:
    check_size_mib(size_mib)
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
    """What Filesystem needs of its owner: a data plane. ``find`` says where
    the workspace's files are; it runs on first use (with Kubernetes it
    reads the Workspace, its Secret and its node's Lease) and is kept."""

    def __init__(self, client: Any, name: str, find: Callable[[], Any]) -> None:
        self._client, self._name, self._find = client, name, find
        self._target: Optional[FilesTarget] = None

    def _dp(self) -> Any:
        if self._target is None:
            self._target = self._find()
        return self._plane(DataPlane, self._target)

    def _plane(self, kind: Any, t: FilesTarget) -> "_Refining":
        return _Refining(kind(t.http or self._client._http, t.base, t.token, self._name), self._name)


class _AsyncHandle(_Handle):
    """_Handle for AsyncFilesystem, which awaits its owner's _dp()."""

    async def _dp(self) -> Any:
        if self._target is None:
            self._target = await self._find()
        return self._plane(AsyncDataPlane, self._target)


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
    """The standalone node's backend; None with Kubernetes."""
    backend = client._backend
    return backend if hasattr(backend, "url") and hasattr(backend, "_token") else None


def check_kube_create(size_mib: int, token_sha256: Optional[str]) -> None:
    check_size_mib(size_mib)
    if token_sha256:
        raise ValueError("with Kubernetes the operator mints a Workspace's token (Secret "
                         "<name>-workspace-token): token_sha256 is for a standalone node")


def _fixed(target: FilesTarget) -> Callable[[], FilesTarget]:
    return lambda: target


class Workspaces:
    """``client.workspaces``: create, get, list, delete and ``files(name)``,
    on a standalone node or, with Kubernetes, as Workspace objects in the
    client's namespace."""

    def __init__(self, client: Any, filesystem: Any) -> None:
        # The client's Filesystem class: this module sits below the
        # clients and imports neither.
        self._client, self._filesystem = client, filesystem

    def _call(self, method: str, path: str, name: Optional[str], **kw: Any) -> Any:
        try:
            return _node_of(self._client)._call(method, path, op="workspace", **kw)
        except errors.KubicleError as e:
            r = refine(e, name or "")
            if r is e:
                raise
            raise r from e

    def create(self, name: str, size_mib: int, *, labels: Optional[Mapping[str, str]] = None,
               token_sha256: Optional[str] = None,
               timeout: float = DEFAULT_CREATE_TIMEOUT) -> WorkspaceInfo:
        """Makes the workspace (an empty ext4 of ``size_mib``) and returns it
        once its disk is there, or returns the existing one of that size
        (ConflictError for another size). On a standalone node the token is
        in the answer only when the node minted it. With Kubernetes this
        creates a Workspace object and waits until it is Ready:
        WorkspaceFailedError if it cannot be, KubicleTimeoutError after
        ``timeout`` s (a Workspace this call made is then deleted again);
        its token is in Secret ``<name>-workspace-token``, so
        ``token_sha256`` is a ValueError there."""
        if _node_of(self._client) is None:
            check_kube_create(size_mib, token_sha256)
            return _workspace_obj.info(
                self._client._backend.create_workspace(name, size_mib, labels, timeout))
        return workspace_info(self._call("PUT", f"/v1/workspaces/{name}", name,
                                         json=put_body(size_mib, labels, token_sha256),
                                         timeout=timeout))

    def get(self, name: str) -> WorkspaceInfo:
        """WorkspaceNotFoundError when there is none of that name."""
        if _node_of(self._client) is None:
            return _workspace_obj.info(self._client._backend.get_workspace(name))
        return workspace_info(self._call("GET", f"/v1/workspaces/{name}", name))

    def list(self) -> List[WorkspaceInfo]:
        """Every workspace of the node (with Kubernetes: of the namespace), by name."""
        if _node_of(self._client) is None:
            return [_workspace_obj.info(o) for o in self._client._backend.list_workspaces()]
        return [workspace_info(w) for w in self._call("GET", "/v1/workspaces", None).get("items", [])]

    def delete(self, name: str, *, wait: bool = True,
               timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        """Removes it and its disk: WorkspaceInUseError while a sandbox holds
        it, WorkspaceNotFoundError when there is none. With Kubernetes this
        deletes the Workspace object; with ``wait`` it returns once the
        node has removed the disk (a per-call run holding it only delays
        that), KubicleTimeoutError after ``timeout`` s."""
        if _node_of(self._client) is None:
            self._client._backend.delete_workspace(name, wait=wait, timeout=timeout)
            return
        self._call("DELETE", f"/v1/workspaces/{name}", name, timeout=timeout)

    def files(self, name: str, *, token: Optional[str] = None,
              endpoint: Optional[str] = None) -> Any:
        """The workspace's files without a VM, as ``sandbox.filesystem``:
        write, read, read_to, exists, stat, list, remove. While a sandbox or
        run holds it, every call raises WorkspaceInUseError. With
        Kubernetes, the first call finds the Workspace's node and data plane
        (``status.disk``), the node's name of the disk, the token (its
        Secret) and the node's CA (its Lease), as for a Sandbox; a Workspace
        without a disk yet is ConflictError (WorkspaceNotReady). ``token``
        and ``endpoint`` override what is found (default on a standalone
        node: its admin token and URL); with both given no apiserver call
        is made and ``name`` is the node's name of the disk."""
        return self._filesystem(_Handle(self._client, name, self._finder(name, token, endpoint)))  # type: ignore[arg-type]

    def _finder(self, name: str, token: Optional[str], endpoint: Optional[str]) -> Callable[[], Any]:
        node = _node_of(self._client)
        if node is not None or (token and endpoint):  # nothing to look up
            return _fixed(FilesTarget(scheme=self._client._transport.scheme,
                                      endpoint=endpoint or node.url, disk=name,
                                      token=token or node._token))
        backend = self._client._backend

        def find() -> FilesTarget:
            found: FilesTarget = backend.workspace_files(name, with_token=token is None)
            return _override(found, token, endpoint)
        return find


def _override(found: FilesTarget, token: Optional[str], endpoint: Optional[str]) -> FilesTarget:
    return dataclasses.replace(found, token=token or found.token,
                               endpoint=endpoint or found.endpoint)


class AsyncWorkspaces(Workspaces):
    """``AsyncKubicle.workspaces``: as Workspaces, awaited."""

    async def _call(self, method: str, path: str, name: Optional[str], **kw: Any) -> Any:  # type: ignore[override]
        try:
            return await _node_of(self._client)._call(method, path, op="workspace", **kw)
        except errors.KubicleError as e:
            r = refine(e, name or "")
            if r is e:
                raise
            raise r from e

    async def create(self, name: str, size_mib: int, *,  # type: ignore[override]
                     labels: Optional[Mapping[str, str]] = None,
                     token_sha256: Optional[str] = None,
                     timeout: float = DEFAULT_CREATE_TIMEOUT) -> WorkspaceInfo:
        if _node_of(self._client) is None:
            check_kube_create(size_mib, token_sha256)
            return _workspace_obj.info(
                await self._client._backend.create_workspace(name, size_mib, labels, timeout))
        return workspace_info(await self._call("PUT", f"/v1/workspaces/{name}", name,
                                               json=put_body(size_mib, labels, token_sha256),
                                               timeout=timeout))

    async def get(self, name: str) -> WorkspaceInfo:  # type: ignore[override]
        if _node_of(self._client) is None:
            return _workspace_obj.info(await self._client._backend.get_workspace(name))
        return workspace_info(await self._call("GET", f"/v1/workspaces/{name}", name))

    async def list(self) -> List[WorkspaceInfo]:  # type: ignore[override]
        if _node_of(self._client) is None:
            return [_workspace_obj.info(o) for o in await self._client._backend.list_workspaces()]
        j = await self._call("GET", "/v1/workspaces", None)
        return [workspace_info(w) for w in j.get("items", [])]

    async def delete(self, name: str, *, wait: bool = True,  # type: ignore[override]
                     timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        if _node_of(self._client) is None:
            await self._client._backend.delete_workspace(name, wait=wait, timeout=timeout)
            return
        await self._call("DELETE", f"/v1/workspaces/{name}", name, timeout=timeout)

    def files(self, name: str, *, token: Optional[str] = None,
              endpoint: Optional[str] = None) -> Any:
        return self._filesystem(_AsyncHandle(self._client, name, self._afinder(name, token, endpoint)))  # type: ignore[arg-type]

    def _afinder(self, name: str, token: Optional[str], endpoint: Optional[str]) -> Callable[[], Any]:
        """Workspaces._finder, its lookups awaited."""
        if _node_of(self._client) is not None or (token and endpoint):
            fixed: FilesTarget = self._finder(name, token, endpoint)()

            async def known() -> FilesTarget:
                return fixed
            return known
        backend = self._client._backend

        async def find() -> FilesTarget:
            found: FilesTarget = await backend.workspace_files(name, with_token=token is None)
            return _override(found, token, endpoint)
        return find
