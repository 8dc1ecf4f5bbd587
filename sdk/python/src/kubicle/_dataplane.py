"""One sandbox's data plane (exec, files, stat, listing) over httpx, sync
and async. ``base`` is ``<scheme>://<node>/v1/sandboxes/<id>``; the token is the
sandbox's own (or a standalone node's admin token)."""

from __future__ import annotations

import os
from typing import IO, Any, AsyncIterator, Dict, Iterable, Iterator, List, Optional, Union

import httpx

from . import _http, _wire, errors
from .models import EntryInfo, ExecResult, FileInfo

Content = Union[bytes, str, IO[bytes], Iterable[bytes]]
_CHUNK = 64 * 1024


def _content(data: Content) -> Any:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        f = data

        def chunks() -> Iterator[bytes]:
            while True:
                b = f.read(_CHUNK)  # type: ignore[union-attr]
                if not b:
                    return
                yield b if isinstance(b, bytes) else str(b).encode()
        return chunks()
    return data  # an iterable of bytes: sent chunked


def _headers(token: str, data: Content) -> Dict[str, str]:
    h = _http.auth(token)
    # A real file's size is known: send Content-Length rather than chunks.
    if hasattr(data, "fileno") and hasattr(data, "tell"):
        try:
            size = os.fstat(data.fileno()).st_size - data.tell()  # type: ignore[union-attr]
            h["Content-Length"] = str(size)
        except (OSError, ValueError):
            pass
    return h


class DataPlane:
    def __init__(self, http: httpx.Client, base: str, token: str, sandbox: str) -> None:
        self._http, self._base, self._token, self._sandbox = http, base, token, sandbox

    def _call(self, method: str, suffix: str, op: str, **kw: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, self._base + suffix,
                                      headers=kw.pop("headers", None) or _http.auth(self._token), **kw)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op=op, sandbox=self._sandbox) from e
        _http.raise_for(resp, resp.content, op=op, sandbox=self._sandbox)
        return resp

    def exec(self, body: Dict[str, Any], stream: Optional[_wire.ExecStream]) -> ExecResult:
        timeout = httpx.Timeout(self._http.timeout.connect, read=body["timeoutSeconds"] +
                                _wire.EXEC_GRACE_SECONDS)
        if stream is None:
            resp = self._call("POST", "/exec", "exec", json=body, timeout=timeout)
            return _wire.exec_result(resp.json())
        try:
            with self._http.stream("POST", self._base + "/exec", params={"stream": "true"},
                                   json=body, headers=_http.auth(self._token),
                                   timeout=timeout) as resp:
                if resp.status_code >= 400:
                    _http.raise_for(resp, resp.read(), op="exec", sandbox=self._sandbox)
                for line in resp.iter_lines():
                    stream.feed(line)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op="exec", sandbox=self._sandbox) from e
        return stream.finish()

    def write(self, path: str, data: Content, mode: Optional[int]) -> Dict[str, Any]:
        params = {"path": _wire.check_path(path)}
        m = _wire.file_mode(mode)
        if m:
            params["mode"] = m
        resp = self._call("PUT", "/files", "write", params=params, content=_content(data),
                          headers=_headers(self._token, data))
        return dict(resp.json())

    def read(self, path: str) -> bytes:
        return self._call("GET", "/files", "read", params={"path": _wire.check_path(path)}).content

    def read_stream(self, path: str) -> Iterator[bytes]:
        try:
            with self._http.stream("GET", self._base + "/files",
                                   params={"path": _wire.check_path(path)},
                                   headers=_http.auth(self._token)) as resp:
                if resp.status_code >= 400:
                    _http.raise_for(resp, resp.read(), op="read", sandbox=self._sandbox)
                yield from resp.iter_bytes(_CHUNK)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op="read", sandbox=self._sandbox) from e

    def stat(self, path: str) -> FileInfo:
        resp = self._call("GET", "/stat", "stat", params={"path": _wire.check_path(path)})
        return _wire.file_info(resp.json())

    def exists(self, path: str) -> bool:
        try:
            self._call("GET", "/stat", "exists", params={"path": _wire.check_path(path)})
        except errors.PathNotFoundError:
            return False
        return True

    def list(self, path: str) -> List[EntryInfo]:
        resp = self._call("GET", "/ls", "list", params={"path": _wire.check_path(path)})
        return _wire.entries(resp.json())

    def remove(self, path: str, recursive: bool) -> None:
        self._call("DELETE", "/files", "remove", params=_wire.remove_params(path, recursive))


