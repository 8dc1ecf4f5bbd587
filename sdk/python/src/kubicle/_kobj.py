"""Kubicle's custom resources (docs/api.md) as plain dicts: manifests the SDK
creates and what a Sandbox's status means for a caller waiting on it. Pure
functions shared by the sync and async Kubernetes backends."""

from __future__ import annotations

import base64
import hashlib
import secrets
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import errors
from ._sansio import Call
from ._labels import AGENT, FORK_OF, NODE, RUN, TEMPLATE, to_metadata
from .models import SandboxInfo

GROUP = "kubicle.dev"
VERSION = "v1alpha1"
SANDBOXES = "sandboxes"
FORKS = "sandboxforks"
TEMPLATES = "sandboxtemplates"
WORKSPACES = "workspaces"

READY, PENDING, FAILED, GONE = "ready", "pending", "failed", "gone"


class StreamBroken(Exception):
    """A watch's connection broke (either client's own error, said once):
    the watch is made again from the last resourceVersion."""


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def name_of(obj: Mapping[str, Any]) -> str:
    return _get(obj, "metadata", "name") or ""


def resources_spec(resources: Optional[Mapping[str, Any]]) -> Optional[Dict[str, int]]:
    """``{"vcpus": 2, "memory_mib": 512}`` (``memoryMiB`` works too) as spec.resources."""
    if not resources:
        return None
    out: Dict[str, int] = {}
    for k, v in resources.items():
        key = {"vcpus": "vcpus", "memory_mib": "memoryMiB", "memoryMiB": "memoryMiB",
               "memory": "memoryMiB"}.get(k)
        if key is None:
            raise ValueError(f"unknown resource {k!r}: use vcpus and memory_mib")
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"resource {k!r} must be an integer")
        out[key] = v
    return out


def sandbox_manifest(*, namespace: str, template: str, name: Optional[str],
                     labels: Mapping[str, str], ttl_seconds: Optional[int],
                     env: Optional[Mapping[str, str]],
                     resources: Optional[Mapping[str, Any]],
                     workspace: Optional[str] = None,
                     token_sha256: Optional[str] = None) -> Dict[str, Any]:
    if not template:
        raise ValueError("template is required")
    meta: Dict[str, Any] = {"namespace": namespace, "labels": dict(labels)}
    if name:
        meta["name"] = name
    else:
        # The apiserver appends 5 characters; names stay DNS subdomains.
        meta["generateName"] = (template[:40].rstrip("-.") or "sbx") + "-"
    spec: Dict[str, Any] = {"templateRef": {"name": template}}
    if ttl_seconds is not None:
        spec["ttlSeconds"] = int(ttl_seconds)
    if env:
        spec["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    res = resources_spec(resources)
    if res:
        spec["resources"] = res
    if workspace:
        spec["workspaceRef"] = {"name": workspace}
    if token_sha256:
        spec["tokenSha256"] = token_sha256
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Sandbox", "metadata": meta, "spec": spec}


def new_token() -> str:
    """A Sandbox's data-plane token made by the client, as the operator
    mints one (32 random bytes in lowercase hex): the node takes any bearer
    token whose SHA-256 is the hash it was given."""
    return secrets.token_hex(32)


def token_sha256(token: str) -> str:
    """What spec.tokenSha256 carries: the hex SHA-256 of the token's bytes."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def holds_own_token(obj: Mapping[str, Any], sha256: str) -> bool:
    """The Sandbox took the client's token hash: it is in its spec (an
    apiserver whose CRD lacks the field prunes it) and the operator
    published it (an operator from before spec.tokenSha256 mints a Secret
    and publishes that token's hash instead)."""
    return (_get(obj, "spec", "tokenSha256") == sha256
            and _get(obj, "status", "tokenSha256") == sha256)


def own_token_error(obj: Mapping[str, Any]) -> errors.AuthError:
    """A Sandbox whose token only its creator holds, reached by another
    client (or after its creator forgot it)."""
    name = name_of(obj)
    return errors.AuthError(
        f"Sandbox {name} was created with its client's own token (spec.tokenSha256): no Secret "
        "holds it, so only the client that created it can reach its data plane (create with "
        "token_secret=True for a Sandbox others reach through its token Secret)",
        reason="OwnToken", sandbox=name)


def fork_manifest(source: Mapping[str, Any], *, count: int, labels: Mapping[str, str],
                  ttl_seconds: Optional[int],
                  child_token_sha256: Optional[List[str]] = None) -> Dict[str, Any]:
    if not 1 <= count <= 100:
        raise ValueError("count must be in [1, 100] (a SandboxFork's replicas)")
    src = name_of(source)
    src_labels = _get(source, "metadata", "labels") or {}
    # The fork carries the source's run and agent labels, so the sweep by
    # run finds it (its children get them from the operator).
    own = {k: src_labels[k] for k in (RUN, AGENT) if k in src_labels}
    if RUN in labels:
        own[RUN] = labels[RUN]
    suffix = secrets.token_hex(3)
    name = f"{src[:200].rstrip('-.')}-f{suffix}"
    spec: Dict[str, Any] = {"sourceRef": {"name": src}, "replicas": count}
    if labels:
        spec["childMetadata"] = {"labels": dict(labels)}
    if ttl_seconds is not None:
        spec["ttlSeconds"] = int(ttl_seconds)
    if child_token_sha256:
        spec["childTokenSha256"] = list(child_token_sha256)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SandboxFork",
            "metadata": {"name": name, "namespace": _get(source, "metadata", "namespace"),
                         "labels": own},
            "spec": spec}


