"""The Kubernetes backend of AsyncKubicle, on ``kubernetes_asyncio``: the
same steps as ``_kube.py`` (create, then list-and-watch until Ready), as
coroutines, so hundreds of waits share one event loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar

from . import _http, _kobj, _watchcache, _workspace_obj, errors
from ._kube import (REPLACED_MESSAGE, TOKEN_RETRIES, incluster_files, incluster_namespace,
                    kubeconfig_namespace, kubeconfig_path, log, use_incluster)
from ._labels import FORK_OF
from ._ref import Ref

T = TypeVar("T")
Objs = Dict[str, Dict[str, Any]]


def _shared_watch(api_client: Any) -> Any:
    """A kubernetes_asyncio Watch on our own ApiClient. Watch() builds a new
    ApiClient, and with it an SSL context (~0.1 s of CPU on the event loop),
    for every watch; it only needs one for model types, which custom
    objects never are."""
    from kubernetes_asyncio import watch

    class SharedWatch(watch.Watch):  # type: ignore[misc]
        def __init__(self) -> None:
            self._raw_return_type = None
            self._stop = False
            self._api_client = api_client
            self.resource_version = None
            self.resp = None

        async def close(self) -> None:  # the ApiClient is the backend's
            if self.resp is not None:
                self.resp.release()
                self.resp = None

    return SharedWatch()


class AsyncKubeBackend:
    def __init__(self, *, namespace: Optional[str], kubeconfig: Optional[str],
                 context: Optional[str], scheme: str, pool_size: int, http: Any,
                 transport: Optional[_http.TransportConfig] = None,
                 node_lease_namespace: str = _kobj.NODE_LEASE_NAMESPACE) -> None:
        self._http = http
        self._transport = transport or _http.TransportConfig(scheme=scheme)
        self._tls = _http.TlsPool(self._transport, _http.async_client)
        self._lease_ns = node_lease_namespace
        self._want_ns, self._kubeconfig, self._context = namespace, kubeconfig, context
        self._scheme, self._pool = scheme, pool_size
        self.namespace = namespace or ""
        self._api: Any = None
        self._watcher: Optional[_watchcache.AsyncWatcher] = None
        self._closed = False
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        async with self._lock:
            if self._closed:
                raise errors.KubicleError("the AsyncKubicle client is closed", reason="Closed")
            if self._api is not None:
                return
            from kubernetes_asyncio import client, config
            from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

            cfg = client.Configuration()
            if use_incluster(self._kubeconfig):
                InClusterConfigLoader(**incluster_files()).load_and_set(cfg)
                ns = incluster_namespace()
            else:
                path = kubeconfig_path(self._kubeconfig)
                await config.load_kube_config(config_file=path, context=self._context,
                                              client_configuration=cfg, persist_config=False)
                contexts, active = config.list_kube_config_contexts(config_file=path)
                ns = kubeconfig_namespace(contexts, active, self._context) or "default"
            cfg.connection_pool_maxsize = self._pool
            self.namespace = self._want_ns or ns
            self._api = client.ApiClient(cfg)
            self._co = client.CustomObjectsApi(self._api)
            self._core = client.CoreV1Api(self._api)
            self._coord = client.CoordinationV1Api(self._api)

    async def close(self) -> None:
        self._closed = True
        if self._watcher is not None:
            await self._watcher.close()
        for c in self._tls.take_all():
            await c.aclose()
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def _do(self, fn: Callable[..., Awaitable[T]], *args: Any, what: str = "",
                  sandbox: Optional[str] = None, **kw: Any) -> T:
        from kubernetes_asyncio.client.rest import ApiException

        await self.start()
        try:
            return await fn(*args, **kw)
        except ApiException as e:
            raise _kobj.api_error(e, what=what, sandbox=sandbox) from e

    async def _list(self, plural: str, **sel: Any) -> Tuple[Objs, str]:
        await self.start()
        lst = await self._do(self._co.list_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                             self.namespace, plural, what=f"list {plural}", **sel)
        return {_kobj.name_of(o): o for o in lst.get("items", [])}, lst["metadata"]["resourceVersion"]

    async def _watch(self, plural: str, timeout: float, step: Callable[[Objs], Optional[T]],
                     **sel: Any) -> Tuple[Optional[T], Objs]:
        from aiohttp import ClientError
        from kubernetes_asyncio.client.rest import ApiException

        deadline = time.monotonic() + timeout
        while True:
            objs, rv = await self._list(plural, **sel)
            r = step(objs)
            if r is not None:
                return r, objs
            relist = False
            while not relist:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None, objs
                w = _shared_watch(self._api)
                try:
                    stream = w.stream(self._co.list_namespaced_custom_object, _kobj.GROUP,
                                      _kobj.VERSION, self.namespace, plural, resource_version=rv,
                                      allow_watch_bookmarks=True,
                                      timeout_seconds=max(1, int(remaining + 0.999)),
                                      _request_timeout=remaining + 30, **sel)
                    async for ev in stream:
                        obj = ev.get("raw_object") or ev.get("object") or {}
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
                    relist = True
                except (ClientError, asyncio.TimeoutError):
                    await asyncio.sleep(0.2)
                finally:
                    await w.close()

    async def _delete(self, plural: str, name: str, policy: str) -> Any:
        from kubernetes_asyncio import client

        try:
            return await self._do(self._co.delete_namespaced_custom_object, _kobj.GROUP,
                                  _kobj.VERSION, self.namespace, plural, name,
                                  body=client.V1DeleteOptions(propagation_policy=policy),
                                  what=f"delete {plural[:-1]} {name}",
                                  sandbox=None if plural == _kobj.WORKSPACES else name)
        except errors.NotFoundError:
            return None

    # --- the shared watch (kubicle/_watchcache.py) --------------------------

    async def _list_all(self) -> Tuple[List[Dict[str, Any]], str]:
        objs, rv = await self._list(_kobj.SANDBOXES)
        return list(objs.values()), rv

    async def _watch_all(self, rv: str, seconds: int) -> Any:
        from kubernetes_asyncio.client.rest import ApiException

        w = _shared_watch(self._api)
        try:
            async for ev in w.stream(self._co.list_namespaced_custom_object, _kobj.GROUP,
                                     _kobj.VERSION, self.namespace, _kobj.SANDBOXES,
                                     resource_version=rv, allow_watch_bookmarks=True,
                                     timeout_seconds=seconds, _request_timeout=seconds + 30):
                yield ev
        except ApiException as e:
            raise _kobj.api_error(e, what="watch sandboxes") from e
        finally:
            await w.close()

    async def _wait(self, step: Callable[[Objs], Optional[T]], select: _watchcache.Select,
                    min_rv: Optional[int], timeout: float,
                    **sel: Any) -> Tuple[Optional[T], Objs]:
        if min_rv is None:
            return await self._watch(_kobj.SANDBOXES, timeout, step, **sel)
        if self._watcher is None:
            self._watcher = _watchcache.AsyncWatcher(self._list_all, self._watch_all)
        return await self._watcher.wait(step, select, min_rv, timeout)  # type: ignore[no-any-return]

    def _ref(self, obj: Dict[str, Any]) -> Ref:
        return Ref(info=_kobj.sandbox_info(obj), raw=obj)

    async def create(self, *, template: str, name: Optional[str], labels: Mapping[str, str],
                     ttl_seconds: Optional[int], env: Optional[Mapping[str, str]],
                     resources: Optional[Mapping[str, Any]], timeout: float,
                     wait_pending: bool, workspace: Optional[str] = None) -> Ref:
        await self.start()
        body = _kobj.sandbox_manifest(namespace=self.namespace, template=template, name=name,
                                      labels=labels, ttl_seconds=ttl_seconds, env=env,
                                      resources=resources, workspace=workspace)
        deadline = time.monotonic() + timeout
        for attempt in range(TOKEN_RETRIES + 1):
            ref = await self._create_once(body, max(0.1, deadline - time.monotonic()),
                                          wait_pending)
            try:
                await self.resolve(ref)
                await _kobj.check_token_async(self._http, ref)
                return ref
            except errors.AuthError:
                await asyncio.shield(self._delete(_kobj.SANDBOXES, ref.info.name, "Background"))
                if name or attempt == TOKEN_RETRIES:
                    raise
                log.warning(REPLACED_MESSAGE, ref.info.name)
            except BaseException:
                await asyncio.shield(self._delete(_kobj.SANDBOXES, ref.info.name, "Background"))
                raise
        raise AssertionError("unreachable")

    async def _create_once(self, body: Dict[str, Any], timeout: float, wait_pending: bool) -> Ref:
        created = await self._do(self._co.create_namespaced_custom_object, _kobj.GROUP,
                                 _kobj.VERSION, self.namespace, _kobj.SANDBOXES, body,
                                 what="create Sandbox")
        sname = _kobj.name_of(created)
        try:
            step = _kobj.ReadyStep(sname, wait_pending)
            r, objs = await self._wait(step, _watchcache.by_name(sname),
                                       _watchcache.min_rv_of(created), timeout,
                                       field_selector=f"metadata.name={sname}")
            if r is None:
                raise step.timeout(timeout, objs)
            return self._ref(r)
        except BaseException:
            # Never leave a Sandbox behind that the caller does not know of
            # (a cancelled task included).
            await asyncio.shield(self._delete(_kobj.SANDBOXES, sname, "Background"))
            raise

    async def get(self, name: str) -> Ref:
        obj = await self._do(self._co.get_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                             self.namespace, _kobj.SANDBOXES, name, what=f"get Sandbox {name}",
                             sandbox=name)
        return self._ref(obj)

    async def list(self, selector: str) -> List[Ref]:
        objs, _ = await self._list(_kobj.SANDBOXES, label_selector=selector)
        return [self._ref(o) for _, o in sorted(objs.items())]

    async def resolve(self, ref: Ref) -> None:
        if ref.base and ref.token:
            return
        obj = ref.raw
        if not _kobj.is_ready(obj):
            obj = (await self.get(ref.info.name)).raw
            ref.raw, ref.info = obj, _kobj.sandbox_info(obj)
        transport = await self._node_transport(_kobj.node_of(obj), ref.info.name)
        base = _kobj.data_plane_url(transport.scheme, obj)
        ref.token = await self._secret_token(obj["status"]["tokenSecretName"], "token",
                                             sandbox=ref.info.name)
        ref.http, ref.ssl = transport.http, transport.ssl
        ref.base = base

    async def run_target(self, template: str, workspace: Optional[str] = None) -> Any:
        """As KubeBackend.run_target."""
        from ._run import RunTarget, pick_node, run_token_secret

        try:
            obj = await self._do(self._co.get_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                                 self.namespace, _kobj.TEMPLATES, template,
                                 what=f"get SandboxTemplate {template}")
        except errors.NotFoundError as e:
            raise errors.TemplateNotFoundError(f"no SandboxTemplate {template}",
                                               reason="TemplateNotFound", status_code=404) from e
        only = node_workspace = None
        if workspace is not None:
            only, node_workspace = _workspace_obj.workspace_node(
                await self.get_workspace(workspace))
        node, endpoint, node_template = pick_node(obj, only)
        token = await self._secret_token(run_token_secret(obj), "run-token")
        transport = await self._node_transport(node, template)
        return RunTarget(base=f"{transport.scheme}://{endpoint}", node_template=node_template,
                         token=token, node_workspace=node_workspace, http=transport.http)

    async def _secret_token(self, secret: str, kind: str, sandbox: Optional[str] = None) -> str:
        s = await self._do(self._core.read_namespaced_secret, secret, self.namespace,
                           what=f"read {kind} Secret {secret}", sandbox=sandbox)
        return _kobj.token_from_secret(s.data, secret)

    async def _node_transport(self, node: str, sandbox: str) -> _http.NodeTransport:
        return _http.node_transport(await self._serving_ca(node, sandbox), self._transport,
                                    self._tls)

    async def _serving_ca(self, node: str, sandbox: str) -> Optional[str]:
        from kubernetes_asyncio.client.rest import ApiException

        try:
            lease = await self._coord.read_namespaced_lease(_kobj.lease_name(node), self._lease_ns)
        except ApiException as e:
            if e.status == 404:
                return None
            raise _kobj.lease_error(e, node, self._lease_ns, sandbox) from e
        return _kobj.serving_ca(lease.metadata.annotations if lease.metadata else None)

    async def set_suspend(self, ref: Ref, suspend: bool, *, timeout: float) -> Ref:
        """KubeBackend.set_suspend's twin."""
        await self.start()
        name = ref.info.name
        # A merge patch, said so: kubernetes_asyncio would send an object as
        # a JSON patch (the first type the custom-object API lists), which
        # kube-apiserver refuses (400); the sync client picks merge itself.
        patched = await self._do(self._co.patch_namespaced_custom_object, _kobj.GROUP,
                                 _kobj.VERSION, self.namespace, _kobj.SANDBOXES, name,
                                 _kobj.suspend_patch(suspend), what=f"patch Sandbox {name}",
                                 sandbox=name, _content_type="application/merge-patch+json")
        step = _kobj.SuspendStep(name, suspend)
        r, objs = await self._wait(step, _watchcache.by_name(name),
                                   _watchcache.min_rv_of(patched), timeout,
                                   field_selector=f"metadata.name={name}")
        if r is None:
            raise step.timeout(timeout, objs)
        fresh = self._ref(r)
        fresh.base, fresh.token, fresh.http, fresh.ssl, fresh.env = (
            ref.base, ref.token, ref.http, ref.ssl, ref.env)
        return fresh

    async def delete(self, name: str, *, wait: bool, timeout: float) -> None:
        gone = await self._delete(_kobj.SANDBOXES, name, "Background")
        if wait:
            r, objs = await self._wait(_kobj.none_left, _watchcache.by_name(name),
                                       _watchcache.min_rv_of(gone), timeout,
                                       field_selector=f"metadata.name={name}")
            if r is None:
                raise _kobj.timeout_error(f"Sandbox {name}: deletion", timeout, None,
                                          objs.get(name))

    async def sweep(self, selector: str, *, timeout: float) -> List[str]:
        objs, _ = await self._list(_kobj.SANDBOXES, label_selector=selector)
        for plural in (_kobj.FORKS, _kobj.SANDBOXES):
            await self._do(self._co.delete_collection_namespaced_custom_object, _kobj.GROUP,
                           _kobj.VERSION, self.namespace, plural, label_selector=selector,
                           propagation_policy="Background", what=f"delete {plural} -l {selector}")
        r, left = await self._wait(_kobj.none_left, _watchcache.by_labels(selector),
                                   _watchcache.min_rv_of_items(objs), timeout,
                                   label_selector=selector)
        if r is None:
            raise _kobj.sweep_timeout(selector, timeout, left)
        return sorted(objs)

    async def fork(self, ref: Ref, *, count: int, labels: Mapping[str, str],
                   ttl_seconds: Optional[int], timeout: float) -> List[Ref]:
        deadline = time.monotonic() + timeout
        kept: List[Ref] = []
        try:
            for _ in range(TOKEN_RETRIES + 1):
                kids = await self._fork_once(ref, count - len(kept), labels, ttl_seconds,
                                             max(0.1, deadline - time.monotonic()))
                for kid in kids:
                    try:
                        await self.resolve(kid)
                        await _kobj.check_token_async(self._http, kid)
                        kept.append(kid)
                    except errors.AuthError:
                        log.warning(REPLACED_MESSAGE, kid.info.name)
                        await self._delete(_kobj.SANDBOXES, kid.info.name, "Background")
                if len(kept) == count:
                    return kept
            raise errors.AuthError(f"{count - len(kept)} fork children refuse their own token",
                                   reason="TokenMismatch", sandbox=ref.info.name)
        except BaseException:
            for kid in kept:
                await asyncio.shield(self._delete(_kobj.SANDBOXES, kid.info.name, "Background"))
            raise

    async def _fork_once(self, ref: Ref, count: int, labels: Mapping[str, str],
                         ttl_seconds: Optional[int], timeout: float) -> List[Ref]:
        body = _kobj.fork_manifest(ref.raw, count=count, labels=labels, ttl_seconds=ttl_seconds)
        fork = await self._do(self._co.create_namespaced_custom_object, _kobj.GROUP,
                              _kobj.VERSION, self.namespace, _kobj.FORKS, body,
                              what="create SandboxFork", sandbox=ref.info.name)
        fname = _kobj.name_of(fork)
        step = _kobj.ChildrenStep(fname, count)
        sel = f"{FORK_OF}={fname}"
        try:
            r, objs = await self._wait(step, _watchcache.by_labels(sel),
                                       _watchcache.min_rv_of(fork), timeout, label_selector=sel)
            if r is None:
                try:
                    f = await self._do(self._co.get_namespaced_custom_object, _kobj.GROUP,
                                       _kobj.VERSION, self.namespace, _kobj.FORKS, fname)
                except errors.KubicleError:
                    f = None
                raise step.timeout(timeout, objs, f)
        except BaseException:
            await asyncio.shield(self._delete(_kobj.FORKS, fname, "Background"))
            raise
        await self._delete(_kobj.FORKS, fname, "Orphan")  # see _kube.py
        return [self._ref(c) for c in r]

    # --- Workspaces (AsyncKubicle.workspaces): KubeBackend's, awaited ------

    async def get_workspace(self, name: str) -> Dict[str, Any]:
        try:
            obj: Dict[str, Any] = await self._do(
                self._co.get_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                self.namespace, _kobj.WORKSPACES, name, what=f"get Workspace {name}")
        except errors.NotFoundError as e:
            raise _workspace_obj.not_found(name) from e
        return obj

    async def list_workspaces(self) -> List[Dict[str, Any]]:
        objs, _ = await self._list(_kobj.WORKSPACES)
        return [o for _, o in sorted(objs.items())]

    async def create_workspace(self, name: str, size_mib: int,
                               labels: Optional[Mapping[str, str]],
                               timeout: float) -> Dict[str, Any]:
        await self.start()
        body = _workspace_obj.manifest(namespace=self.namespace, name=name, size_mib=size_mib,
                                       labels=labels)
        try:
            await self._do(self._co.create_namespaced_custom_object, _kobj.GROUP, _kobj.VERSION,
                           self.namespace, _kobj.WORKSPACES, body, what=f"create Workspace {name}")
        except errors.ConflictError as e:
            if e.reason != "AlreadyExists":
                raise
            _workspace_obj.check_size(await self.get_workspace(name), size_mib)
            return await self._wait_ready_workspace(name, timeout)
        try:
            return await self._wait_ready_workspace(name, timeout)
        except BaseException:
            # Not a half-made disk left behind (a cancelled task included).
            await asyncio.shield(self._delete(_kobj.WORKSPACES, name, "Background"))
            raise

    async def delete_workspace(self, name: str, *, wait: bool, timeout: float) -> None:
        obj = await self.get_workspace(name)
        in_use = _workspace_obj.deletion_blocked(obj) or _workspace_obj.attached(obj)
        if in_use is not None:
            raise in_use
        if await self._delete(_kobj.WORKSPACES, name, "Background") is not None and wait:
            await self._wait_workspace(name, _workspace_obj.GoneStep(name), timeout)

    async def workspace_files(self, name: str, *, with_token: bool) -> _workspace_obj.FilesTarget:
        obj = await self.get_workspace(name)
        node, disk = _workspace_obj.workspace_node(obj)
        endpoint = _workspace_obj.endpoint_of(obj)
        token = ""
        if with_token:
            secret = _workspace_obj.token_secret_of(obj)
            try:
                token = await self._secret_token(secret, "workspace token")
            except errors.NotFoundError as e:
                raise _workspace_obj.missing_secret(name, secret) from e
        transport = await self._node_transport(node, name)
        return _workspace_obj.FilesTarget(scheme=transport.scheme, endpoint=endpoint, disk=disk,
                                          token=token, http=transport.http)

    async def _wait_ready_workspace(self, name: str, timeout: float) -> Dict[str, Any]:
        obj: Dict[str, Any] = await self._wait_workspace(name, _workspace_obj.ReadyStep(name),
                                                         timeout)
        return obj

    async def _wait_workspace(self, name: str, step: Any, timeout: float) -> Any:
        r, objs = await self._watch(_kobj.WORKSPACES, timeout, step,
                                    field_selector=f"metadata.name={name}")
        if r is None:
            raise step.timeout(timeout, objs)
        return r
