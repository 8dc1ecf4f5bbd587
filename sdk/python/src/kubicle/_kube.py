"""Kubernetes mode, once for both clients: Sandboxes and SandboxForks are
created, then watched (the shared watch of ``_watchcache.py``, or list and
watch from its resourceVersion, relisting on 410) until they stand where the
caller wants them; a Sandbox this client creates carries the hash of a
token the client made (spec.tokenSha256, no Secret), others' tokens come
from their Secrets; node CAs come from Leases.

``KubeBackend``'s calls are operations of the core (``_sansio.py``): the
threaded client drives them on ``kubernetes``, the asyncio one on
``kubernetes_asyncio``, through the same steps."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, TypeVar

from . import _http, _kobj, _run, _watchcache, _workspace_obj, errors
from ._labels import FORK_OF
from ._ref import Ref
from ._sansio import Op, call, shielded

T = TypeVar("T")
log = logging.getLogger("kubicle")
# A Sandbox whose VM refuses its own Secret's token is replaced this often
# before create() gives up (see REPLACED_MESSAGE). The operator no longer
# replaces token Secrets, so this should not happen; the check is kept
# because it costs one GET and also proves the data plane reachable. A
# Sandbox with the client's own token has no Secret to race with: a VM
# refusing that token is an error, not replaced.
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


class KubeLib:
    """One of the two Kubernetes client packages, ``kubernetes`` or
    ``kubernetes_asyncio`` (the same API, blocking or as coroutines),
    imported when a client first needs it."""

    def __init__(self, package: str) -> None:
        import importlib

        self.client = importlib.import_module(f"{package}.client")
        self.config = importlib.import_module(f"{package}.config")
        self.InClusterConfigLoader = importlib.import_module(
            f"{package}.config.incluster_config").InClusterConfigLoader

    def apis(self, cfg: Any) -> Dict[str, Any]:
        """The API objects the backend calls, by the name its steps use."""
        api = self.client.ApiClient(cfg)
        return {"api": api, "co": self.client.CustomObjectsApi(api),
                "core": self.client.CoreV1Api(api), "coord": self.client.CoordinationV1Api(api)}


class KubeBackend:
    """Sandboxes, SandboxForks, Workspaces and per-call runs as Kubernetes
    objects in one namespace. Each public method is an operation (``Op``)
    for the client's driver; ``client`` names the client in the error a
    closed one raises."""

    def __init__(self, *, namespace: Optional[str], kubeconfig: Optional[str],
                 context: Optional[str], pool_size: int, transport: _http.TransportConfig,
                 make_client: Callable[[_http.TransportConfig], Any], client: str,
                 node_lease_namespace: str = _kobj.NODE_LEASE_NAMESPACE) -> None:
        self._want_ns, self._kubeconfig, self._context = namespace, kubeconfig, context
        self._pool, self._client = pool_size, client
        self._transport = transport
        self._tls = _http.TlsPool(transport, make_client)
        self._lease_ns = node_lease_namespace
        self.namespace = namespace or ""
        self.started = self.closed = False
        # The tokens of the Sandboxes this client made (spec.tokenSha256):
        # (name, token) by metadata.uid, so a get or list of them reaches
        # their data plane too; forgotten when this client deletes them.
        self._own_tokens: Dict[str, Tuple[str, str]] = {}

    # --- connecting ---------------------------------------------------------

    def start(self) -> Op[None]:
        """Loads the credentials (in-cluster or kubeconfig) and connects."""
        self._check_open()
        if self.started:
            return
        lib = yield call("kube_lib")
        cfg = lib.client.Configuration()
        if use_incluster(self._kubeconfig):
            lib.InClusterConfigLoader(**incluster_files()).load_and_set(cfg)
            ns = incluster_namespace()
        else:
            path = kubeconfig_path(self._kubeconfig)
            yield call("load_kube_config", lib, config_file=path, context=self._context,
                       client_configuration=cfg, persist_config=False)
            contexts, active = lib.config.list_kube_config_contexts(config_file=path)
            ns = kubeconfig_namespace(contexts, active, self._context) or "default"
        cfg.connection_pool_maxsize = self._pool
        self.namespace = self._want_ns or ns
        yield call("connect_kube", lib, cfg)
        self.started = True

    def close(self) -> Op[None]:
        """Stops the shared watch and closes every connection; calls still
        running then fail with KubicleError (reason Closed)."""
        self.closed = True
        yield call("close_kube")
        for c in self._tls.take_all():
            yield call("close_http", c)

    def _check_open(self) -> None:
        if self.closed:
            raise errors.KubicleError(f"the {self._client} client is closed", reason="Closed")

    # --- plumbing -----------------------------------------------------------

    def _co(self, method: str, plural: str, *args: Any, cleanup: bool = False,
            **kw: Any) -> Any:
        """A CustomObjectsApi call on ``plural`` in the namespace."""
        self._check_open()
        make = shielded if cleanup else call
        return make("kube", "co", method, _kobj.GROUP, _kobj.VERSION, self.namespace, plural,
                    *args, **kw)

    def _api(self, api: str, method: str, *args: Any, **kw: Any) -> Any:
        self._check_open()
        return call("kube", api, method, *args, **kw)

    def _list(self, plural: str, **sel: Any) -> Op[Tuple[Objs, str]]:
        self._check_open()
        lst = yield _kobj.list_call(self.namespace, plural, **sel)
        return _kobj.objs_and_rv(lst)

    def _watch(self, plural: str, timeout: float, step: Callable[[Objs], Optional[T]],
               **sel: Any) -> Op[Tuple[Optional[T], Objs]]:
        """Feeds the objects matching ``sel`` to ``step`` on every change
        until it returns a value (or raises), or ``timeout`` passes: then
        (None, the objects last seen). A watch of its own (list, watch from
        that resourceVersion, relist on 410, again after a broken one)."""
        deadline = time.monotonic() + timeout
        while True:
            objs, rv = yield from self._list(plural, **sel)
            r = step(objs)
            if r is not None:
                return r, objs
            relist = False
            while not relist:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, objs
                self._check_open()
                events = yield _kobj.watch_call(self.namespace, rv, max(1, int(remaining + 0.999)),
                                                plural, remaining + 30, **sel)
                try:
                    while True:
                        got = yield from _watchcache.next_event(events, rv)
                        if got is None:
                            break
                        kind, obj, rv = got
                        if _watchcache.apply_event(objs, kind, obj) is None:
                            continue  # a bookmark
                        r = step(objs)
                        if r is not None:
                            return r, objs
                        if time.monotonic() >= deadline:
                            break
                except errors.KubicleError as e:
                    if e.status_code != 410:
                        raise
                    relist = True  # too old a resourceVersion: start over
                except _kobj.StreamBroken:
                    yield call("sleep", 0.2)  # watch again from rv
                finally:
                    yield call("close_watch", events)

    def _wait(self, step: Callable[[Objs], Optional[T]], select: _watchcache.Select,
              min_rv: Optional[int], timeout: float, **sel: Any) -> Op[Tuple[Optional[T], Objs]]:
        """Waits on the shared watch once min_rv is known, else (a
        resourceVersion that is not a number) with a watch of its own."""
        if min_rv is None:
            return (yield from self._watch(_kobj.SANDBOXES, timeout, step, **sel))
        self._check_open()
        return (yield call("wait", self.namespace, step, select, min_rv, timeout))

    def _wait_named(self, step: Any, written: Mapping[str, Any],
                    timeout: float) -> Op[Dict[str, Any]]:
        """What ``step`` waits for of Sandbox ``step.name``, once the watch
        has seen our own write ``written``; the step's timeout error after
        ``timeout``."""
        name = step.name
        r, objs = yield from self._wait(step, _watchcache.by_name(name),
                                        _watchcache.min_rv_of(written), timeout,
                                        field_selector=f"metadata.name={name}")
        if r is None:
            raise step.timeout(timeout, objs)
        return r  # type: ignore[no-any-return]

    def _delete(self, plural: str, name: str, policy: str, cleanup: bool = False) -> Op[Any]:
        """The apiserver's answer (the object), None if it was gone."""
        if plural == _kobj.SANDBOXES:
            self._forget({name})
        try:
            return (yield self._co("delete_namespaced_custom_object", plural, name,
                                   body={"propagationPolicy": policy}, cleanup=cleanup,
                                   what=f"delete {plural[:-1]} {name}",
                                   sandbox=None if plural == _kobj.WORKSPACES else name))
        except errors.NotFoundError:
            return None

    def _discard(self, plural: str, name: str) -> Op[Any]:
        """Deletes what this call made and must not leave behind (also when
        the caller is cancelled)."""
        return self._delete(plural, name, "Background", cleanup=True)

    def _forget(self, names: Set[str]) -> None:
        """Drops the own tokens of the Sandboxes of these names (deleted by
        this client: any of that name now is another object)."""
        for uid, (name, _) in list(self._own_tokens.items()):
            if name in names:
                self._own_tokens.pop(uid, None)

    def _ref(self, obj: Dict[str, Any]) -> Ref:
        return Ref(info=_kobj.sandbox_info(obj), raw=obj)

    def _checked(self, ref: Ref) -> Op[None]:
        """Resolves ``ref`` and proves its VM takes its Secret's token."""
        yield from self.resolve(ref)
        yield from _http.check_token(ref)

    # --- Sandboxes ------------------------------------------------------------

    def create(self, *, template: str, name: Optional[str], labels: Mapping[str, str],
               ttl_seconds: Optional[int], env: Optional[Mapping[str, str]],
               resources: Optional[Mapping[str, Any]], timeout: float,
               wait_pending: bool, workspace: Optional[str] = None,
               token_secret: bool = False) -> Op[Ref]:
        """Creates a Sandbox and returns it Ready, its data plane checked.
        Unless ``token_secret``, with a token made here whose hash alone
        goes to the cluster: no Secret is made or read. An apiserver or
        operator from before spec.tokenSha256 makes a Secret anyway: then
        that token is used, as any Secret's."""
        token = None if token_secret else _kobj.new_token()
        body = _kobj.sandbox_manifest(namespace=self.namespace, template=template, name=name,
                                      labels=labels, ttl_seconds=ttl_seconds, env=env,
                                      resources=resources, workspace=workspace,
                                      token_sha256=token and _kobj.token_sha256(token))
        deadline = time.monotonic() + timeout
        for attempt in range(TOKEN_RETRIES + 1):
            ref = yield from self._create_once(body, max(0.1, deadline - time.monotonic()),
                                               wait_pending)
            own = bool(token) and _kobj.holds_own_token(ref.raw, body["spec"]["tokenSha256"])
            if own:
                ref.token = token
            try:
                yield from self._checked(ref)
                if own:
                    self._own_tokens[ref.info.uid] = (ref.info.name, str(token))
                return ref
            except errors.AuthError:
                yield from self._discard(_kobj.SANDBOXES, ref.info.name)
                if own or name or attempt == TOKEN_RETRIES:
                    raise  # no Secret can have raced with the client's own token
                log.warning(REPLACED_MESSAGE, ref.info.name)
            except BaseException:
                yield from self._discard(_kobj.SANDBOXES, ref.info.name)
                raise
        raise AssertionError("unreachable")

    def _create_once(self, body: Dict[str, Any], timeout: float, wait_pending: bool) -> Op[Ref]:
        created = yield self._co("create_namespaced_custom_object", _kobj.SANDBOXES, body,
                                 what="create Sandbox")
        sname = _kobj.name_of(created)
        try:
            ready = yield from self._wait_named(_kobj.ReadyStep(sname, wait_pending), created,
                                                timeout)
            return self._ref(ready)
        except BaseException:
            # Never leave a Sandbox behind that the caller does not know of
            # (a cancelled task included).
            yield from self._discard(_kobj.SANDBOXES, sname)
            raise

    def get(self, name: str) -> Op[Ref]:
        obj = yield self._co("get_namespaced_custom_object", _kobj.SANDBOXES, name,
                             what=f"get Sandbox {name}", sandbox=name)
        return self._ref(obj)

    def list(self, selector: str) -> Op[List[Ref]]:
        objs, _ = yield from self._list(_kobj.SANDBOXES, label_selector=selector)
        return [self._ref(o) for _, o in sorted(objs.items())]

    def resolve(self, ref: Ref) -> Op[None]:
        """Fills the data-plane URL and token: this client's own for a
        Sandbox it made, else its token Secret's."""
        if ref.base and ref.token:
            return
        obj = ref.raw
        if not _kobj.is_ready(obj):
            obj = (yield from self.get(ref.info.name)).raw
            ref.raw, ref.info = obj, _kobj.sandbox_info(obj)
        transport = yield from self._node_transport(_kobj.node_of(obj), ref.info.name)
        base = _kobj.data_plane_url(transport.scheme, obj)
        if not ref.token:
            ref.token = self._own_tokens.get(ref.info.uid, ("", None))[1]
        if not ref.token:
            secret = (obj.get("status") or {}).get("tokenSecretName")
            if not secret:
                raise _kobj.own_token_error(obj)
            ref.token = yield from self._secret_token(secret, "token", sandbox=ref.info.name)
        ref.http, ref.ssl = transport.http, transport.ssl
        ref.base = base

    def run_target(self, template: str, workspace: Optional[str] = None) -> Op[_run.RunTarget]:
        """Where a per-call run of SandboxTemplate ``template`` goes: a node
        where it is Ready, with the run token from its Secret."""
        try:
            obj = yield self._co("get_namespaced_custom_object", _kobj.TEMPLATES, template,
                                 what=f"get SandboxTemplate {template}")
        except errors.NotFoundError as e:
            raise errors.TemplateNotFoundError(f"no SandboxTemplate {template}",
                                               reason="TemplateNotFound", status_code=404) from e
        only = node_workspace = None
        if workspace is not None:
            only, node_workspace = _workspace_obj.workspace_node(
                (yield from self.get_workspace(workspace)))
        node, endpoint, node_template = _run.pick_node(obj, only)
        token = yield from self._secret_token(_run.run_token_secret(obj), "run-token")
        transport = yield from self._node_transport(node, template)
        return _run.RunTarget(base=f"{transport.scheme}://{endpoint}",
                              node_template=node_template, token=token,
                              node_workspace=node_workspace, http=transport.http)

    def _secret_token(self, secret: str, kind: str, sandbox: Optional[str] = None) -> Op[str]:
        """data.token of Secret ``secret`` (a Sandbox's, a template's run
        token, a Workspace's)."""
        s = yield self._api("core", "read_namespaced_secret", secret, self.namespace,
                            what=f"read {kind} Secret {secret}", sandbox=sandbox)
        return _kobj.token_from_secret(s.data, secret)

    def _node_transport(self, node: str, sandbox: str) -> Op[_http.NodeTransport]:
        ca = yield from self._serving_ca(node, sandbox)
        return _http.node_transport(ca, self._transport, self._tls)

    def _serving_ca(self, node: str, sandbox: str) -> Op[Optional[str]]:
        """The CA the node's Lease publishes; None for a node without one."""
        try:
            lease = yield self._api("coord", "read_namespaced_lease", _kobj.lease_name(node),
                                    self._lease_ns, what=_kobj.lease_what(node, self._lease_ns),
                                    sandbox=sandbox)
        except errors.NotFoundError:
            return None  # the node is gone: the data plane call will say so
        return _kobj.serving_ca(lease.metadata.annotations if lease.metadata else None)

    def set_suspend(self, ref: Ref, suspend: bool, *, timeout: float) -> Op[Ref]:
        """Patches spec.suspend and waits for the node: phase Suspended, or
        Running and Ready again (docs/sdk.md, "Suspend and resume")."""
        name = ref.info.name
        # A merge patch, said so: kubernetes_asyncio would send an object as
        # a JSON patch (the first type the custom-object API lists), which
        # kube-apiserver refuses (400).
        patched = yield self._co("patch_namespaced_custom_object", _kobj.SANDBOXES, name,
                                 _kobj.suspend_patch(suspend), what=f"patch Sandbox {name}",
                                 sandbox=name, _content_type="application/merge-patch+json")
        fresh = self._ref((yield from self._wait_named(_kobj.SuspendStep(name, suspend), patched,
                                                       timeout)))
        # The node, its endpoint and the token stay: what resolve found holds.
        fresh.base, fresh.token, fresh.http, fresh.ssl, fresh.env = (
            ref.base, ref.token, ref.http, ref.ssl, ref.env)
        return fresh

    def delete(self, name: str, *, wait: bool, timeout: float) -> Op[None]:
        gone = yield from self._delete(_kobj.SANDBOXES, name, "Background")
        if wait:
            r, objs = yield from self._wait(_kobj.none_left, _watchcache.by_name(name),
                                            _watchcache.min_rv_of(gone), timeout,
                                            field_selector=f"metadata.name={name}")
            if r is None:
                raise _kobj.timeout_error(f"Sandbox {name}: deletion", timeout, None,
                                          objs.get(name))

    def sweep(self, selector: str, *, timeout: float) -> Op[List[str]]:
        objs, _ = yield from self._list(_kobj.SANDBOXES, label_selector=selector)
        self._forget(set(objs))
        for plural in (_kobj.FORKS, _kobj.SANDBOXES):
            yield self._co("delete_collection_namespaced_custom_object", plural,
                           label_selector=selector, propagation_policy="Background",
                           what=f"delete {plural} -l {selector}")
        r, left = yield from self._wait(_kobj.none_left, _watchcache.by_labels(selector),
                                        _watchcache.min_rv_of_items(objs), timeout,
                                        label_selector=selector)
        if r is None:
            raise _kobj.sweep_timeout(selector, timeout, left)
        return sorted(objs)

    def fork(self, ref: Ref, *, count: int, labels: Mapping[str, str],
             ttl_seconds: Optional[int], timeout: float) -> Op[List[Ref]]:
        deadline = time.monotonic() + timeout
        kept: List[Ref] = []
        try:
            for _ in range(TOKEN_RETRIES + 1):
                kids = yield from self._fork_once(ref, count - len(kept), labels, ttl_seconds,
                                                  max(0.1, deadline - time.monotonic()))
                for kid in kids:
                    try:
                        yield from self._checked(kid)
                        kept.append(kid)
                    except errors.AuthError:
                        log.warning(REPLACED_MESSAGE, kid.info.name)
                        yield from self._discard(_kobj.SANDBOXES, kid.info.name)
                if len(kept) == count:
                    return kept
            raise errors.AuthError(f"{count - len(kept)} fork children refuse their own token",
                                   reason="TokenMismatch", sandbox=ref.info.name)
        except BaseException:
            for kid in kept:
                yield from self._discard(_kobj.SANDBOXES, kid.info.name)
            raise

    def _fork_once(self, ref: Ref, count: int, labels: Mapping[str, str],
                   ttl_seconds: Optional[int], timeout: float) -> Op[List[Ref]]:
        """One SandboxFork of ``count``, its children Ready. Each child's
        token is made here and only its hash sent (childTokenSha256: the
        operator gives child i hash i, no Secret); a child that did not
        take it (an older CRD or operator) has its Secret's."""
        tokens = [_kobj.new_token() for _ in range(count)]
        hashes = [_kobj.token_sha256(t) for t in tokens]
        body = _kobj.fork_manifest(ref.raw, count=count, labels=labels, ttl_seconds=ttl_seconds,
                                   child_token_sha256=hashes)
        fork = yield self._co("create_namespaced_custom_object", _kobj.FORKS, body,
                              what="create SandboxFork", sandbox=ref.info.name)
        fname = _kobj.name_of(fork)
        try:
            children = yield from self._wait_children(fname, count, timeout,
                                                      _watchcache.min_rv_of(fork))
        except BaseException:
            yield from self._discard(_kobj.FORKS, fname)  # its children go with it
            raise
        # The children outlive their SandboxFork: deleting it with Orphan
        # leaves them as plain Sandboxes, so each can be deleted on its own
        # (the fork would recreate a child deleted under it).
        yield from self._delete(_kobj.FORKS, fname, "Orphan")
        kids = [self._ref(c) for c in children]
        for kid, token, sha in zip(kids, tokens, hashes):
            if _kobj.holds_own_token(kid.raw, sha):
                kid.token = token
                self._own_tokens[kid.info.uid] = (kid.info.name, token)
        return kids

    def _wait_children(self, fname: str, count: int, timeout: float,
                       min_rv: Optional[int]) -> Op[List[Dict[str, Any]]]:
        step = _kobj.ChildrenStep(fname, count)
        sel = f"{FORK_OF}={fname}"
        r, objs = yield from self._wait(step, _watchcache.by_labels(sel), min_rv, timeout,
                                        label_selector=sel)
        if r is not None:
            return r
        try:
            fork = yield self._co("get_namespaced_custom_object", _kobj.FORKS, fname)
        except errors.KubicleError:
            fork = None
        raise step.timeout(timeout, objs, fork)

    # --- Workspaces (client.workspaces) -------------------------------------

    def get_workspace(self, name: str) -> Op[Dict[str, Any]]:
        try:
            obj: Dict[str, Any] = yield self._co("get_namespaced_custom_object",
                                                 _kobj.WORKSPACES, name,
                                                 what=f"get Workspace {name}")
        except errors.NotFoundError as e:
            raise _workspace_obj.not_found(name) from e
        return obj

    def list_workspaces(self) -> Op[List[Dict[str, Any]]]:
        objs, _ = yield from self._list(_kobj.WORKSPACES)
        return [o for _, o in sorted(objs.items())]

    def create_workspace(self, name: str, size_mib: int, labels: Optional[Mapping[str, str]],
                         timeout: float) -> Op[Dict[str, Any]]:
        """Creates the Workspace (or finds one of that size) and returns it
        once Ready. One this call made is deleted again if that fails."""
        body = _workspace_obj.manifest(namespace=self.namespace, name=name, size_mib=size_mib,
                                       labels=labels)
        try:
            yield self._co("create_namespaced_custom_object", _kobj.WORKSPACES, body,
                           what=f"create Workspace {name}")
        except errors.ConflictError as e:
            if e.reason != "AlreadyExists":
                raise
            _workspace_obj.check_size((yield from self.get_workspace(name)), size_mib)
            return (yield from self._wait_workspace(name, _workspace_obj.ReadyStep(name), timeout))
        try:
            return (yield from self._wait_workspace(name, _workspace_obj.ReadyStep(name), timeout))
        except BaseException:
            yield from self._discard(_kobj.WORKSPACES, name)  # not a half-made disk left behind
            raise

    def delete_workspace(self, name: str, *, wait: bool, timeout: float) -> Op[None]:
        """Refuses while a Sandbox uses it (as a standalone node does);
        else deletes it, with ``wait`` until the node has removed the disk."""
        obj = yield from self.get_workspace(name)
        in_use = _workspace_obj.deletion_blocked(obj) or _workspace_obj.attached(obj)
        if in_use is not None:
            raise in_use
        gone = yield from self._delete(_kobj.WORKSPACES, name, "Background")
        if gone is not None and wait:
            yield from self._wait_workspace(name, _workspace_obj.GoneStep(name), timeout)

    def workspace_files(self, name: str, *, with_token: bool) -> Op[_workspace_obj.FilesTarget]:
        """Where the Workspace's files are: its node's data plane (verified
        as a Sandbox's is), the node's name of the disk and, ``with_token``,
        the token from its Secret."""
        obj = yield from self.get_workspace(name)
        node, disk = _workspace_obj.workspace_node(obj)
        endpoint = _workspace_obj.endpoint_of(obj)
        token = ""
        if with_token:
            secret = _workspace_obj.token_secret_of(obj)
            try:
                token = yield from self._secret_token(secret, "workspace token")
            except errors.NotFoundError as e:
                raise _workspace_obj.missing_secret(name, secret) from e
        transport = yield from self._node_transport(node, name)
        return _workspace_obj.FilesTarget(scheme=transport.scheme, endpoint=endpoint, disk=disk,
                                          token=token, http=transport.http)

    def _wait_workspace(self, name: str, step: Any, timeout: float) -> Op[Any]:
        r, objs = yield from self._watch(_kobj.WORKSPACES, timeout, step,
                                         field_selector=f"metadata.name={name}")
        if r is None:
            raise step.timeout(timeout, objs)
        return r
