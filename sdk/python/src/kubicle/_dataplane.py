"""One sandbox's data plane (exec, files, stat, listing), once for both
clients: each call is an operation of the core (``_sansio.py``); a read
stream is one that emits its chunks. ``base`` is
``<scheme>://<node>/v1/sandboxes/<id>`` (or a workspace's
``.../v1/workspaces/<disk>``); the token is the sandbox's own (or a
standalone node's admin token)."""

from __future__ import annotations

import os
from typing import IO, Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import httpx

from . import _http, _wire, errors
from ._sansio import Emit, Op, call
from .models import EntryInfo, ExecResult, FileInfo

Content = Union[bytes, str, IO[bytes], Iterable[bytes]]
_CHUNK = 64 * 1024


def _content(data: Any) -> Any:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "__aiter__"):
        return data  # the asyncio client's: sent chunked as it is
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


def _headers(token: str, data: Any) -> Dict[str, str]:
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
    """``http`` is the pooled client verifying the node (None: the
    client's own); ``connect_timeout`` the client's request timeout, which
    long calls keep for connecting."""

    def __init__(self, http: Any, base: str, token: str, sandbox: str,
                 connect_timeout: float) -> None:
        self._http, self._base, self._token, self._sandbox = http, base, token, sandbox
        self._connect = connect_timeout

    def _call(self, method: str, suffix: str, op: str, **kw: Any) -> Op[httpx.Response]:
        headers = kw.pop("headers", None) or _http.auth(self._token)
        return (yield from _http.send(self._http, method, self._base + suffix, op=op,
                                      sandbox=self._sandbox, headers=headers, **kw))

    def _open(self, method: str, suffix: str, op: str, **kw: Any) -> Op[Tuple[Any, Any]]:
        """A streamed answer (the transport's handle, the response); an
        error answer is read whole and raised."""
        stream = yield call("open_stream", self._http, method, self._base + suffix,
                            headers=_http.auth(self._token), **kw)
        resp = stream[1]
        if resp.status_code >= 400:
            try:
                body = yield call("read_body", resp)
            finally:
                yield call("close_stream", stream)
            _http.raise_for(resp, body, op=op, sandbox=self._sandbox)
        return stream

    def exec(self, body: Dict[str, Any], stream: Optional[_wire.ExecStream]) -> Op[ExecResult]:
        timeout = httpx.Timeout(self._connect, read=body["timeoutSeconds"] +
                                _wire.EXEC_GRACE_SECONDS)
        if stream is None:
            resp = yield from self._call("POST", "/exec", "exec", json=body, timeout=timeout)
            return _wire.exec_result(resp.json())
        try:
            opened = yield from self._open("POST", "/exec", "exec", params={"stream": "true"},
                                           json=body, timeout=timeout)
            try:
                lines = yield call("lines", opened[1])
                while True:
                    line = yield call("next", lines)
                    if line is None:
                        break
                    stream.feed(line)
                    while stream.pending:  # an async callback's coroutine
                        yield call("settle", stream.pending.pop(0))
            finally:
                yield call("close_stream", opened)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op="exec", sandbox=self._sandbox) from e
        return stream.finish()

    def write(self, path: str, data: Any, mode: Optional[int]) -> Op[Dict[str, Any]]:
        params = {"path": _wire.check_path(path)}
        m = _wire.file_mode(mode)
        if m:
            params["mode"] = m
        resp = yield from self._call("PUT", "/files", "write", params=params,
                                     content=_content(data), headers=_headers(self._token, data))
        return dict(resp.json())

    def read(self, path: str) -> Op[bytes]:
        resp = yield from self._call("GET", "/files", "read",
                                     params={"path": _wire.check_path(path)})
        return resp.content

    def read_stream(self, path: str) -> Op[None]:
        """Emits the file's chunks as they come, never holding it whole."""
        try:
            opened = yield from self._open("GET", "/files", "read",
                                           params={"path": _wire.check_path(path)})
            try:
                chunks = yield call("chunks", opened[1], _CHUNK)
                while True:
                    chunk = yield call("next", chunks)
                    if chunk is None:
                        return
                    yield Emit(chunk)
            finally:
                yield call("close_stream", opened)
        except httpx.TransportError as e:
            raise _http.transport_error(e, op="read", sandbox=self._sandbox) from e

    def stat(self, path: str) -> Op[FileInfo]:
        resp = yield from self._call("GET", "/stat", "stat",
                                     params={"path": _wire.check_path(path)})
        return _wire.file_info(resp.json())

    def exists(self, path: str) -> Op[bool]:
        try:
            yield from self._call("GET", "/stat", "exists",
                                  params={"path": _wire.check_path(path)})
        except errors.PathNotFoundError:
            return False
        return True

    def list(self, path: str) -> Op[List[EntryInfo]]:
        resp = yield from self._call("GET", "/ls", "list", params={"path": _wire.check_path(path)})
        return _wire.entries(resp.json())

    def remove(self, path: str, recursive: bool) -> Op[None]:
        yield from self._call("DELETE", "/files", "remove",
                              params=_wire.remove_params(path, recursive))