def conditions(obj: Mapping[str, Any]) -> Dict[str, Mapping[str, Any]]:
    return {c.get("type", ""): c for c in (_get(obj, "status", "conditions") or [])
            if isinstance(c, Mapping)}


NODE_LEASE_NAMESPACE = "kubicle-node-lease"
SERVING_CA = "kubicle.dev/serving-ca"


def node_of(obj: Mapping[str, Any]) -> str:
    """The node a Sandbox is placed on (its label, the source of truth)."""
    return (_get(obj, "metadata", "labels", NODE) or _get(obj, "status", "nodeName") or "")


def lease_name(node: str) -> str:
    return f"kubicle-node-{node}"


def serving_ca(annotations: Optional[Mapping[str, str]]) -> Optional[str]:
    """The PEM CA a node's Lease publishes, or None (a plain-http node)."""
    pem = (annotations or {}).get(SERVING_CA) or ""
    return pem if "-----BEGIN CERTIFICATE-----" in pem else None


def lease_what(node: str, lease_ns: str) -> str:
    """What reading the node's Lease (its serving CA) is, in an error."""
    return (f"read Lease {lease_name(node)} in {lease_ns} (the node's serving CA; "
            f"the client needs get on leases there)")


def node_id(obj: Mapping[str, Any]) -> str:
    uid = _get(obj, "metadata", "uid") or ""
    return f"k-{uid}" if uid else ""


def sandbox_info(obj: Mapping[str, Any]) -> SandboxInfo:
    labels = dict(_get(obj, "metadata", "labels") or {})
    vm = _get(obj, "status", "vm") or {}
    return SandboxInfo(
        name=name_of(obj),
        id=node_id(obj),
        template=_get(obj, "spec", "templateRef", "name") or labels.get(TEMPLATE, ""),
        phase=("Terminating" if _get(obj, "metadata", "deletionTimestamp")
               else _get(obj, "status", "phase") or "Pending"),
        namespace=_get(obj, "metadata", "namespace") or "",
        uid=_get(obj, "metadata", "uid") or "",
        metadata=to_metadata(labels),
        labels=labels,
        node=_get(obj, "status", "nodeName") or labels.get(NODE, ""),
        endpoint=vm.get("endpoint", "") or "",
        message=vm.get("message", "") or "",
        fork_of=_get(obj, "spec", "forkSource") or "",
        created_at=_get(obj, "metadata", "creationTimestamp") or "",
        expires_at=_get(obj, "status", "expiresAt") or "",
        restore_ms=vm.get("restoreMillis"),
    )


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Ready with an endpoint and a token: its Secret's, or (no Secret) the
    client's own, whose hash the operator published."""
    ready = conditions(obj).get("Ready") or {}
    return (ready.get("status") == "True" and bool(_get(obj, "status", "vm", "endpoint"))
            and bool(_get(obj, "status", "tokenSecretName") or
                     _get(obj, "status", "tokenSha256")))


