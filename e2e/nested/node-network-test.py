#!/usr/bin/env python3
"""linux tier: the sandbox network through a real kubicle-node, with the
real Linux python guest, inside the nested test host (docs/network.md).

    e2e/nested/node-network-test.py BUILD_DIR IMAGES_ENV

Boots one test host (run-in-testhost.py) and, in it, runs this script again
with --inside. There it builds a small world in namespaces of its own (the
test host is a VM of the test's own; nothing of the build machine's network
is touched):

    test host namespace ("the node")    netns kt-inet ("the internet")
    kt-inet 198.51.100.1/24  <-- veth -->  eth0 198.51.100.2/24, 203.0.113.2/24
    HTTP on :8080 (the node's own          lo 169.254.169.254/32 (metadata)
      addresses)                           HTTP on :80, :8080 and :9090
    routes to 203.0.113.0/24 and
      169.254.169.254 via kt-inet

then starts kubicle-node with --sandbox-network=on, bakes the python
template (a NIC in a slot of its own), and checks with python in the guests,
through the node's API and each sandbox's own token:

  - two sandboxes with the default policy fetch from the internet side,
    masqueraded behind the node's address; neither reaches the other's veth
    addresses, its own host end, the node's address or 169.254.169.254
    (each refused at once), though each of those answers from the node;
  - an allow list (198.51.100.0/24 port 8080, and 169.254.169.254/32, which
    the never-list overrides) opens only that CIDR:port; egress none
    blocks everything;
  - a forked child fetches right after the fork, with its own MAC;
  - a server on port 3000 inside a guest is reached through the node's
    ports route with the sandbox's token, refused (401) without one or with
    another sandbox's, 502 on a port where nothing listens;
  - deleting every sandbox and stopping the node leaves no slot namespace,
    host veth or nftables table.

Prints one line per check and "node-network-test: N passed, 0 failed"; no
timing is asserted.
"""

import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
INET_NS = "kt-inet"
NODE_ADDR = "198.51.100.1"       # the test host's end of the internet veth
INET_ADDR = "198.51.100.2"       # allowed by the allow-list sandbox
OTHER_ADDR = "203.0.113.2"       # outside the allow list
METADATA = "169.254.169.254"
SANDBOX_CIDR = "10.200.0.0/16"
GUEST_PORT = 3000

started = time.monotonic()
passed = 0
failed = []


def progress(msg):
    print(f"[progress +{time.monotonic() - started:.0f}s] {msg}", file=sys.stderr, flush=True)


def check(cond, what, detail=""):
    global passed
    if cond:
        passed += 1
        print(f"ok   {what}", flush=True)
    else:
        failed.append(what)
        print(f"FAIL {what}{': ' + str(detail) if detail != '' else ''}", flush=True)


def sh(cmd, check_status=True, **kw):
    r = subprocess.run(cmd, shell=isinstance(cmd, str), text=True, capture_output=True, **kw)
    if check_status and r.returncode != 0:
        raise RuntimeError(f"{cmd!r} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


# Threaded HTTP servers, in this process, each in a namespace given by its
# file (None: ours): the body names the address and port that answered and
# the peer, so a check sees where a connection landed and what address it
# came from. In-process because every python3 start costs seconds under TCG.
def start_servers(netns, ports):
    import ctypes
    import http.server
    import socketserver
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            host, port = self.connection.getsockname()[:2]
            body = f"served by {host}:{port} to {self.client_address[0]}\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    made, errors = [], []

    def run():
        try:
            # setns(2) moves only this thread; the sockets it makes keep the
            # namespace, and the threads serving them need not be in it.
            if netns:
                fd = os.open(netns, os.O_RDONLY)
                if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), f"setns {netns}")
                os.close(fd)
            made.extend(Server(("0.0.0.0", int(p)), Handler) for p in ports)
        except Exception as e:  # reported by the caller
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise RuntimeError(f"servers in {netns} on {ports}: {errors[0]}")
    for srv in made:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    return made


