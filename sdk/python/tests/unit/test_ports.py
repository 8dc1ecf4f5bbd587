"""Sandbox.connect_port and forward_port against the fake node, whose
guest ports are listeners of the test's own on 127.0.0.1 (FakeSandbox.ports)."""

import asyncio
import socket
import ssl
import threading
import urllib.request

import pytest

import kubicle
from kubicle import _ports, errors

from fake_node import FakeNode
from tls_certs import make_ca, serving_pair


class Guest:
    """A listener standing in for a server in the guest; `serve(conn)` runs
    per connection on a thread of its own."""

    def __init__(self, serve):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._serve = serve
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.settimeout(10)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn):
        with conn:
            self._serve(conn)

    def close(self):
        self.sock.close()


def echo(conn):
    while True:
        data = conn.recv(65536)
        if not data:
            conn.shutdown(socket.SHUT_WR)
            return
        conn.sendall(data)


def read_to_end(s):
    out = b""
    while True:
        got = s.recv(65536)
        if not got:
            return out
        out += got


@pytest.fixture
def guest():
    g = Guest(echo)
    yield g
    g.close()


def attach(node, sb, guest_port, local):
    node.sandboxes[sb.id].ports[guest_port] = local


def test_connect_port_carries_bytes_both_ways_and_half_closes(standalone, node, guest):
    sb = standalone.sandboxes.create("tg")
    attach(node, sb, 3000, guest.port)
    with sb.connect_port(3000) as s:
        assert isinstance(s, kubicle.PortStream) and not s.tls
        s.sendall(b"hello")
        assert s.recv(5) == b"hello"
        big = bytes(range(256)) * 4096   # 1 MiB
        s.sendall(big)
        s.shutdown_write()               # the guest sees the end, and answers it
        assert read_to_end(s) == big
    method, path, _ = node.requests[-1]
    assert (method, path) == ("GET", f"/v1/sandboxes/{sb.id}/ports/3000")


def test_connect_port_uses_the_sandboxs_own_token(standalone, node, guest):
    sb = standalone.sandboxes.create("tg")
    attach(node, sb, 8080, guest.port)
    node.admin_token = "changed"         # only the sandbox's token can work now
    with sb.connect_port(8080) as s:
        s.sendall(b"x")
        assert s.recv(1) == b"x"


def test_connect_port_errors(standalone, node):
    sb = standalone.sandboxes.create("tg")
    with pytest.raises(errors.PortError) as e:
        sb.connect_port(3000)            # nothing listens there
    assert e.value.status_code == 502 and e.value.reason == "PortRefused"
    assert "3000" in e.value.message
    node.sandboxes[sb.id].network = False
    with pytest.raises(errors.PortError) as e:
        sb.connect_port(3000)
    assert e.value.status_code == 409 and e.value.reason == "NoNetwork"
    for bad in (0, 65536, -1, "3000", True, 3.0):
        with pytest.raises(ValueError):
            sb.connect_port(bad)
    node.sandboxes[sb.id].token = "rotated"
    sb._ref.token = "stale"
    with pytest.raises(errors.AuthError):
        sb.connect_port(3000)


def test_forward_port_serves_local_clients(standalone, node):
    def http_server(conn):
        req = b""
        while b"\r\n\r\n" not in req:
            got = conn.recv(4096)
            if not got:
                return
            req += got
        body = b"dev server says hi"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                     % (len(body), body))

    g = Guest(http_server)
    try:
        sb = standalone.sandboxes.create("tg")
        attach(node, sb, 3000, g.port)
        with sb.forward_port(3000) as fwd:
            assert fwd.local_port > 0
            for _ in range(3):           # one stream per local connection
                url = f"http://127.0.0.1:{fwd.local_port}/"
                with urllib.request.urlopen(url, timeout=10) as r:
                    assert r.read() == b"dev server says hi"
            assert g.accepted == 3
            assert fwd.errors == []
    finally:
        g.close()