def wait_state(obj: Optional[Mapping[str, Any]], *,
               wait_pending: bool) -> Tuple[str, Optional[errors.KubicleError]]:
    """Where a Sandbox being waited for stands: READY; FAILED with the error
    to raise; PENDING with the error to raise if the wait times out now
    (None: plain timeout); GONE when the object is gone."""
    if obj is None:
        return GONE, errors.SandboxFailedError("the Sandbox was deleted while waiting for it",
                                               reason="Deleted")
    name = name_of(obj)
    if _get(obj, "metadata", "deletionTimestamp"):
        return FAILED, errors.SandboxFailedError("the Sandbox is being deleted",
                                                 reason="Terminating", sandbox=name)
    if is_ready(obj):
        return READY, None
    conds = conditions(obj)
    ready = conds.get("Ready") or {}
    vm = _get(obj, "status", "vm") or {}
    if ready.get("reason") == "VMFailed" or vm.get("state") == "Failed" or \
            _get(obj, "status", "phase") == "Failed":
        msg = vm.get("message") or ready.get("message") or "the VM failed"
        if msg.startswith("node is full"):
            # The node refused the VM for want of room (its own capacity,
            # which the operator's placement does not see).
            return FAILED, errors.CapacityError(msg, reason="InsufficientCapacity", sandbox=name)
        return FAILED, errors.SandboxFailedError(msg, reason="VMFailed", sandbox=name)
    sched = conds.get("Scheduled") or {}
    if sched.get("status") == "False":
        reason, msg = sched.get("reason", ""), sched.get("message", "") or "not scheduled"
        err: Optional[errors.KubicleError] = None
        if reason == "TemplateNotFound":
            err = errors.TemplateNotFoundError(msg, reason=reason, sandbox=name)
        elif reason == "NoReadyNode":
            err = errors.TemplateNotReadyError(msg, reason=reason, sandbox=name)
        elif reason == "InsufficientCapacity":
            err = errors.CapacityError(msg, reason=reason, sandbox=name)
        elif reason in ("SourceNotFound", "SourceNotScheduled"):
            err = errors.SandboxFailedError(msg, reason=reason, sandbox=name)
        if err is not None and not wait_pending and reason != "SourceNotScheduled":
            return FAILED, err
        return PENDING, err
    return PENDING, None


def timeout_error(what: str, timeout: float, last: Optional[errors.KubicleError],
                  obj: Optional[Mapping[str, Any]]) -> errors.KubicleError:
    if last is not None:
        return last
    phase = _get(obj, "status", "phase") if obj else None
    ready = conditions(obj).get("Ready", {}) if obj else {}
    detail = f" (phase {phase}, Ready {ready.get('reason', '?')}: {ready.get('message', '')})" \
        if phase else ""
    return errors.SandboxTimeoutError(f"{what} not done after {timeout:g} s{detail}",
                                      reason="Timeout", sandbox=name_of(obj) if obj else None)


def fork_problem(fork: Optional[Mapping[str, Any]]) -> Optional[errors.KubicleError]:
    """The error a SandboxFork's status states, if any."""
    if not fork:
        return None
    phase = _get(fork, "status", "phase")
    ready = conditions(fork).get("Ready") or {}
    reason, msg = ready.get("reason", ""), ready.get("message", "")
    if phase == "Failed" or reason == "ForkFailed":
        return errors.SandboxFailedError(msg or "a fork child failed", reason=reason or "ForkFailed",
                                         sandbox=name_of(fork))
    if reason in ("SourceNotFound", "SourceDeleting", "NameConflict"):
        return errors.SandboxFailedError(msg or reason, reason=reason, sandbox=name_of(fork))
    return None