def host_connects(addr, port):
    """Whether a TCP connect from the test host's namespace succeeds."""
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex((addr, port)) == 0


def build_world():
    progress("building the internet namespace")
    sh(["ip", "netns", "add", INET_NS])
    host = [
        f"link add {INET_NS} type veth peer name eth0 netns {INET_NS}",
        f"addr add {NODE_ADDR}/24 dev {INET_NS}",
        f"link set {INET_NS} up",
    ]
    inet = [
        "link set lo up",
        f"addr add {INET_ADDR}/24 dev eth0",
        f"addr add {OTHER_ADDR}/24 dev eth0",
        f"addr add {METADATA}/32 dev lo",
        "link set eth0 up",
        f"route add default via {NODE_ADDR}",
    ]
    routes = [f"route add 203.0.113.0/24 via {INET_ADDR}", f"route add {METADATA}/32 via {INET_ADDR}"]
    sh(["ip", "-batch", "-"], input="\n".join(host) + "\n")
    sh(["ip", "-n", INET_NS, "-batch", "-"], input="\n".join(inet) + "\n")
    sh(["ip", "-batch", "-"], input="\n".join(routes) + "\n")
    return (start_servers(f"/run/netns/{INET_NS}", [80, 8080, 9090]) +
            start_servers(None, [8080]))