def test_forward_port_closes_a_refused_connection_and_keeps_the_error(standalone, node):
    sb = standalone.sandboxes.create("tg")
    with sb.forward_port(3000) as fwd:   # nothing listens on the guest's 3000
        with socket.create_connection(("127.0.0.1", fwd.local_port), timeout=10) as c:
            assert c.recv(10) == b""
        for _ in range(200):
            if fwd.errors:
                break
            threading.Event().wait(0.01)
        assert fwd.errors and isinstance(fwd.errors[0], errors.PortError)
    # Closed: nothing listens locally any more.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", fwd.local_port), timeout=2)


def test_forward_port_close_ends_open_relays(standalone, node, guest):
    sb = standalone.sandboxes.create("tg")
    attach(node, sb, 3000, guest.port)
    fwd = sb.forward_port(3000)
    c = socket.create_connection(("127.0.0.1", fwd.local_port), timeout=10)
    c.sendall(b"ping")
    assert c.recv(4) == b"ping"
    fwd.close()
    assert read_to_end(c) == b""
    c.close()


@pytest.fixture
def tls_node(tmp_path):
    ca = make_ca()
    n = FakeNode(tls=serving_pair(str(tmp_path), ca))
    n.ca_file = str(tmp_path / "ca.pem")
    with open(n.ca_file, "w") as f:
        f.write(ca.pem)
    yield n
    n.close()


def test_ports_over_tls_verify_the_node(tls_node, guest, tmp_path):
    with kubicle.Kubicle(node_url=tls_node.url, token=tls_node.admin_token,
                         verify=tls_node.ca_file) as k:
        sb = k.sandboxes.create("tg")
        attach(tls_node, sb, 3000, guest.port)
        with sb.connect_port(3000) as s:
            assert s.tls
            s.sendall(b"over tls")
            assert s.recv(8) == b"over tls"
            with pytest.raises(errors.UnsupportedError):
                s.shutdown_write()
        with sb.forward_port(3000) as fwd:
            with socket.create_connection(("127.0.0.1", fwd.local_port), timeout=10) as c:
                c.sendall(b"x" * 100000)
                got = b""
                while len(got) < 100000:
                    part = c.recv(65536)
                    assert part
                    got += part
                assert got == b"x" * 100000
        # Another CA: the handshake fails before anything is sent.
        before = len(tls_node.requests)
        other = ssl.create_default_context(cadata=make_ca().pem)
        with pytest.raises(errors.ApiError) as e:
            _ports.open_stream(sb._ref.base, sb._ref.token, 3000, ssl_context=other,
                               timeout=10, sandbox=sb.name)
        assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)
        assert len(tls_node.requests) == before


# --- asyncio ----------------------------------------------------------------

async def test_async_connect_port_both_ways_and_half_close(astandalone, node, guest):
    sb = await astandalone.sandboxes.create("tg")
    attach(node, sb, 3000, guest.port)
    reader, writer = await sb.connect_port(3000)
    writer.write(b"hello")
    await writer.drain()
    assert await reader.readexactly(5) == b"hello"
    big = bytes(range(256)) * 1024
    writer.write(big)
    writer.write_eof()                   # the guest sees the end and answers it
    assert await reader.read() == big
    writer.close()
    with pytest.raises(errors.PortError) as e:
        await sb.connect_port(3001)      # nothing listens there
    assert e.value.reason == "PortRefused"
    with pytest.raises(ValueError):
        await sb.connect_port(0)


async def test_async_forward_port(astandalone, node, guest):
    sb = await astandalone.sandboxes.create("tg")
    attach(node, sb, 3000, guest.port)
    async with await sb.forward_port(3000) as fwd:
        async def client(i):
            r, w = await asyncio.open_connection("127.0.0.1", fwd.local_port)
            w.write(f"client {i}".encode())
            w.write_eof()
            got = await r.read()
            w.close()
            return got

        got = await asyncio.gather(*(client(i) for i in range(5)))
        assert got == [f"client {i}".encode() for i in range(5)]
        assert fwd.errors == []
    node.sandboxes[sb.id].network = False
    async with await sb.forward_port(3000) as fwd:
        r, w = await asyncio.open_connection("127.0.0.1", fwd.local_port)
        assert await r.read() == b""
        w.close()
        assert isinstance(fwd.errors[0], errors.PortError)
        assert fwd.errors[0].reason == "NoNetwork"