def token_from_secret(data: Optional[Mapping[str, str]], secret: str) -> str:
    raw = (data or {}).get("token")
    if not raw:
        raise errors.AuthError(f"Secret {secret} has no data.token", reason="NoToken")
    return base64.b64decode(raw).decode("utf-8").strip()


def data_plane_url(scheme: str, obj: Mapping[str, Any]) -> str:
    endpoint = _get(obj, "status", "vm", "endpoint")
    if not endpoint or not is_ready(obj):
        info = sandbox_info(obj)
        raise errors.SandboxNotReadyError(
            f"no running VM to reach (phase {info.phase})", reason=info.phase,
            sandbox=info.name)
    return f"{scheme}://{endpoint}/v1/sandboxes/{node_id(obj)}"


def fork_child_names(fork_name: str, count: int) -> Tuple[str, ...]:
    return tuple(f"{fork_name}-{i}" for i in range(count))



def api_error(e: Any, *, what: str = "", sandbox: Optional[str] = None) -> errors.KubicleError:
    """A KubicleError for an ApiException of either Kubernetes client."""
    import json

    status = int(getattr(e, "status", 0) or 0)
    message, reason = "", str(getattr(e, "reason", "") or "")
    body = getattr(e, "body", None)
    if body:
        try:
            j = json.loads(body if isinstance(body, str) else body.decode())
            message = j.get("message", "") or ""
            reason = j.get("reason", "") or reason
        except (ValueError, AttributeError):
            message = str(body)[:500]
    message = message or f"HTTP {status} {reason}".strip()
    if what:
        message = f"{what}: {message}"
    kw: Dict[str, Any] = {"reason": reason, "status_code": status or None, "sandbox": sandbox}
    if status in (401, 403):
        return errors.AuthError(message, **kw)
    if status == 404:
        return errors.SandboxNotFoundError(message, **kw)
    if status == 409:
        return errors.ConflictError(message, **kw)
    return errors.ApiError(message, **kw)


# --- what a watch waits for (fed the matching objects by name on every
# change; a value ends the wait, an exception fails it) ---------------------

Objs = Dict[str, Dict[str, Any]]


class ReadyStep:
    """One Sandbox Ready; ``last`` is the error to raise if time runs out."""

    def __init__(self, name: str, wait_pending: bool) -> None:
        self.name, self.wait_pending = name, wait_pending
        self.last: Optional[errors.KubicleError] = None

    def __call__(self, objs: Objs) -> Optional[Dict[str, Any]]:
        state, err = wait_state(objs.get(self.name), wait_pending=self.wait_pending)
        if state == READY:
            return objs[self.name]
        if state in (FAILED, GONE):
            assert err is not None
            raise err
        self.last = err
        return None

    def timeout(self, timeout: float, objs: Objs) -> errors.KubicleError:
        return timeout_error(f"Sandbox {self.name}: Ready", timeout, self.last, objs.get(self.name))


def suspend_patch(suspend: bool) -> Dict[str, Any]:
    """The merge patch that sets spec.suspend (docs/sdk.md, "Suspend and resume")."""
    return {"spec": {"suspend": bool(suspend)}}