async def _aiter(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for c in chunks:
        yield c


class AsyncDataPlane:
    def __init__(self, http: httpx.AsyncClient, base: str, token: str, sandbox: str) -> None:
        self._http, self._base, self._token, self._sandbox = http, base, token, sandbox

    async def _call(self, method: str, suffix: str, op: str, **kw: Any) -> httpx.Response:
        try:
            resp = await self._http.request(method, self._base + suffix,
                                            headers=kw.pop("headers", None) or _http.auth(self._token),
                                            **kw)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op=op, sandbox=self._sandbox) from e
        _http.raise_for(resp, resp.content, op=op, sandbox=self._sandbox)
        return resp

    async def exec(self, body: Dict[str, Any], stream: Optional[_wire.ExecStream]) -> ExecResult:
        timeout = httpx.Timeout(self._http.timeout.connect, read=body["timeoutSeconds"] +
                                _wire.EXEC_GRACE_SECONDS)
        if stream is None:
            resp = await self._call("POST", "/exec", "exec", json=body, timeout=timeout)
            return _wire.exec_result(resp.json())
        try:
            async with self._http.stream("POST", self._base + "/exec", params={"stream": "true"},
                                         json=body, headers=_http.auth(self._token),
                                         timeout=timeout) as resp:
                if resp.status_code >= 400:
                    _http.raise_for(resp, await resp.aread(), op="exec", sandbox=self._sandbox)
                async for line in resp.aiter_lines():
                    stream.feed(line)
                    while stream.pending:
                        await stream.pending.pop(0)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op="exec", sandbox=self._sandbox) from e
        return stream.finish()

    async def write(self, path: str, data: Any, mode: Optional[int]) -> Dict[str, Any]:
        params = {"path": _wire.check_path(path)}
        m = _wire.file_mode(mode)
        if m:
            params["mode"] = m
        content: Any = data
        if not hasattr(data, "__aiter__"):
            content = _content(data)
            if not isinstance(content, bytes):
                content = _aiter(content)
        resp = await self._call("PUT", "/files", "write", params=params, content=content,
                                headers=_headers(self._token, data))
        return dict(resp.json())

    async def read(self, path: str) -> bytes:
        resp = await self._call("GET", "/files", "read", params={"path": _wire.check_path(path)})
        return resp.content

    async def read_stream(self, path: str) -> AsyncIterator[bytes]:
        try:
            async with self._http.stream("GET", self._base + "/files",
                                         params={"path": _wire.check_path(path)},
                                         headers=_http.auth(self._token)) as resp:
                if resp.status_code >= 400:
                    _http.raise_for(resp, await resp.aread(), op="read", sandbox=self._sandbox)
                async for chunk in resp.aiter_bytes(_CHUNK):
                    yield chunk
        except httpx.TransportError as e:
            raise _http.transport_error(e, op="read", sandbox=self._sandbox) from e

    async def stat(self, path: str) -> FileInfo:
        resp = await self._call("GET", "/stat", "stat", params={"path": _wire.check_path(path)})
        return _wire.file_info(resp.json())

    async def exists(self, path: str) -> bool:
        try:
            await self._call("GET", "/stat", "exists", params={"path": _wire.check_path(path)})
        except errors.PathNotFoundError:
            return False
        return True

    async def list(self, path: str) -> List[EntryInfo]:
        resp = await self._call("GET", "/ls", "list", params={"path": _wire.check_path(path)})
        return _wire.entries(resp.json())

    async def remove(self, path: str, recursive: bool) -> None:
        await self._call("DELETE", "/files", "remove", params=_wire.remove_params(path, recursive))
