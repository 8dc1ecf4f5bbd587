"""The asyncio client's transport: the I/O steps the core's operations
yield (``_sansio.py``) as coroutines over httpx.AsyncClient,
``kubernetes_asyncio`` and the event loop's clock, so hundreds of waits
share one loop. Like ``_io_sync.py``, it decides nothing."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, Optional, Tuple

import httpx

from . import _http, _kobj, _kube, _watchcache
from ._sansio import Call


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


async def _aiter(chunks: Any) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c


class AsyncIO:
    """As SyncIO, awaited."""

    make_client = staticmethod(_http.async_client)

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.apis: Dict[str, Any] = {}
        self._watcher: Optional[_watchcache.AsyncWatcher] = None

    # --- HTTP ---------------------------------------------------------------
    async def request(self, http: Optional[httpx.AsyncClient], method: str, url: str,
                      **kw: Any) -> httpx.Response:
        content = kw.get("content")
        if content is not None and not isinstance(content, bytes) and \
                not hasattr(content, "__aiter__"):
            kw["content"] = _aiter(content)  # an iterable of bytes, sent chunked
        return await (http or self.http).request(method, url, **kw)

    async def open_stream(self, http: Optional[httpx.AsyncClient], method: str, url: str,
                          **kw: Any) -> Tuple[Any, httpx.Response]:
        cm = (http or self.http).stream(method, url, **kw)
        return cm, await cm.__aenter__()

    async def close_stream(self, stream: Tuple[Any, httpx.Response]) -> None:
        await stream[0].__aexit__(None, None, None)

    async def read_body(self, resp: httpx.Response) -> bytes:
        return await resp.aread()

    def lines(self, resp: httpx.Response) -> AsyncIterator[str]:
        return resp.aiter_lines()

    def chunks(self, resp: httpx.Response, size: int) -> AsyncIterator[bytes]:
        return resp.aiter_bytes(size)

    async def next(self, it: AsyncIterator[Any]) -> Any:
        try:
            return await it.__anext__()
        except StopAsyncIteration:
            return None

    async def settle(self, pending: Any) -> None:
        await pending  # what an async output callback returned

    async def close_http(self, http: httpx.AsyncClient) -> None:
        await http.aclose()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    # --- Kubernetes ---------------------------------------------------------
    def kube_lib(self) -> _kube.KubeLib:
        return _kube.KubeLib("kubernetes_asyncio")

    async def load_kube_config(self, lib: _kube.KubeLib, **kw: Any) -> None:
        await lib.config.load_kube_config(**kw)

    def connect_kube(self, lib: _kube.KubeLib, cfg: Any) -> None:
        self.apis = lib.apis(cfg)

    async def kube(self, api: str, method: str, *args: Any, what: str = "",
                   sandbox: Optional[str] = None, **kw: Any) -> Any:
        from kubernetes_asyncio.client.rest import ApiException

        try:
            return await getattr(self.apis[api], method)(*args, **kw)
        except ApiException as e:
            raise _kobj.api_error(e, what=what, sandbox=sandbox) from e

    async def watch(self, args: Tuple[Any, ...], kw: Dict[str, Any],
                    what: str) -> AsyncIterator[Dict[str, Any]]:
        from aiohttp import ClientError
        from kubernetes_asyncio.client.rest import ApiException

        w = _shared_watch(self.apis["api"])
        try:
            async for ev in w.stream(self.apis["co"].list_namespaced_custom_object, *args, **kw):
                yield ev
        except ApiException as e:
            raise _kobj.api_error(e, what=what) from e
        except (ClientError, asyncio.TimeoutError) as e:
            raise _kobj.StreamBroken(repr(e)) from e
        finally:
            await w.close()

    async def close_watch(self, it: Any) -> None:
        await it.aclose()

    async def wait(self, namespace: str, step: Any, select: Any, min_rv: int,
                   timeout: float) -> Any:
        if self._watcher is None:
            self._watcher = _watchcache.AsyncWatcher(self._list_all(namespace),
                                                     self._watch_all(namespace))
        return await self._watcher.wait(step, select, min_rv, timeout)

    def _list_all(self, namespace: str) -> Any:
        async def lister() -> Any:
            return _kobj.items_and_rv(await self._do(_kobj.list_call(namespace)))
        return lister

    def _watch_all(self, namespace: str) -> Any:
        return lambda rv, seconds: self._do(_kobj.watch_call(namespace, rv, seconds))

    def _do(self, c: Call) -> Any:
        return getattr(self, c.name)(*c.args, **c.kw)

    async def close_kube(self) -> None:
        if self._watcher is not None:
            await self._watcher.close()
        if self.apis:
            await self.apis["api"].close()
            self.apis = {}