class Node:
    def __init__(self, build, work):
        self.build = build
        self.state = os.path.join(work, "node")
        self.token_file = os.path.join(work, "admin.token")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.log_path = os.path.join(work, "node.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [f"{build}/noderuntime/daemon/kubicle-node", "serve", "--state-dir", self.state,
             "--listen", f"127.0.0.1:{self.port}", "--token-file", self.token_file,
             "--vmm", f"{build}/vmm/kubicle-vmm", "--stop-vms-on-exit",
             "--sandbox-network=on", f"--sandbox-network-cidr={SANDBOX_CIDR}",
             f"--sandbox-nameservers={INET_ADDR}", "--sandbox-network-pool=2"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kubicle-node exited {self.proc.returncode}:\n{self.tail()}")
            try:
                if self.call("GET", "/healthz", token="")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("kubicle-node did not answer in 60 s")
            time.sleep(0.2)
        self.admin = open(self.token_file).read().strip()

    def tail(self, n=40):
        with open(self.log_path) as f:
            return "".join(f.readlines()[-n:])

    def call(self, method, path, body=None, token=None, timeout=300):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {}
        tok = self.admin if token is None else token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        conn.close()
        try:
            return r.status, json.loads(raw) if raw else None
        except ValueError:
            return r.status, raw

    def ok(self, method, path, body=None, token=None, expect=(200, 201)):
        status, out = self.call(method, path, body, token)
        if status not in expect:
            raise RuntimeError(f"{method} {path}: {status} {out}\n{self.tail()}")
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def bake(node, images):
    progress("baking the python template with a NIC")
    env = dict(os.environ, KUBICLE_NODE_URL=f"http://127.0.0.1:{node.port}",
               KUBICLE_NODE_TOKEN_FILE=node.token_file)
    r = subprocess.run(
        [f"{node.build}/noderuntime/cli/kubicle-nodectl", "template", "put", "py",
         "--kernel", images["KUBICLE_LINUX_KERNEL"], "--initrd", images["KUBICLE_LINUX_INITRAMFS"],
         "--disk", images["KUBICLE_LINUX_ROOTFS_PYTHON"] + ",ro", "--mem", "256", "--vcpus", "1",
         "--cmdline", "console=ttyS0 quiet reboot=k panic=1 kubicle.overlay=tmpfs",
         "--warmup", "python3 -c 'import json, socket, urllib.request'", "--wait"],
        env=env, text=True, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"bake failed: {r.stdout}{r.stderr}\n{node.tail()}")
    tmpl = node.ok("GET", "/v1/templates/py")
    check(tmpl.get("nic") is True, "the template is baked with a NIC", tmpl)


class Sandbox:
    def __init__(self, node, item):
        self.node = node
        self.id = item["id"]
        self.token = item["token"]

    def exec(self, argv, timeout=120):
        out = self.node.ok("POST", f"/v1/sandboxes/{self.id}/exec",
                           {"argv": argv, "timeoutSeconds": timeout}, token=self.token)
        if out.get("encoding") == "base64":
            out["stdout"] = base64.b64decode(out["stdout"]).decode(errors="replace")
            out["stderr"] = base64.b64decode(out["stderr"]).decode(errors="replace")
        return out

    def record(self):
        with open(os.path.join(self.node.state, "sandboxes", self.id, "record.json")) as f:
            return json.load(f)

    def info(self):
        return self.node.ok("GET", f"/v1/sandboxes/{self.id}", token=self.token)


def create(node, name, network=None):
    body = {"template": "py", "id": name}
    if network is not None:
        body["network"] = network
    progress(f"creating {name} ({json.dumps(network) if network else 'default policy'})")
    return Sandbox(node, node.ok("POST", "/v1/sandboxes", body))


# Run by python3 in the guest: one TCP connect (and an HTTP GET) per target,
# each reported as "ok <body>", "refused", "timeout" or "error <errno>".
PROBE = r"""
import json, socket, sys
out = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(8)
    try:
        s.connect((host, int(port)))
        s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        out[target] = "ok " + data.decode(errors="replace").split("\r\n\r\n", 1)[-1].strip()
    except ConnectionRefusedError:
        out[target] = "refused"
    except socket.timeout:
        out[target] = "timeout"
    except OSError as e:
        out[target] = "error %d" % e.errno
    finally:
        s.close()
print(json.dumps(out))
"""


def probe(sb, targets):
    r = sb.exec(["python3", "-c", PROBE] + targets)
    try:
        return json.loads(r["stdout"])
    except (ValueError, KeyError):
        raise RuntimeError(f"probe in {sb.id} failed: {r}")


def slot_addresses(sb):
    """(host end, namespace end) of the sandbox's veth, read from the system."""
    netns = sb.record()["network"]["netns"]
    ns_out = sh(["nsenter", f"--net={netns}", "ip", "-4", "-o", "addr", "show", "dev", "veth0"])
    ns_addr = ns_out.split()[3].split("/")[0]
    host_addr = None
    for line in sh(["ip", "-4", "-o", "addr", "show"]).splitlines():
        words = line.split()
        addr = words[3].split("/")[0]
        if words[1].startswith("kh") and addr.rsplit(".", 1)[0] == ns_addr.rsplit(".", 1)[0] \
                and int(addr.rsplit(".", 1)[1]) == int(ns_addr.rsplit(".", 1)[1]) - 1:
            host_addr = addr
    return host_addr, ns_addr, netns


def check_isolation(a, b):
    a_host, a_ns, _ = slot_addresses(a)
    b_host, b_ns, b_netns = slot_addresses(b)
    check(None not in (a_host, b_host) and a_ns != b_ns,
          f"each sandbox has a veth of its own ({a.id}: {a_host}/{a_ns}, {b.id}: {b_host}/{b_ns})")
    # A listener in b's namespace on its veth address: b's side of the pair.
    listeners = start_servers(b_netns, [8080])
    try:
        # The node answers on every host end (the test host's server binds
        # 0.0.0.0), so a refusal from a guest is the policy's, not a closed port.
        for addr in (a_host, b_host, NODE_ADDR):
            check(host_connects(addr, 8080), f"the node itself reaches {addr}:8080")
        check(host_connects(METADATA, 80), f"the node itself reaches {METADATA}:80")
        for me, other, other_host, other_ns, my_host in ((a, b, b_host, b_ns, a_host),
                                                         (b, a, a_host, a_ns, b_host)):
            targets = [f"{other_ns}:8080", f"{other_host}:8080", f"{my_host}:8080",
                       f"{NODE_ADDR}:8080", f"{METADATA}:80", f"{INET_ADDR}:8080"]
            res = probe(me, targets)
            for t in targets[:-1]:
                check(res.get(t) == "refused", f"{me.id} is refused at {t}", res.get(t))
            check(res.get(targets[-1], "").startswith(f"ok served by {INET_ADDR}:8080"),
                  f"{me.id} still fetches from the internet side", res.get(targets[-1]))
    finally:
        for srv in listeners:
            srv.shutdown()
            srv.server_close()


def check_ports(node, b, a):
    progress(f"a server on port {GUEST_PORT} in {b.id}")
    r = b.exec(["sh", "-c",
                f"echo port-through-the-node > /root/index.txt && cd /root && "
                f"setsid python3 -m http.server {GUEST_PORT} </dev/null >/dev/null 2>&1 & "
                f"python3 -c \"import socket, time\nfor i in range(100):\n"
                f"    try:\n        socket.create_connection(('127.0.0.1', {GUEST_PORT}), 1)"
                f"\n        print('up')\n        break\n    except OSError:\n"
                f"        time.sleep(0.3)\""])
    check(r.get("stdout", "").strip() == "up", f"the guest's server listens on {GUEST_PORT}", r)

    def stream(port, token, payload=b""):
        s = socket.create_connection(("127.0.0.1", node.port), timeout=60)
        head = (f"GET /v1/sandboxes/{b.id}/ports/{port} HTTP/1.1\r\nHost: node\r\n"
                f"Connection: Upgrade\r\nUpgrade: kubicle-tcp\r\n")
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        s.sendall((head + "\r\n").encode() + payload)
        # An answer other than 101 may leave the connection open (keep-alive):
        # read its head only. After a 101, the guest's HTTP/1.0 answer ends
        # with its close.
        data = b""
        while b"\r\n\r\n" not in data or data.startswith(b"HTTP/1.1 101"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        status_line = data.split(b"\r\n", 1)[0].decode(errors="replace")
        return status_line, data

    get = b"GET /index.txt HTTP/1.0\r\nHost: guest\r\n\r\n"
    line, data = stream(GUEST_PORT, b.token, get)
    check(line.startswith("HTTP/1.1 101") and b"port-through-the-node" in data,
          f"port {GUEST_PORT} of {b.id} through the node with its token", data[:300])
    line, _ = stream(GUEST_PORT, "", get)
    check(line.startswith("HTTP/1.1 401"), f"port {GUEST_PORT} without a token is 401", line)
    line, _ = stream(GUEST_PORT, a.token, get)
    check(line.startswith("HTTP/1.1 401"), f"port {GUEST_PORT} with {a.id}'s token is 401", line)
    line, _ = stream(GUEST_PORT + 1, b.token)
    check(line.startswith("HTTP/1.1 502"), f"port {GUEST_PORT + 1} (nothing listens) is 502", line)


def leftovers(state):
    links = [l.split(":")[1].strip().split("@")[0]
             for l in sh(["ip", "-o", "link", "show"]).splitlines()]
    veths = [l for l in links if l.startswith("kh")]
    tables = [l for l in sh(["nft", "list", "tables"]).splitlines() if "kubicle" in l]
    netns_dir = os.path.join(state, "netns")
    files = os.listdir(netns_dir) if os.path.isdir(netns_dir) else []
    return veths, tables, files


def inside(build, images_env):
    images = {}
    with open(images_env) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            images[k] = v
    work = tempfile.mkdtemp(prefix="kubicle-node-net-")
    servers = build_world()
    progress("starting kubicle-node with --sandbox-network=on")
    node = Node(build, work)
    try:
        run_checks(node, images)
    except Exception as e:  # a step failed: report it with the node's log
        failed.append(f"{type(e).__name__}: {e}")
        print(f"FAIL {e}\n--- node log tail ---\n{node.tail(80)}", flush=True)
    finally:
        progress("stopping the node")
        node.stop()
        for srv in servers:
            srv.shutdown()
            srv.server_close()
    veths, tables, files = leftovers(node.state)
    check(not veths and not tables and not files,
          "nothing is left: no host veth, nftables table or namespace file",
          f"veths {veths}, tables {tables}, netns files {files}")
    print(f"node-network-test: {passed} passed, {len(failed)} failed", flush=True)
    return 0 if not failed and passed > 0 else 1


def run_checks(node, images):
    bake(node, images)
    a = create(node, "net-a")
    b = create(node, "net-b")
    allow = create(node, "net-allow", {"egress": {"allow": [
        {"cidr": "198.51.100.0/24", "ports": [8080]}, {"cidr": f"{METADATA}/32"}]}})
    none = create(node, "net-none", {"egress": "none"})
    macs = {sb.id: sb.info()["network"]["mac"] for sb in (a, b, allow, none)}
    check(len(set(macs.values())) == 4, "every sandbox has a MAC of its own", macs)

    progress("default policy: the internet side, masqueraded behind the node")
    for sb in (a, b):
        res = probe(sb, [f"{INET_ADDR}:8080", f"{OTHER_ADDR}:8080"])
        check(res.get(f"{INET_ADDR}:8080") == f"ok served by {INET_ADDR}:8080 to {NODE_ADDR}",
              f"{sb.id} fetches from {INET_ADDR}:8080, seen as the node", res)
        check(res.get(f"{OTHER_ADDR}:8080", "").startswith(f"ok served by {OTHER_ADDR}:8080"),
              f"{sb.id} fetches from {OTHER_ADDR}:8080", res)

    progress("isolation between the two sandboxes")
    check_isolation(a, b)

    progress("an allow list")
    targets = [f"{INET_ADDR}:8080", f"{INET_ADDR}:9090", f"{OTHER_ADDR}:8080", f"{METADATA}:80"]
    res = probe(allow, targets)
    check(res.get(targets[0], "").startswith(f"ok served by {INET_ADDR}:8080"),
          f"{allow.id} reaches the allowed {targets[0]}", res)
    for t in targets[1:]:
        check(res.get(t) == "refused", f"{allow.id} is refused at {t}", res.get(t))

    progress("egress none")
    targets = [f"{INET_ADDR}:8080", f"{INET_ADDR}:9090", f"{OTHER_ADDR}:8080", f"{METADATA}:80"]
    res = probe(none, targets)
    for t in targets:
        check(res.get(t) == "refused", f"{none.id} is refused at {t}", res.get(t))

    progress(f"fork of {a.id}, then a fetch at once")
    items = node.ok("POST", f"/v1/sandboxes/{a.id}/fork", {"count": 1})["items"]
    child = Sandbox(node, items[0])
    res = probe(child, [f"{INET_ADDR}:8080", f"{METADATA}:80"])
    check(res.get(f"{INET_ADDR}:8080") == f"ok served by {INET_ADDR}:8080 to {NODE_ADDR}",
          f"the fork child {child.id} fetches right after the fork", res)
    check(res.get(f"{METADATA}:80") == "refused", f"the fork child is refused at {METADATA}:80",
          res)
    child_mac = child.info()["network"]["mac"]
    guest_mac = child.exec(["cat", "/sys/class/net/eth0/address"])["stdout"].strip()
    check(child_mac not in macs.values() and guest_mac == child_mac,
          f"the fork child's eth0 has its own MAC {child_mac}", guest_mac)
    res = probe(a, [f"{INET_ADDR}:8080"])
    check(res.get(f"{INET_ADDR}:8080", "").startswith("ok"), f"{a.id} still fetches after the fork",
          res)

    check_ports(node, b, a)

    progress("deleting every sandbox")
    for sb in (child, a, b, allow, none):
        node.ok("DELETE", f"/v1/sandboxes/{sb.id}", expect=(200, 202, 204))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--inside":
        return inside(sys.argv[2], sys.argv[3])
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    build = os.path.realpath(sys.argv[1])
    images = os.path.realpath(sys.argv[2])
    return subprocess.call([os.path.join(HERE, "run-in-testhost.py"), "--timeout", "900", "--",
                            sys.executable, os.path.abspath(__file__), "--inside", build, images])


if __name__ == "__main__":
    sys.exit(main())
