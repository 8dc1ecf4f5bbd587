"""Workspaces (docs/sdk.md, "Workspaces"): durable ext4 disks on a node that
outlive every sandbox using them. A sandbox or a per-call run attaches one
by name (mounted at /workspace in a Linux guest); while nobody holds it,
its files are read and written through the node's data plane without a VM
(``files(name)``), with the workspace's own token or the node's admin token.

In both modes, once for both clients (``client.Workspaces`` and
``aio.AsyncWorkspaces`` drive these operations). On a standalone node these
are its /v1/workspaces routes with the admin token. With Kubernetes they
are Workspace objects in the client's namespace (the operator places each
on a node and mints its token into a Secret; that node makes the disk),
and ``files(name)`` finds the data plane from the object as a Sandbox's is
found (``_kube.py``, ``_workspace_obj.py``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import _workspace_obj, errors
from ._dataplane import DataPlane
from ._node import NodeBackend
from ._sansio import Op
from ._workspace_obj import FilesTarget
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


class WorkspaceFiles:
    """What a Filesystem needs of its owner, for a workspace: the data
    plane. ``find`` (an operation) says where the workspace's files are; it
    runs on first use (with Kubernetes it reads the Workspace, its Secret
    and its node's Lease) and is kept."""

    def __init__(self, client: Any, name: str, find: Callable[[], Op[FilesTarget]]) -> None:
        self._client, self._name, self._find = client, name, find
        self._target: Optional[FilesTarget] = None

    def _plane(self) -> Op[DataPlane]:
        if self._target is None:
            self._target = yield from self._find()
        t = self._target
        return DataPlane(t.http, t.base, t.token, self._name,
                         self._client._transport.request_timeout)

    def _refine(self, e: errors.KubicleError) -> errors.KubicleError:
        """Workspace errors as WorkspaceInUseError / WorkspaceNotFoundError
        (path errors stay PathNotFoundError)."""
        return refine(e, self._name)


def check_kube_create(size_mib: int, token_sha256: Optional[str]) -> None:
    check_size_mib(size_mib)
    if token_sha256:
        raise ValueError("with Kubernetes the operator mints a Workspace's token (Secret "
                         "<name>-workspace-token): token_sha256 is for a standalone node")


def _known(target: FilesTarget) -> Op[FilesTarget]:
    return target
    yield


def _override(found: FilesTarget, token: Optional[str], endpoint: Optional[str]) -> FilesTarget:
    return dataclasses.replace(found, token=token or found.token,
                               endpoint=endpoint or found.endpoint)


class WorkspacesCore:
    """``client.workspaces``: its calls as operations. ``_Filesystem`` is
    the client's Filesystem class."""

    _Filesystem: Any

    def __init__(self, client: Any) -> None:
        self._client = client

    def _node(self) -> Optional[NodeBackend]:
        """The standalone node's backend; None with Kubernetes."""
        backend = self._client._backend
        return backend if isinstance(backend, NodeBackend) else None

    def _call(self, method: str, path: str, name: Optional[str], **kw: Any) -> Op[Any]:
        node = self._node()
        assert node is not None
        try:
            return (yield from node.call(method, path, op="workspace", **kw))
        except errors.KubicleError as e:
            r = refine(e, name or "")
            if r is e:
                raise
            raise r from e

    def _create(self, name: str, size_mib: int, labels: Optional[Mapping[str, str]],
                token_sha256: Optional[str], timeout: float) -> Op[WorkspaceInfo]:
        if self._node() is None:
            check_kube_create(size_mib, token_sha256)
            obj = yield from self._client._backend.create_workspace(name, size_mib, labels,
                                                                    timeout)
            return _workspace_obj.info(obj)
        j = yield from self._call("PUT", f"/v1/workspaces/{name}", name,
                                  json=put_body(size_mib, labels, token_sha256), timeout=timeout)
        return workspace_info(j)

    def _get(self, name: str) -> Op[WorkspaceInfo]:
        if self._node() is None:
            return _workspace_obj.info((yield from self._client._backend.get_workspace(name)))
        return workspace_info((yield from self._call("GET", f"/v1/workspaces/{name}", name)))

    def _list(self) -> Op[List[WorkspaceInfo]]:
        if self._node() is None:
            objs = yield from self._client._backend.list_workspaces()
            return [_workspace_obj.info(o) for o in objs]
        j = yield from self._call("GET", "/v1/workspaces", None)
        return [workspace_info(w) for w in j.get("items", [])]

    def _delete(self, name: str, wait: bool, timeout: float) -> Op[None]:
        if self._node() is None:
            yield from self._client._backend.delete_workspace(name, wait=wait, timeout=timeout)
            return
        yield from self._call("DELETE", f"/v1/workspaces/{name}", name, timeout=timeout)

    def _files(self, name: str, token: Optional[str], endpoint: Optional[str]) -> Any:
        return self._Filesystem(WorkspaceFiles(self._client, name,
                                               self._finder(name, token, endpoint)))

    def _finder(self, name: str, token: Optional[str],
                endpoint: Optional[str]) -> Callable[[], Op[FilesTarget]]:
        node = self._node()
        if node is not None or (token and endpoint):  # nothing to look up
            target = FilesTarget(scheme=self._client._transport.scheme,
                                 endpoint=endpoint or node.url,  # type: ignore[union-attr]
                                 disk=name, token=token or node.token)  # type: ignore[union-attr]
            return lambda: _known(target)
        backend = self._client._backend

        def find() -> Op[FilesTarget]:
            found = yield from backend.workspace_files(name, with_token=token is None)
            return _override(found, token, endpoint)
        return find