class SuspendStep:
    """One Sandbox suspended (phase Suspended) or resumed (Ready again); a
    Sandbox that fails, is deleted, or is being deleted raises."""

    def __init__(self, name: str, suspend: bool) -> None:
        self.name, self.suspend = name, suspend
        self.last: Optional[errors.KubicleError] = None

    def __call__(self, objs: Objs) -> Optional[Dict[str, Any]]:
        obj = objs.get(self.name)
        if obj is None:
            raise errors.SandboxFailedError("the Sandbox was deleted while waiting for it",
                                            reason="Deleted", sandbox=self.name)
        if _get(obj, "metadata", "deletionTimestamp"):
            raise errors.SandboxFailedError("the Sandbox is being deleted", reason="Terminating",
                                            sandbox=self.name)
        phase = _get(obj, "status", "phase")
        if phase == "Failed":
            msg = _get(obj, "status", "vm", "message") or "the VM failed"
            raise errors.SandboxFailedError(msg, reason="VMFailed", sandbox=self.name)
        if self.suspend and phase == "Suspended":
            return obj
        if not self.suspend and phase == "Running" and is_ready(obj):
            return obj
        # The node says why it waits (no disk for the snapshot, a full node).
        msg = _get(obj, "status", "vm", "message") or ""
        self.last = errors.SandboxTimeoutError(msg, reason="Timeout", sandbox=self.name) if msg else None
        return None

    def timeout(self, timeout: float, objs: Objs) -> errors.KubicleError:
        what = "Suspended" if self.suspend else "Running again"
        return timeout_error(f"Sandbox {self.name}: {what}", timeout, self.last,
                             objs.get(self.name))


class ChildrenStep:
    """Every child of a SandboxFork Ready (they appear as the operator makes them)."""

    def __init__(self, fork: str, count: int) -> None:
        self.fork, self.names = fork, fork_child_names(fork, count)

    def __call__(self, objs: Objs) -> Optional[List[Dict[str, Any]]]:
        for n in self.names:
            if n in objs:
                state, err = wait_state(objs[n], wait_pending=True)
                if state == FAILED:
                    assert err is not None
                    raise err
        if all(n in objs and is_ready(objs[n]) for n in self.names):
            return [objs[n] for n in self.names]
        return None

    def timeout(self, timeout: float, objs: Objs,
                fork: Optional[Mapping[str, Any]]) -> errors.KubicleError:
        ready = sum(1 for n in self.names if n in objs and is_ready(objs[n]))
        return fork_problem(fork) or errors.SandboxTimeoutError(
            f"SandboxFork {self.fork}: {ready} of {len(self.names)} children Ready after "
            f"{timeout:g} s", reason="Timeout", sandbox=self.fork)


def none_left(objs: Objs) -> Optional[bool]:
    return True if not objs else None


def sweep_timeout(selector: str, timeout: float, left: Objs) -> errors.KubicleError:
    return errors.SandboxTimeoutError(
        f"{len(left)} Sandboxes of {selector} still there after {timeout:g} s: "
        f"{', '.join(sorted(left)[:10])}", reason="Timeout")


# --- the list and watch requests both transports make ----------------------

def list_call(namespace: str, plural: str = SANDBOXES, **sel: Any) -> Call:
    return Call("kube", ("co", "list_namespaced_custom_object", GROUP, VERSION, namespace,
                         plural), dict(what=f"list {plural}", **sel))


def watch_call(namespace: str, rv: str, seconds: int, plural: str = SANDBOXES,
               request_timeout: Optional[float] = None, **sel: Any) -> Call:
    """One watch request of ``seconds`` from ``rv``; its events come one by
    one through the transport's ``next``."""
    kw = dict(resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=seconds,
              _request_timeout=request_timeout if request_timeout is not None else seconds + 30,
              **sel)
    return Call("watch", ((GROUP, VERSION, namespace, plural), kw, f"watch {plural}"))


def objs_and_rv(lst: Mapping[str, Any]) -> Tuple[Objs, str]:
    """A list answer as the objects by name and its resourceVersion."""
    return ({name_of(o): o for o in lst.get("items", [])},
            lst["metadata"]["resourceVersion"])


def items_and_rv(lst: Mapping[str, Any]) -> Tuple[List[Dict[str, Any]], str]:
    objs, rv = objs_and_rv(lst)
    return list(objs.values()), rv


def event_object(ev: Mapping[str, Any]) -> Dict[str, Any]:
    """The object of a watch event, as either client gives it."""
    return ev.get("raw_object") or ev.get("object") or {}
