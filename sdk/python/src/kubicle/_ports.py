"""A guest's TCP port through the node's data plane (docs/api.md, "Ports"):
``GET <base>/ports/<port>`` with ``Upgrade: kubicle-tcp``, then the
connection carries the port's bytes. ``PortStream`` is that connection as a
socket-like object; ``PortForward`` listens on a local port and opens one
stream per local connection.

Raw sockets rather than httpx: httpx does not hand an upgraded connection
back. The answer head is read with a cap, as every boundary is."""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
from typing import Any, Callable, List, Optional, Tuple
from urllib.parse import urlsplit

from . import _wire, errors

_MAX_HEAD = 16 * 1024        # the answer's status line and fields
_MAX_ERROR_BODY = 64 * 1024  # a refusal's JSON
_CHUNK = 64 * 1024


def check_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an int from 1 to 65535, not {port!r}")
    return port


def _read_head(sock: socket.socket) -> Tuple[bytes, bytes]:
    """(head, bytes past it); ApiError past the cap or at an early end."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > _MAX_HEAD:
            raise errors.ApiError(f"the node's answer head exceeds {_MAX_HEAD} bytes",
                                  reason="BadResponse")
        got = sock.recv(4096)
        if not got:
            raise errors.ApiError("the node closed the connection before answering",
                                  reason="Unreachable")
        buf += got
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _status_and_length(head: bytes) -> Tuple[int, int]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise errors.ApiError(f"not an HTTP answer: {lines[0][:100]!r}", reason="BadResponse")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value.strip())
    return int(parts[1]), length


def node_address(base: str) -> Tuple[Any, str, int]:
    """The node a port stream goes to: (the parsed ``base``, host, port)."""
    u = urlsplit(base)
    return u, u.hostname or "", u.port or (443 if u.scheme == "https" else 80)


def upgrade_request(u: Any, port: int, token: str) -> bytes:
    """The request that turns the connection into a stream to ``port``."""
    host_field = u.netloc.rpartition("@")[2]
    return (f"GET {u.path}/ports/{port} HTTP/1.1\r\nHost: {host_field}\r\n"
            "Connection: Upgrade\r\nUpgrade: kubicle-tcp\r\n"
            f"Authorization: Bearer {token}\r\n\r\n").encode()


def refusal(status: int, body: bytes, sandbox: str) -> errors.KubicleError:
    """The node's answer other than 101, as the error to raise."""
    code, message = _wire.parse_error(body)
    return _wire.error_for(status, code, message, op="port", sandbox=sandbox)


def _refusal(sock: socket.socket, status: int, length: int, rest: bytes, *,
             sandbox: str) -> errors.KubicleError:
    body = rest
    want = min(length, _MAX_ERROR_BODY)
    while len(body) < want:
        got = sock.recv(want - len(body))
        if not got:
            break
        body += got
    return refusal(status, body[:want], sandbox)


def open_stream(base: str, token: str, port: int, *, ssl_context: Optional[ssl.SSLContext],
                timeout: Optional[float], sandbox: str) -> "PortStream":
    """Connects to the node at ``base`` (``<scheme>://<node>/v1/sandboxes/<id>``)
    and upgrades to a stream to the guest's ``port``."""
    check_port(port)
    u, host, node_port = node_address(base)
    try:
        sock = socket.create_connection((host, node_port), timeout=timeout)
    except OSError as e:
        raise errors.ApiError(f"cannot reach the node at {host}:{node_port}: {e}",
                              reason="Unreachable", sandbox=sandbox) from e
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if u.scheme == "https":
            sock = (ssl_context or ssl.create_default_context()).wrap_socket(
                sock, server_hostname=host)
        sock.sendall(upgrade_request(u, port, token))
        head, rest = _read_head(sock)
        status, length = _status_and_length(head)
        if status != 101:
            raise _refusal(sock, status, length, rest, sandbox=sandbox)
        sock.settimeout(None)
        return PortStream(sock, rest)
    except errors.KubicleError:   # PortError is an OSError too: as it is
        sock.close()
        raise
    except OSError as e:
        sock.close()
        raise errors.ApiError(f"port stream to {host}:{node_port}: {e}", reason="Unreachable",
                              sandbox=sandbox) from e
    except BaseException:
        sock.close()
        raise


class PortStream:
    """A connection to a guest's TCP port, used like a socket: ``sendall``,
    ``recv`` (``b""`` at the end), ``shutdown_write`` (plain http only: over
    TLS the node cannot pass a half-close on, so it raises
    UnsupportedError), ``close``; a context manager. ``socket`` is the
    underlying (possibly TLS) socket, for ``settimeout`` or selectors; read
    through ``recv`` first, which returns bytes the node sent with its
    answer."""

    def __init__(self, sock: socket.socket, early: bytes = b"") -> None:
        self.socket = sock
        self._early = early

    @property
    def tls(self) -> bool:
        return isinstance(self.socket, ssl.SSLSocket)

    def recv(self, n: int = _CHUNK) -> bytes:
        if self._early:
            out, self._early = self._early[:n], self._early[n:]
            return out
        return self.socket.recv(n)

    def pending(self) -> int:
        """Bytes readable now without waiting on the socket."""
        return len(self._early) + (self.socket.pending() if self.tls else 0)  # type: ignore[attr-defined]

    def send(self, data: bytes) -> int:
        return self.socket.send(data)

    def sendall(self, data: bytes) -> None:
        self.socket.sendall(data)

    def shutdown_write(self) -> None:
        if self.tls:
            raise errors.UnsupportedError("a port stream over TLS cannot be half-closed; close it")
        self.socket.shutdown(socket.SHUT_WR)

    def settimeout(self, seconds: Optional[float]) -> None:
        self.socket.settimeout(seconds)

    def fileno(self) -> int:
        return self.socket.fileno()

    def close(self) -> None:
        self.socket.close()

    def __enter__(self) -> "PortStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_AGAIN = object()   # a non-blocking call that would have blocked
