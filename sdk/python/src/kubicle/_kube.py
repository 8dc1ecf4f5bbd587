"""The Kubernetes backend of the sync client, on the official ``kubernetes``
package: Sandboxes and SandboxForks are created, then watched (list, then
watch from its resourceVersion; relist on 410) until they stand where the
caller wants them."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from . import _http, _kobj, _watchcache, _workspace_obj, errors
from ._labels import FORK_OF
from ._ref import Ref

T = TypeVar("T")
log = logging.getLogger("kubicle")
# A Sandbox whose VM refuses its own Secret's token is replaced this often
# before create() gives up (see REPLACED_MESSAGE). The operator no longer
# replaces token Secrets, so this should not happen; the check is kept
# because it costs one GET and also proves the data plane reachable.
TOKEN_RETRIES = 2
REPLACED_MESSAGE = ("kubicle: Sandbox %s refuses the token in its Secret (its VM holds another "
                    "token's hash: an operator from before the token-Secret fix, or a Secret "
                    "changed by hand); deleting it and creating another")
Objs = Dict[str, Dict[str, Any]]
# Where Kubernetes mounts a pod's service account: token, ca.crt, namespace.
# The in-cluster mode reads all three from here and nowhere else; only the
# SDK's unit tests point it at a directory of their own (docs/sdk.md, Tests).
SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def kubeconfig_namespace(contexts: List[Mapping[str, Any]], active: Optional[Mapping[str, Any]],
                         context: Optional[str]) -> Optional[str]:
    chosen = active
    if context:
        chosen = next((c for c in contexts if c.get("name") == context), None)
    return ((chosen or {}).get("context") or {}).get("namespace")


def incluster_namespace() -> str:
    try:
        with open(os.path.join(SERVICEACCOUNT_DIR, "namespace")) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def incluster_files() -> Dict[str, str]:
    """The token and CA files of the in-cluster service account, as the
    keyword arguments of either client's InClusterConfigLoader (what their
    load_incluster_config passes, for the default directory)."""
    return {"token_filename": os.path.join(SERVICEACCOUNT_DIR, "token"),
            "cert_filename": os.path.join(SERVICEACCOUNT_DIR, "ca.crt")}


def kubeconfig_path(kubeconfig: Optional[str]) -> str:
    """The kubeconfig argument, else $KUBECONFIG as it is now (both clients
    read it once, when first imported), else ~/.kube/config."""
    return kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"


def use_incluster(kubeconfig: Optional[str]) -> bool:
    return kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ and \
        not os.environ.get("KUBECONFIG")


class KubeBackend:
    def __init__(self, *, namespace: Optional[str], kubeconfig: Optional[str],
                 context: Optional[str], scheme: str, pool_size: int, http: Any,
                 transport: Optional[_http.TransportConfig] = None,
                 node_lease_namespace: str = _kobj.NODE_LEASE_NAMESPACE) -> None:
        from kubernetes import client, config
        from kubernetes.config.incluster_config import InClusterConfigLoader

        self._http = http
        self._transport = transport or _http.TransportConfig(scheme=scheme)
        self._tls = _http.TlsPool(self._transport, _http.sync_client)
        self._lease_ns = node_lease_namespace
        cfg = client.Configuration()
        if use_incluster(kubeconfig):
            InClusterConfigLoader(**incluster_files()).load_and_set(cfg)
            ns = incluster_namespace()
        else:
            path = kubeconfig_path(kubeconfig)
            config.load_kube_config(config_file=path, context=context,
                                    client_configuration=cfg, persist_config=False)
            contexts, active = config.list_kube_config_contexts(config_file=path)
            ns = kubeconfig_namespace(contexts, active, context) or "default"
        cfg.connection_pool_maxsize = pool_size
        self.namespace = namespace or ns
        self._scheme = scheme
        self._api = client.ApiClient(cfg)
        self._co = client.CustomObjectsApi(self._api)
        self._core = client.CoreV1Api(self._api)
        self._coord = client.CoordinationV1Api(self._api)
        import threading

        self._watcher: Optional[_watchcache.SyncWatcher] = None
        self._watcher_lock = threading.Lock()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
        for c in self._tls.take_all():
            c.close()
        self._api.close()

    # --- the shared watch (kubicle/_watchcache.py) --------------------------

    def _list_all(self) -> Tuple[List[Dict[str, Any]], str]:
        objs, rv = self._list(_kobj.SANDBOXES)
        return list(objs.values()), rv

    def _watch_all(self, rv: str, seconds: int, holder: Any) -> Any:
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        w = watch.Watch()
        holder.stopper = w
        try:
            yield from w.stream(self._co.list_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                                self.namespace, _kobj.SANDBOXES, resource_version=rv,
                                allow_watch_bookmarks=True, timeout_seconds=seconds,
                                _request_timeout=seconds + 30)
        except ApiException as e:
            raise _kobj.api_error(e, what="watch sandboxes") from e
        finally:
            w.stop()

    def _wait(self, step: Callable[[Objs], Optional[T]], select: _watchcache.Select,
              min_rv: Optional[int], timeout: float, **sel: Any) -> Tuple[Optional[T], Objs]:
        """Waits on the shared watch once min_rv is known, else (a
        resourceVersion that is not a number) with a watch of its own."""
        if min_rv is None:
            return self._watch(_kobj.SANDBOXES, timeout, step, **sel)
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = _watchcache.SyncWatcher(self._list_all, self._watch_all)
        return self._watcher.wait(step, select, min_rv, timeout)  # type: ignore[no-any-return]

    # --- plumbing -----------------------------------------------------------

    def _do(self, fn: Callable[..., Any], *args: Any, what: str = "", sandbox: Optional[str] = None,
            **kw: Any) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return fn(*args, **kw)
        except ApiException as e:
            raise _kobj.api_error(e, what=what, sandbox=sandbox) from e

    def _list(self, plural: str, **sel: Any) -> Tuple[Objs, str]:
        lst = self._do(self._co.list_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                       self.namespace, plural, what=f"list {plural}", **sel)
        items = {_kobj.name_of(o): o for o in lst.get("items", [])}
        return items, lst["metadata"]["resourceVersion"]

    def _watch(self, plural: str, timeout: float, step: Callable[[Objs], Optional[T]],
               **sel: Any) -> Tuple[Optional[T], Objs]:
        """Feeds the objects matching ``sel`` to ``step`` on every change
        until it returns a value (or raises), or ``timeout`` passes: then
        (None, the objects last seen)."""
        from kubernetes import watch
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        deadline = time.monotonic() + timeout
        while True:
            objs, rv = self._list(plural, **sel)
            r = step(objs)
            if r is not None:
                return r, objs
            relist = False
            while not relist:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, objs
                w = watch.Watch()
                try:
                    for ev in w.stream(self._co.list_namespaced_custom_object, _kobj.GROUP,
                                       _kobj.VERSION, self.namespace, plural,
                                       resource_version=rv, allow_watch_bookmarks=True,
                                       timeout_seconds=max(1, int(remaining + 0.999)),
                                       _request_timeout=remaining + 30, **sel):
                        obj = ev.get("object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        kind = ev.get("type")
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            objs.pop(_kobj.name_of(obj), None)
                        elif kind in ("ADDED", "MODIFIED"):
                            objs[_kobj.name_of(obj)] = obj
                        r = step(objs)
                        if r is not None:
                            return r, objs
                        if time.monotonic() >= deadline:
                            break
                except ApiException as e:
                    if e.status != 410:
                        raise _kobj.api_error(e, what=f"watch {plural}") from e
                    relist = True  # too old a resourceVersion: start over
                except HTTPError:
                    time.sleep(0.2)  # the connection broke: watch again from rv
                finally:
                    w.stop()

    def _delete(self, plural: str, name: str, policy: str) -> Any:
        """The apiserver's answer (the object), None if it was gone."""
        from kubernetes import client

        try:
            return self._do(self._co.delete_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                            self.namespace, plural, name,
                            body=client.V1DeleteOptions(propagation_policy=policy),
                            what=f"delete {plural[:-1]} {name}",
                            sandbox=None if plural == _kobj.WORKSPACES else name)
        except errors.NotFoundError:
            return None

    def _ref(self, obj: Dict[str, Any]) -> Ref:
        return Ref(info=_kobj.sandbox_info(obj), raw=obj)

    # --- the backend interface ----------------------------------------------

    def create(self, *, template: str, name: Optional[str], labels: Mapping[str, str],
               ttl_seconds: Optional[int], env: Optional[Mapping[str, str]],
               resources: Optional[Mapping[str, Any]], timeout: float,
               wait_pending: bool, workspace: Optional[str] = None) -> Ref:
        body = _kobj.sandbox_manifest(namespace=self.namespace, template=template, name=name,
                                      labels=labels, ttl_seconds=ttl_seconds, env=env,
                                      resources=resources, workspace=workspace)
        deadline = time.monotonic() + timeout
        for attempt in range(TOKEN_RETRIES + 1):
            ref = self._create_once(body, max(0.1, deadline - time.monotonic()), wait_pending)
            try:
                self.resolve(ref)
                _kobj.check_token(self._http, ref)
                return ref
            except errors.AuthError:
                self._delete(_kobj.SANDBOXES, ref.info.name, "Background")
                if name or attempt == TOKEN_RETRIES:
                    raise
                log.warning(REPLACED_MESSAGE, ref.info.name)
            except BaseException:
                self._delete(_kobj.SANDBOXES, ref.info.name, "Background")
                raise
        raise AssertionError("unreachable")

    def _create_once(self, body: Dict[str, Any], timeout: float, wait_pending: bool) -> Ref:
        created = self._do(self._co.create_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                           self.namespace, _kobj.SANDBOXES, body, what="create Sandbox")
        sname = _kobj.name_of(created)
        try:
            return self._ref(self._wait_ready(sname, timeout, wait_pending,
                                              _watchcache.min_rv_of(created)))
        except BaseException:
            # Never leave a Sandbox behind that the caller does not know of.
            self._delete(_kobj.SANDBOXES, sname, "Background")
            raise

    def _wait_ready(self, name: str, timeout: float, wait_pending: bool,
                    min_rv: Optional[int]) -> Dict[str, Any]:
        step = _kobj.ReadyStep(name, wait_pending)
        r, objs = self._wait(step, _watchcache.by_name(name), min_rv, timeout,
                             field_selector=f"metadata.name={name}")
        if r is None:
            raise step.timeout(timeout, objs)
        return r

    def get(self, name: str) -> Ref:
        obj = self._do(self._co.get_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                       self.namespace, _kobj.SANDBOXES, name, what=f"get Sandbox {name}",
                       sandbox=name)
        return self._ref(obj)

    def list(self, selector: str) -> List[Ref]:
        objs, _ = self._list(_kobj.SANDBOXES, label_selector=selector)
        return [self._ref(o) for _, o in sorted(objs.items())]

    def resolve(self, ref: Ref) -> None:
        """Fills the data-plane URL and token (the Sandbox's token Secret)."""
        if ref.base and ref.token:
            return
        obj = ref.raw
        if not _kobj.is_ready(obj):
            obj = self.get(ref.info.name).raw
            ref.raw, ref.info = obj, _kobj.sandbox_info(obj)
        transport = self._node_transport(_kobj.node_of(obj), ref.info.name)
        base = _kobj.data_plane_url(transport.scheme, obj)
        ref.token = self._secret_token(obj["status"]["tokenSecretName"], "token",
                                       sandbox=ref.info.name)
        ref.http, ref.ssl = transport.http, transport.ssl
        ref.base = base

    def run_target(self, template: str, workspace: Optional[str] = None) -> Any:
        """Where a per-call run of SandboxTemplate ``template`` goes: a node
        where it is Ready, with the run token from its Secret."""
        from ._run import RunTarget, pick_node, run_token_secret

        try:
            obj = self._do(self._co.get_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                           self.namespace, _kobj.TEMPLATES, template,
                           what=f"get SandboxTemplate {template}")
        except errors.NotFoundError as e:
            raise errors.TemplateNotFoundError(f"no SandboxTemplate {template}",
                                               reason="TemplateNotFound", status_code=404) from e
        only = node_workspace = None
        if workspace is not None:
            only, node_workspace = _workspace_obj.workspace_node(self.get_workspace(workspace))
        node, endpoint, node_template = pick_node(obj, only)
        token = self._secret_token(run_token_secret(obj), "run-token")
        transport = self._node_transport(node, template)
        return RunTarget(base=f"{transport.scheme}://{endpoint}", node_template=node_template,
                         token=token, node_workspace=node_workspace, http=transport.http)

    def _secret_token(self, secret: str, kind: str, sandbox: Optional[str] = None) -> str:
        """data.token of Secret ``secret`` (a Sandbox's, a template's run
        token, a Workspace's)."""
        s = self._do(self._core.read_namespaced_secret, secret, self.namespace,
                     what=f"read {kind} Secret {secret}", sandbox=sandbox)
        return _kobj.token_from_secret(s.data, secret)

    def _node_transport(self, node: str, sandbox: str) -> _http.NodeTransport:
        return _http.node_transport(self._serving_ca(node, sandbox), self._transport, self._tls)

    def _serving_ca(self, node: str, sandbox: str) -> Optional[str]:
        """The CA the node's Lease publishes; None for a node without one."""
        from kubernetes.client.rest import ApiException

        try:
            lease = self._coord.read_namespaced_lease(_kobj.lease_name(node), self._lease_ns)
        except ApiException as e:
            if e.status == 404:
                return None  # the node is gone: the data plane call will say so
            raise _kobj.lease_error(e, node, self._lease_ns, sandbox) from e
        return _kobj.serving_ca(lease.metadata.annotations if lease.metadata else None)

    def set_suspend(self, ref: Ref, suspend: bool, *, timeout: float) -> Ref:
        """Patches spec.suspend and waits for the node: phase Suspended, or
        Running and Ready again (docs/sdk.md, "Suspend and resume")."""
        name = ref.info.name
        patched = self._do(self._co.patch_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                           self.namespace, _kobj.SANDBOXES, name, _kobj.suspend_patch(suspend),
                           what=f"patch Sandbox {name}", sandbox=name)
        step = _kobj.SuspendStep(name, suspend)
        r, objs = self._wait(step, _watchcache.by_name(name), _watchcache.min_rv_of(patched),
                             timeout, field_selector=f"metadata.name={name}")
        if r is None:
            raise step.timeout(timeout, objs)
        fresh = self._ref(r)
        # The node, its endpoint and the token stay: what resolve found holds.
        fresh.base, fresh.token, fresh.http, fresh.ssl, fresh.env = (
            ref.base, ref.token, ref.http, ref.ssl, ref.env)
        return fresh

    def delete(self, name: str, *, wait: bool, timeout: float) -> None:
        gone = self._delete(_kobj.SANDBOXES, name, "Background")
        if wait:
            r, objs = self._wait(_kobj.none_left, _watchcache.by_name(name),
                                 _watchcache.min_rv_of(gone), timeout,
                                 field_selector=f"metadata.name={name}")
            if r is None:
                raise _kobj.timeout_error(f"Sandbox {name}: deletion", timeout, None,
                                          objs.get(name))

    def sweep(self, selector: str, *, timeout: float) -> List[str]:
        objs, _ = self._list(_kobj.SANDBOXES, label_selector=selector)
        for plural in (_kobj.FORKS, _kobj.SANDBOXES):
            self._do(self._co.delete_collection_namespaced_custom_object, _kobj.GROUP,
                     _kobj.VERSION, self.namespace, plural, label_selector=selector,
                     propagation_policy="Background", what=f"delete {plural} -l {selector}")
        r, left = self._wait(_kobj.none_left, _watchcache.by_labels(selector),
                             _watchcache.min_rv_of_items(objs), timeout,
                             label_selector=selector)
        if r is None:
            raise _kobj.sweep_timeout(selector, timeout, left)
        return sorted(objs)

    def fork(self, ref: Ref, *, count: int, labels: Mapping[str, str],
             ttl_seconds: Optional[int], timeout: float) -> List[Ref]:
        deadline = time.monotonic() + timeout
        kept: List[Ref] = []
        try:
            for _ in range(TOKEN_RETRIES + 1):
                kids = self._fork_once(ref, count - len(kept), labels, ttl_seconds,
                                       max(0.1, deadline - time.monotonic()))
                for kid in kids:
                    try:
                        self.resolve(kid)
                        _kobj.check_token(self._http, kid)
                        kept.append(kid)
                    except errors.AuthError:
                        log.warning(REPLACED_MESSAGE, kid.info.name)
                        self._delete(_kobj.SANDBOXES, kid.info.name, "Background")
                if len(kept) == count:
                    return kept
            raise errors.AuthError(f"{count - len(kept)} fork children refuse their own token",
                                   reason="TokenMismatch", sandbox=ref.info.name)
        except BaseException:
            for kid in kept:
                self._delete(_kobj.SANDBOXES, kid.info.name, "Background")
            raise

    def _fork_once(self, ref: Ref, count: int, labels: Mapping[str, str],
                   ttl_seconds: Optional[int], timeout: float) -> List[Ref]:
        body = _kobj.fork_manifest(ref.raw, count=count, labels=labels, ttl_seconds=ttl_seconds)
        fork = self._do(self._co.create_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                        self.namespace, _kobj.FORKS, body, what="create SandboxFork",
                        sandbox=ref.info.name)
        fname = _kobj.name_of(fork)
        try:
            children = self._wait_children(fname, count, timeout, _watchcache.min_rv_of(fork))
        except BaseException:
            self._delete(_kobj.FORKS, fname, "Background")  # its children go with it
            raise
        # The children outlive their SandboxFork: deleting it with Orphan
        # leaves them as plain Sandboxes, so each can be deleted on its own
        # (the fork would recreate a child deleted under it).
        self._delete(_kobj.FORKS, fname, "Orphan")
        return [self._ref(c) for c in children]

    def _wait_children(self, fname: str, count: int, timeout: float,
                       min_rv: Optional[int]) -> List[Dict[str, Any]]:
        step = _kobj.ChildrenStep(fname, count)
        sel = f"{FORK_OF}={fname}"
        r, objs = self._wait(step, _watchcache.by_labels(sel), min_rv, timeout, label_selector=sel)
        if r is not None:
            return r
        try:
            fork = self._do(self._co.get_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                            self.namespace, _kobj.FORKS, fname)
        except errors.KubicleError:
            fork = None
        raise step.timeout(timeout, objs, fork)

    # --- Workspaces (client.workspaces) -------------------------------------

    def get_workspace(self, name: str) -> Dict[str, Any]:
        try:
            obj: Dict[str, Any] = self._do(
                self._co.get_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                self.namespace, _kobj.WORKSPACES, name, what=f"get Workspace {name}")
        except errors.NotFoundError as e:
            raise _workspace_obj.not_found(name) from e
        return obj

    def list_workspaces(self) -> List[Dict[str, Any]]:
        objs, _ = self._list(_kobj.WORKSPACES)
        return [o for _, o in sorted(objs.items())]

    def create_workspace(self, name: str, size_mib: int, labels: Optional[Mapping[str, str]],
                         timeout: float) -> Dict[str, Any]:
        """Creates the Workspace (or finds one of that size) and returns it
        once Ready. One this call made is deleted again if that fails."""
        body = _workspace_obj.manifest(namespace=self.namespace, name=name, size_mib=size_mib,
                                       labels=labels)
        try:
            self._do(self._co.create_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                     self.namespace, _kobj.WORKSPACES, body, what=f"create Workspace {name}")
        except errors.ConflictError as e:
            if e.reason != "AlreadyExists":
                raise
            _workspace_obj.check_size(self.get_workspace(name), size_mib)
            return self._wait_ready_workspace(name, timeout)
        try:
            return self._wait_ready_workspace(name, timeout)
        except BaseException:
            self._delete(_kobj.WORKSPACES, name, "Background")  # not a half-made disk left behind
            raise

    def delete_workspace(self, name: str, *, wait: bool, timeout: float) -> None:
        """Refuses while a Sandbox uses it (as a standalone node does);
        else deletes it, with ``wait`` until the node has removed the disk."""
        obj = self.get_workspace(name)
        in_use = _workspace_obj.deletion_blocked(obj) or _workspace_obj.attached(obj)
        if in_use is not None:
            raise in_use
        if self._delete(_kobj.WORKSPACES, name, "Background") is not None and wait:
            self._wait_workspace(name, _workspace_obj.GoneStep(name), timeout)

    def workspace_files(self, name: str, *, with_token: bool) -> _workspace_obj.FilesTarget:
        """Where the Workspace's files are: its node's data plane (verified
        as a Sandbox's is), the node's name of the disk and, ``with_token``,
        the token from its Secret."""
        obj = self.get_workspace(name)
        node, disk = _workspace_obj.workspace_node(obj)
        endpoint = _workspace_obj.endpoint_of(obj)
        token = ""
        if with_token:
            secret = _workspace_obj.token_secret_of(obj)
            try:
                token = self._secret_token(secret, "workspace token")
            except errors.NotFoundError as e:
                raise _workspace_obj.missing_secret(name, secret) from e
        transport = self._node_transport(node, name)
        return _workspace_obj.FilesTarget(scheme=transport.scheme, endpoint=endpoint, disk=disk,
                                          token=token, http=transport.http)

    def _wait_ready_workspace(self, name: str, timeout: float) -> Dict[str, Any]:
        obj: Dict[str, Any] = self._wait_workspace(name, _workspace_obj.ReadyStep(name), timeout)
        return obj

    def _wait_workspace(self, name: str, step: Any, timeout: float) -> Any:
        r, objs = self._watch(_kobj.WORKSPACES, timeout, step,
                              field_selector=f"metadata.name={name}")
        if r is None:
            raise step.timeout(timeout, objs)
        return r
