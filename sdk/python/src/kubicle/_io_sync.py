"""The threaded client's transport: the I/O steps the core's operations
yield (``_sansio.py``), each one blocking call of httpx, the ``kubernetes``
package or the clock. No decisions here: what to send, what an answer
means and what comes next are the core's."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Iterator, Optional, Tuple

import httpx

from . import _http, _kobj, _kube, _watchcache
from ._sansio import Call


class SyncIO:
    """``http`` is the client's pooled httpx.Client; ``request``'s ``http``
    argument, when not None, is a sandbox node's own (``_http.TlsPool``)."""

    make_client = staticmethod(_http.sync_client)

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.apis: Dict[str, Any] = {}
        self._watcher: Optional[_watchcache.SyncWatcher] = None
        self._watcher_lock = threading.Lock()

    # --- HTTP ---------------------------------------------------------------
    def request(self, http: Optional[httpx.Client], method: str, url: str,
                **kw: Any) -> httpx.Response:
        return (http or self.http).request(method, url, **kw)

    def open_stream(self, http: Optional[httpx.Client], method: str, url: str,
                    **kw: Any) -> Tuple[Any, httpx.Response]:
        cm = (http or self.http).stream(method, url, **kw)
        return cm, cm.__enter__()

    def close_stream(self, stream: Tuple[Any, httpx.Response]) -> None:
        stream[0].__exit__(None, None, None)

    def read_body(self, resp: httpx.Response) -> bytes:
        return resp.read()

    def lines(self, resp: httpx.Response) -> Iterator[str]:
        return resp.iter_lines()

    def chunks(self, resp: httpx.Response, size: int) -> Iterator[bytes]:
        return resp.iter_bytes(size)

    def next(self, it: Iterator[Any]) -> Any:
        return next(it, None)

    def settle(self, pending: Any) -> None:
        """A sync client does not await what a callback returned."""

    def close_http(self, http: httpx.Client) -> None:
        http.close()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    # --- Kubernetes ---------------------------------------------------------
    def kube_lib(self) -> _kube.KubeLib:
        return _kube.KubeLib("kubernetes")

    def load_kube_config(self, lib: _kube.KubeLib, **kw: Any) -> None:
        lib.config.load_kube_config(**kw)

    def connect_kube(self, lib: _kube.KubeLib, cfg: Any) -> None:
        self.apis = lib.apis(cfg)

    def kube(self, api: str, method: str, *args: Any, what: str = "",
             sandbox: Optional[str] = None, **kw: Any) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return getattr(self.apis[api], method)(*args, **kw)
        except ApiException as e:
            raise _kobj.api_error(e, what=what, sandbox=sandbox) from e

    def watch(self, args: Tuple[Any, ...], kw: Dict[str, Any], what: str,
              holder: Any = None) -> Iterator[Dict[str, Any]]:
        """The events of one watch request (list_namespaced_custom_object
        with ``args`` and ``kw``); ``holder.stopper`` can end it from
        another thread."""
        from kubernetes import watch
        from kubernetes.client.rest import ApiException
        from urllib3.exceptions import HTTPError

        w = watch.Watch()
        if holder is not None:
            holder.stopper = w
        try:
            yield from w.stream(self.apis["co"].list_namespaced_custom_object, *args, **kw)
        except ApiException as e:
            raise _kobj.api_error(e, what=what) from e
        except HTTPError as e:
            raise _kobj.StreamBroken(str(e)) from e
        finally:
            w.stop()

    def close_watch(self, it: Any) -> None:
        it.close()

    def wait(self, namespace: str, step: Any, select: Any, min_rv: int, timeout: float) -> Any:
        """On the namespace's shared watch (``_watchcache.py``), started on
        first use."""
        with self._watcher_lock:
            if self._watcher is None:
                self._watcher = _watchcache.SyncWatcher(
                    lambda: _kobj.items_and_rv(self._do(_kobj.list_call(namespace))),
                    lambda rv, seconds, holder: self._do(
                        _kobj.watch_call(namespace, rv, seconds), holder=holder))
        return self._watcher.wait(step, select, min_rv, timeout)

    def _do(self, c: Call, **extra: Any) -> Any:
        return getattr(self, c.name)(*c.args, **c.kw, **extra)

    def close_kube(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
        if self.apis:
            self.apis["api"].close()