_FAILED = object()  # the connection broke


def _attempt(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return _AGAIN
    except OSError:
        return _FAILED


class _Interest:
    """Keeps a selector's registrations equal to what each socket waits for."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()

    def set(self, sock: socket.socket, mask: int) -> None:
        try:
            key = self.sel.get_key(sock)
        except KeyError:
            key = None
        if mask == 0:
            if key:
                self.sel.unregister(sock)
        elif key is None:
            self.sel.register(sock, mask)
        elif key.events != mask:
            self.sel.modify(sock, mask)


def relay(local: socket.socket, stream: PortStream) -> None:
    """Moves bytes both ways between ``local`` and ``stream`` until both
    sides ended or one failed, then closes both. One thread and a selector:
    an SSL socket must not be read and written from two threads at once.
    At most one chunk per direction is held. An end on one side is passed
    on as a half-close (over TLS: ends both, as the node does)."""
    remote = stream.socket
    local.setblocking(False)
    remote.setblocking(False)
    up, down = b"", b""                # local -> guest, guest -> local
    up_open, down_open = True, True    # each side's sending direction
    interest = _Interest()
    R, W = selectors.EVENT_READ, selectors.EVENT_WRITE
    try:
        while up_open or up or down_open or down:
            interest.set(local, (R if up_open and not up else 0) | (W if down else 0))
            interest.set(remote, (R if down_open and not down else 0) | (W if up else 0))
            if down_open and not down and stream.pending():
                ready = {remote: R}    # TLS or early bytes: readable without the socket
            else:
                ready = {k.fileobj: m for k, m in interest.sel.select()}
            if ready.get(local, 0) & R:
                got = _attempt(lambda: local.recv(_CHUNK))
                if got is _FAILED:
                    return
                if got == b"":
                    up_open = False
                    if stream.tls or _attempt(lambda: remote.shutdown(socket.SHUT_WR)) is _FAILED:
                        return
                elif got is not _AGAIN:
                    up = got
            if ready.get(remote, 0) & R:
                got = _attempt(lambda: stream.recv(_CHUNK))
                if got is _FAILED:
                    return
                if got == b"":
                    down_open = False
                    if _attempt(lambda: local.shutdown(socket.SHUT_WR)) is _FAILED:
                        return
                elif got is not _AGAIN:
                    down = got
            if up and ready.get(remote, 0) & W:
                n = _attempt(lambda: remote.send(up))
                if n is _FAILED:
                    return
                if n is not _AGAIN:
                    up = up[n:]
            if down and ready.get(local, 0) & W:
                n = _attempt(lambda: local.send(down))
                if n is _FAILED:
                    return
                if n is not _AGAIN:
                    down = down[n:]
    finally:
        interest.sel.close()
        local.close()
        stream.close()


class PortForward:
    """A local listener (``127.0.0.1:<local_port>``; 0 picks one, see
    ``local_port``) whose every connection is relayed to a new stream to
    the guest's port, on a thread of its own. A context manager: ``close``
    stops listening and ends the open relays. A connection whose stream
    is refused (no network, nothing listening, budget) is closed, and the
    error is kept in ``errors`` (the last 16)."""

    def __init__(self, open_stream: Callable[[], PortStream], local_port: int = 0,
                 host: str = "127.0.0.1") -> None:
        self._open = open_stream
        self._listener = socket.create_server((host, local_port))
        self.local_port: int = self._listener.getsockname()[1]
        self.errors: List[BaseException] = []
        self._lock = threading.Lock()
        self._open_socks: List[socket.socket] = []   # local ends and streams, to end on close
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="kubicle-port-forward",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> Tuple[str, int]:
        return self._listener.getsockname()[:2]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return   # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        mine = [conn]
        if not self._track(conn):
            conn.close()
            return
        try:
            try:
                stream = self._open()
            except Exception as e:   # kept for the caller; the local client sees a close
                with self._lock:
                    self.errors = (self.errors + [e])[-16:]
                conn.close()
                return
            mine.append(stream.socket)
            if not self._track(stream.socket):
                stream.close()
                conn.close()
                return
            relay(conn, stream)
        finally:
            with self._lock:
                self._open_socks = [s for s in self._open_socks if all(s is not m for m in mine)]

    def _track(self, sock: socket.socket) -> bool:
        """Remembers `sock` for close(); False once closed."""
        with self._lock:
            if self._closed:
                return False
            self._open_socks.append(sock)
            return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._open_socks = self._open_socks, []
        # shutdown() wakes accept() and the relays' selectors; close() alone may not.
        for s in [self._listener] + socks:
            try:
                # socket.socket's own shutdown: an SSLSocket's would drop its
                # SSL object under the relay thread.
                socket.socket.shutdown(s, socket.SHUT_RDWR)
            except OSError:
                pass
        self._listener.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "PortForward":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
