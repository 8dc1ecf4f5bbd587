"""The asyncio twin of ``_ports``: a port stream as an asyncio
(StreamReader, StreamWriter) pair, and a local listener that forwards to
new streams, on the caller's event loop."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Awaitable, Callable, List, Optional, Set, Tuple

from . import _ports, errors

Stream = Tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_stream(base: str, token: str, port: int, *, ssl_context: Optional[ssl.SSLContext],
                      timeout: Optional[float], sandbox: str) -> Stream:
    """Like ``_ports.open_stream``; the stream is (reader, writer), and
    ``reader.at_eof()`` after the guest's end."""
    _ports.check_port(port)
    u, host, node_port = _ports.node_address(base)
    tls = (ssl_context or ssl.create_default_context()) if u.scheme == "https" else None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, node_port, ssl=tls,
                                    server_hostname=host if tls else None), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        raise errors.ApiError(f"cannot reach the node at {host}:{node_port}: {e!r}",
                              reason="Unreachable", sandbox=sandbox) from e
    try:
        writer.write(_ports.upgrade_request(u, port, token))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        if len(head) > _ports._MAX_HEAD:
            raise errors.ApiError(f"the node's answer head exceeds {_ports._MAX_HEAD} bytes",
                                  reason="BadResponse", sandbox=sandbox)
        status, length = _ports._status_and_length(head[:-4])
        if status != 101:
            body = b""
            want = min(length, _ports._MAX_ERROR_BODY)
            while len(body) < want:
                got = await asyncio.wait_for(reader.read(want - len(body)), timeout)
                if not got:
                    break
                body += got
            raise _ports.refusal(status, body, sandbox)
        return reader, writer
    except errors.KubicleError:
        writer.close()
        raise
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError,
            asyncio.LimitOverrunError) as e:
        writer.close()
        raise errors.ApiError(f"port stream to {host}:{node_port}: {e!r}", reason="Unreachable",
                              sandbox=sandbox) from e


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One direction until its end, passed on as a half-close where the
    transport can (plain TCP); a TLS side is closed instead, which ends the
    other direction too."""
    try:
        while True:
            data = await reader.read(_ports._CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        else:
            writer.close()
    except (OSError, asyncio.IncompleteReadError):
        writer.close()


async def relay(local: Stream, remote: Stream) -> None:
    """Both ways until both ended, then both closed."""
    try:
        await asyncio.gather(_pipe(local[0], remote[1]), _pipe(remote[0], local[1]))
    finally:
        for w in (local[1], remote[1]):
            w.close()


class AsyncPortForward:
    """PortForward's twin on the event loop: ``async with await
    sb.forward_port(3000) as fwd:``; ``local_port``, ``errors`` and
    ``close()`` as there."""

    def __init__(self, open_stream: Callable[[], Awaitable[Stream]], local_port: int = 0,
                 host: str = "127.0.0.1") -> None:
        self._open, self._host, self._want_port = open_stream, host, local_port
        self._server: Optional[asyncio.AbstractServer] = None
        self._tasks: Set[asyncio.Task] = set()
        self.local_port = 0
        self.errors: List[BaseException] = []

    async def start(self) -> "AsyncPortForward":
        self._server = await asyncio.start_server(self._serve, self._host, self._want_port)
        self.local_port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task:
            self._tasks.add(task)
        try:
            try:
                remote = await self._open()
            except Exception as e:   # kept for the caller; the local client sees a close
                self.errors = (self.errors + [e])[-16:]
                writer.close()
                return
            await relay((reader, writer), remote)
        finally:
            if task:
                self._tasks.discard(task)

    async def close(self) -> None:
        if self._server:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server:
            await self._server.wait_closed()

    async def __aenter__(self) -> "AsyncPortForward":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
