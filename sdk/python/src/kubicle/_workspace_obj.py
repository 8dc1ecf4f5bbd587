"""The Workspace custom resource (docs/api.md, "Workspace") as plain dicts:
the manifest ``client.workspaces.create`` applies, what its status means for
a caller (info, Ready, gone, in use, where its files are), and the errors
that say so. Pure functions shared by the sync and async Kubernetes
backends and by per-call runs with a workspace."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from . import errors
from ._kobj import GROUP, VERSION, _get, conditions, name_of
from ._labels import NODE
from .models import WorkspaceInfo

# Ready False reasons after which the Workspace will not become Ready by
# itself: the node could not make the disk, the node is gone (the disk never
# moves), a token Secret someone else owns or broke. The rest (Unscheduled,
# Provisioning, TokenSecretPendingDeletion) pass with time.
FAILED_REASONS = ("DiskFailed", "NodeLost", "TokenSecretConflict", "TokenSecretInvalid")


@dataclass(frozen=True)
class FilesTarget:
    """Where a Workspace's files are: its node's data plane, the node's name
    of the disk (``status.disk.id``), the token and the pooled client that
    verifies that node (None: the client's default)."""

    scheme: str
    endpoint: str
    disk: str
    token: str
    http: Any = None

    @property
    def base(self) -> str:
        endpoint = self.endpoint if "://" in self.endpoint else f"{self.scheme}://{self.endpoint}"
        return f"{endpoint.rstrip('/')}/v1/workspaces/{self.disk}"


def manifest(*, namespace: str, name: str, size_mib: int,
             labels: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    if not name:
        raise ValueError("a workspace needs a name")
    meta: Dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workspace", "metadata": meta,
            "spec": {"sizeMiB": size_mib}}


def size_of(obj: Mapping[str, Any]) -> int:
    return int(_get(obj, "spec", "sizeMiB") or 0)


def check_size(obj: Mapping[str, Any], size_mib: int) -> None:
    """An existing Workspace of another size is a conflict (the size is immutable)."""
    have = size_of(obj)
    if have != size_mib:
        raise errors.ConflictError(
            f"Workspace {name_of(obj)} exists with {have} MiB, not {size_mib} MiB",
            reason="AlreadyExists", status_code=409)


def state_of(obj: Mapping[str, Any]) -> str:
    if _get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"  # before the operator has written the phase
    return str(_get(obj, "status", "phase") or "Pending")


def info(obj: Mapping[str, Any]) -> WorkspaceInfo:
    """A Workspace object as WorkspaceInfo. ``attached_to`` is the Sandbox
    holding it (the operator's ``status.attachedTo``), else what the node
    says holds the disk (``run-<hex>`` for a per-call run); no token (it is
    in the Workspace's Secret)."""
    status = _get(obj, "status") or {}
    disk = status.get("disk") or {}
    ready = conditions(obj).get("Ready") or {}
    return WorkspaceInfo(
        name=name_of(obj), size_mib=size_of(obj), filesystem="ext4",
        labels=dict(_get(obj, "metadata", "labels") or {}), state=state_of(obj),
        message=str(ready.get("message") or disk.get("message") or ""),
        attached_to=status.get("attachedTo") or disk.get("attachedTo") or None,
        bytes_used=int(status.get("bytesUsed") or disk.get("bytesUsed") or 0),
        created_at=str(_get(obj, "metadata", "creationTimestamp") or ""),
        node=str(status.get("nodeName") or _get(obj, "metadata", "labels", NODE) or ""),
        id=str(disk.get("id") or ""))


def not_found(name: str) -> errors.WorkspaceNotFoundError:
    return errors.WorkspaceNotFoundError(f"no Workspace {name}", reason="WorkspaceNotFound",
                                         status_code=404)


def not_ready(name: str, lacks: str) -> errors.ConflictError:
    return errors.ConflictError(f"Workspace {name} has no {lacks} yet", reason="WorkspaceNotReady",
                                status_code=409)


def workspace_node(obj: Mapping[str, Any]) -> Tuple[str, str]:
    """The node a Workspace object lives on (status.nodeName), where a run
    with it must go, and that node's name for its disk (status.disk.id:
    object names repeat across namespaces, so the node's is w-<uid>)."""
    node = _get(obj, "status", "nodeName")
    disk = _get(obj, "status", "disk", "id")
    if not node or not disk:
        raise not_ready(name_of(obj), "disk on a node")
    return str(node), str(disk)


def endpoint_of(obj: Mapping[str, Any]) -> str:
    """The data-plane address (host:port) the node reports for the disk."""
    endpoint = _get(obj, "status", "disk", "endpoint")
    if not endpoint:
        raise not_ready(name_of(obj), "data-plane endpoint for its disk")
    return str(endpoint)


def token_secret_of(obj: Mapping[str, Any]) -> str:
    secret = _get(obj, "status", "tokenSecretName")
    if not secret:
        raise not_ready(name_of(obj), "token Secret")
    return str(secret)


def missing_secret(name: str, secret: str) -> errors.AuthError:
    return errors.AuthError(
        f"Workspace {name}'s token Secret {secret} does not exist (the operator makes it: see "
        "the Workspace's Ready condition)", reason="NoToken", status_code=404)


def holder_of(obj: Mapping[str, Any]) -> Optional[str]:
    """The Sandbox the operator says uses the workspace, if any. A per-call
    run's hold (only in status.disk.attachedTo) is not one: it ends with
    the run, and a deletion simply waits for it."""
    return _get(obj, "status", "attachedTo") or None


def attached(obj: Mapping[str, Any]) -> Optional[errors.WorkspaceInUseError]:
    """A Sandbox uses the workspace: deleting it now would wait for that
    Sandbox's deletion, so delete() refuses, as a standalone node does."""
    holder = holder_of(obj)
    if not holder:
        return None
    return errors.WorkspaceInUseError(
        f"Workspace {name_of(obj)} is attached to Sandbox {holder}: delete that Sandbox first",
        reason="InUse", status_code=409)


def deletion_blocked(obj: Mapping[str, Any]) -> Optional[errors.WorkspaceInUseError]:
    """Ready False InUse: the Workspace is being deleted, and the operator's
    finalizer holds it until the Sandboxes its message names are gone."""
    ready = conditions(obj).get("Ready") or {}
    if ready.get("status") != "False" or ready.get("reason") != "InUse":
        return None
    return errors.WorkspaceInUseError(
        f"Workspace {name_of(obj)}: {ready.get('message') or 'a Sandbox uses it'} (the deletion "
        "stays requested: the Workspace goes once no Sandbox uses it)", reason="InUse",
        status_code=409)


def failure(obj: Mapping[str, Any]) -> Optional[errors.WorkspaceFailedError]:
    """The error a Workspace's status states, if it will not become Ready."""
    name = name_of(obj)
    sched = conditions(obj).get("Scheduled") or {}
    if sched.get("status") == "False" and sched.get("reason") == "InvalidSpec":
        return errors.WorkspaceFailedError(f"Workspace {name}: {sched.get('message', '')}",
                                           reason="InvalidSpec")
    ready = conditions(obj).get("Ready") or {}
    if ready.get("status") == "False" and ready.get("reason") in FAILED_REASONS:
        return errors.WorkspaceFailedError(
            f"Workspace {name}: {ready.get('message') or ready['reason']}", reason=ready["reason"])
    return None


def timeout_error(name: str, what: str, timeout: float,
                  obj: Optional[Mapping[str, Any]]) -> errors.KubicleTimeoutError:
    detail = ""
    if obj is not None:
        ready = conditions(obj).get("Ready") or {}
        detail = (f" (phase {state_of(obj)}, Ready {ready.get('reason', '?')}: "
                  f"{ready.get('message', '')})")
    return errors.KubicleTimeoutError(f"Workspace {name}: {what} not done after {timeout:g} s"
                                      f"{detail}", reason="Timeout")


# --- what a watch waits for (fed the matching objects by name on every
# change; a value ends the wait, an exception fails it) ---------------------

Objs = Dict[str, Dict[str, Any]]


def is_ready(obj: Mapping[str, Any]) -> bool:
    return (conditions(obj).get("Ready") or {}).get("status") == "True"


class ReadyStep:
    """One Workspace Ready (its disk made on its node); failed, deleted or
    being deleted raises."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, objs: Objs) -> Optional[Dict[str, Any]]:
        obj = objs.get(self.name)
        if obj is None:
            raise errors.WorkspaceFailedError(
                f"Workspace {self.name} was deleted while waiting for it", reason="Deleted")
        if _get(obj, "metadata", "deletionTimestamp"):
            raise errors.WorkspaceFailedError(f"Workspace {self.name} is being deleted",
                                              reason="Terminating")
        if is_ready(obj):
            return obj
        err = failure(obj)
        if err is not None:
            raise err
        return None

    def timeout(self, timeout: float, objs: Objs) -> errors.KubicleError:
        return timeout_error(self.name, "Ready", timeout, objs.get(self.name))


class GoneStep:
    """One Workspace deleted (the finalizer let go once the node removed the
    disk); a Sandbox using it meanwhile raises WorkspaceInUseError."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, objs: Objs) -> Optional[bool]:
        obj = objs.get(self.name)
        if obj is None:
            return True
        err = deletion_blocked(obj)
        if err is not None:
            raise err
        return None

    def timeout(self, timeout: float, objs: Objs) -> errors.KubicleError:
        return timeout_error(self.name, "deletion", timeout, objs.get(self.name))
