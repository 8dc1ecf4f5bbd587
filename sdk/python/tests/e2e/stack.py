"""A real Kubicle stack on this machine for the SDK's e2e tests and
benchmark: the local control plane (``kubicle-e2e-cluster``: etcd,
kube-apiserver, kube-controller-manager, the CRDs), ``kubicle-operator``
and one ``kubicle-node --node-name=n1`` with the tiny test guest, as host
processes, plus a SandboxTemplate ``tg`` baked and Ready. The node runs
with its sandbox network on (its default), on a CIDR no other node on this
host holds (``take_sandbox_cidr``).

``Stack.start()`` raises ``Missing`` (the caller skips, exit 77) when
/dev/kvm or a binary is absent. ``stop()`` ends everything it started and
says whether any VM outlived the node."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import IO, List, Optional

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
NODE_NAME = "n1"
LEASE_NS = "kubicle-node-lease"
TEMPLATE = "tg"


class Missing(Exception):
    """A prerequisite is absent: the tests are skipped, not failed."""


class StackError(Exception):
    pass


def _tail(path: str, n: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def take_sandbox_cidr():
    """(cidr, lock file): a /20 of 10.240.0.0/12 no other process on this
    host holds and no host route overlaps, held while the file stays open.
    The same lock files as noderuntime/network/host_share.h and
    scripts/sandbox-cidr.sh: nodes sharing a host need distinct CIDRs."""
    lock_dir = "/tmp/kubicle-sandbox-cidr"
    os.makedirs(lock_dir, exist_ok=True)
    out = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"],
                         capture_output=True, text=True).stdout
    routed = []
    for line in out.splitlines():
        words = line.split()
        if words and words[0] in ("local", "broadcast", "unicast", "multicast", "anycast",
                                  "blackhole", "unreachable", "prohibit", "throw", "nat"):
            words = words[1:]
        try:
            routed.append(ipaddress.ip_network(words[0]))
        except (IndexError, ValueError):
            pass  # "default" and the like
    for k in range(256):
        cidr = ipaddress.ip_network(f"10.{240 + k // 16}.{k % 16 * 16}.0/20")
        if any(cidr.overlaps(r) for r in routed):
            continue
        f = open(os.path.join(lock_dir, f"{k}.lock"), "a")  # not inherited (PEP 446)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        return str(cidr), f
    raise StackError("no free sandbox CIDR in 10.240.0.0/12")


class Stack:
    def __init__(self, build_dir: Optional[str] = None, namespace: str = "default",
                 node_args: Optional[List[str]] = None,
                 operator_args: Optional[List[str]] = None) -> None:
        self.node_args = list(node_args or [])
        self.operator_args = list(operator_args or [])
        self.build = os.path.abspath(build_dir or os.environ.get("KUBICLE_BUILD_DIR") or
                                     os.path.join(REPO, "build"))
        self.namespace = namespace
        # Short: the node's state directory must stay under 80 bytes.
        self.work = tempfile.mkdtemp(prefix="kubicle-sdk-e2e-", dir="/tmp")
        self.logs = os.path.join(self.work, "logs")
        self.images = os.path.join(self.work, "images")
        self.state = os.path.join(self.work, "node")
        os.makedirs(self.logs)
        os.makedirs(self.images)
        self.kubeconfig = ""
        self.node_url = ""
        self._procs: List[subprocess.Popen] = []
        self._files: List[IO[bytes]] = []
        self.cluster: Optional[subprocess.Popen] = None
        self.operator: Optional[subprocess.Popen] = None
        self.node: Optional[subprocess.Popen] = None

    def bin(self, rel: str) -> str:
        return os.path.join(self.build, rel)

    # --- start ------------------------------------------------------------------

    def start(self) -> "Stack":
        if not os.path.exists("/dev/kvm"):
            raise Missing("/dev/kvm is absent: no VM can run here")
        for rel in ("e2e/kubicle-e2e-cluster", "operator/kubicle-operator",
                    "noderuntime/daemon/kubicle-node", "vmm/kubicle-vmm", "kubicle-testguest"):
            if not os.access(self.bin(rel), os.X_OK):
                raise Missing(f"{self.bin(rel)} is missing: build first (scripts/build.sh)")
        try:
            self._start_cluster()
            self._start_operator_and_node()
            self._make_template()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: List[str]) -> subprocess.Popen:
        log = open(os.path.join(self.logs, name + ".log"), "wb")
        self._files.append(log)
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        self._procs.append(p)
        return p

    def _wait_log(self, name: str, proc: subprocess.Popen, prefix: str, timeout: float) -> str:
        path = os.path.join(self.logs, name + ".log")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(path, errors="replace") as f:
                for line in f:
                    if line.startswith(prefix):
                        return line[len(prefix):].strip()
            if proc.poll() is not None:
                text = _tail(path)
                if "control plane binaries missing" in text:
                    raise Missing("the control plane binaries are missing: run "
                                  "e2e/control-plane/build.sh")
                raise StackError(f"{name} exited {proc.returncode}:\n{text}")
            time.sleep(0.1)
        raise StackError(f"{name}: no '{prefix}' line in {timeout:g} s:\n{_tail(path)}")

    def _start_cluster(self) -> None:
        self.cluster = self._spawn("cluster", [self.bin("e2e/kubicle-e2e-cluster")])
        self.kubeconfig = self._wait_log("cluster", self.cluster, "KUBECONFIG=", 240)
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        core = client.CoreV1Api(self.api)
        for ns in {LEASE_NS, self.namespace}:
            try:
                core.create_namespace({"metadata": {"name": ns}})
            except client.rest.ApiException as e:
                if e.status != 409:
                    raise

    def _start_operator_and_node(self) -> None:
        self.operator = self._spawn("operator", [
            self.bin("operator/kubicle-operator"), f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false", f"--node-lease-namespace={LEASE_NS}", "--metrics-port=0",
            *self.operator_args])
        shutil.copy(self.bin("kubicle-testguest"), os.path.join(self.images, "kubicle-testguest"))
        with open(os.path.join(self.images, "rootfs.img"), "wb") as f:
            f.truncate(1 << 20)  # the test guest only lists its disk
        node_args = list(self.node_args)
        if not any(a in ("--sandbox-network=off", "--sandbox-network=false") for a in node_args):
            cidr, lock = take_sandbox_cidr()
            self._files.append(lock)  # held until stop()
            node_args.append(f"--sandbox-network-cidr={cidr}")
        self.node = self._spawn("node", [
            self.bin("noderuntime/daemon/kubicle-node"), "serve", f"--node-name={NODE_NAME}",
            f"--kubeconfig={self.kubeconfig}", f"--vmm={self.bin('vmm/kubicle-vmm')}",
            f"--state-dir={self.state}", "--listen=127.0.0.1:0", "--advertise-address=127.0.0.1",
            f"--image-root={self.images}", "--stop-vms-on-exit", *node_args])
        self.node_url = self._wait_log("node", self.node, "listening on ", 60)
        if not self.node_url.startswith("https://"):
            raise StackError(f"a cluster node serves TLS by default, yet it listens on {self.node_url}")
        from kubernetes import client

        coord = client.CoordinationV1Api(self.api)
        deadline = time.monotonic() + 60
        while True:
            try:
                coord.read_namespaced_lease(f"kubicle-node-{NODE_NAME}", LEASE_NS)
                return
            except client.rest.ApiException:
                if time.monotonic() > deadline:
                    raise StackError("kubicle-node did not heartbeat its Lease in 60 s:\n" +
                                     _tail(os.path.join(self.logs, "node.log")))
                self._alive()
                time.sleep(0.2)

    def _make_template(self) -> None:
        from kubernetes import client

        co = client.CustomObjectsApi(self.api)
        co.create_namespaced_custom_object("kubicle.dev", "v1alpha1", self.namespace,
                                           "sandboxtemplates", {
            "apiVersion": "kubicle.dev/v1alpha1", "kind": "SandboxTemplate",
            "metadata": {"name": TEMPLATE},
            "spec": {"kernel": os.path.join(self.images, "kubicle-testguest"),
                     "rootfs": os.path.join(self.images, "rootfs.img"),
                     "vcpus": 1, "memoryMiB": 64,
                     "warmup": [{"command": ["echo", "warm"]}]}})
        deadline = time.monotonic() + 180
        while True:
            t = co.get_namespaced_custom_object("kubicle.dev", "v1alpha1", self.namespace,
                                                "sandboxtemplates", TEMPLATE)
            status = t.get("status") or {}
            if status.get("phase") == "Ready":
                return
            if status.get("phase") in ("Failed", "Invalid") or time.monotonic() > deadline:
                raise StackError(f"SandboxTemplate {TEMPLATE}: {status}\n" +
                                 _tail(os.path.join(self.logs, "node.log")))
            self._alive()
            time.sleep(0.2)

    def _alive(self) -> None:
        for name, p in (("cluster", self.cluster), ("operator", self.operator),
                        ("node", self.node)):
            if p is not None and p.poll() is not None:
                raise StackError(f"{name} exited {p.returncode}:\n" +
                                 _tail(os.path.join(self.logs, name + ".log")))

    @property
    def ca_file(self) -> str:
        """The node's own CA (also on its Lease, kubicle.dev/serving-ca)."""
        return os.path.join(self.state, "tls", "ca.crt")

    def node_tls(self) -> "ssl.SSLContext":
        import ssl

        return ssl.create_default_context(cafile=self.ca_file)

    def admin_token(self) -> str:
        # Standalone mode against the same node: its admin token file.
        with open(os.path.join(self.state, "admin-token")) as f:
            return f.read().strip()

    # --- stop ---------------------------------------------------------------------

    def vmms(self) -> List[int]:
        """kubicle-vmm processes of this node's state directory."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "kubicle-vmm" in cmd and self.state + "/" in cmd:
                out.append(int(pid))
        return out

    def stop(self) -> List[int]:
        """Stops node, operator and control plane; returns the pids of VMs
        that outlived the node (killed)."""
        for p, secs in ((self.node, 30), (self.operator, 10), (self.cluster, 30)):
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(secs)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        left = self.vmms()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for f in self._files:
            f.close()
        self._files = []
        # A node that had to be killed leaves its namespaces mounted there.
        netns = os.path.join(self.state, "netns")
        for name in (os.listdir(netns) if os.path.isdir(netns) else []):
            subprocess.run(["umount", "-l", os.path.join(netns, name)], capture_output=True)
        if not os.environ.get("KUBICLE_E2E_KEEP"):
            shutil.rmtree(self.state, ignore_errors=True)
        return left
