#!/usr/bin/env python3
"""A real OCI registry on loopback for tests: Debian's docker-registry (the
CNCF distribution server, /usr/bin/docker-registry) in a temporary
directory, plain HTTP or TLS with a self-signed CA and htpasswd basic auth.

From Python (the registry stops and its directory is removed on exit):

    from registry import Registry
    with Registry(tls=True, user="alice", password="secret") as reg:
        reg.address   # "127.0.0.1:41234"
        reg.ca_file   # the CA that signed its certificate (TLS only)
        reg.docker_config()  # a config.json text with the credentials

From any other language, as a process: `registry.py serve [--tls]
[--user U --password P] [--dir D]` prints one JSON line
{"address": ..., "ca_file": ..., "docker_config": ..., "dir": ...} once the
registry answers, then runs until its stdin closes or it gets SIGTERM, and
cleans up. (e2e/registry/registry_fixture.h wraps this for C++ tests.)

Needs: docker-registry, apache2-utils (htpasswd) and openssl
(scripts/install-deps.sh); `Registry.available()` says whether they are
there so tests can skip with a reason.
"""
import argparse
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

REGISTRY_BIN = "/usr/bin/docker-registry"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In the registry's child: SIGTERM when this process dies, however it
    dies, so a killed test leaves no registry behind (prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def _run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Registry:
    @staticmethod
    def available():
        """None when usable, else why not."""
        for tool in (REGISTRY_BIN, shutil.which("htpasswd"), shutil.which("openssl")):
            if not tool or not os.access(tool, os.X_OK):
                return "needs docker-registry, htpasswd (apache2-utils) and openssl: scripts/install-deps.sh"
        return None

    def __init__(self, tls=False, user=None, password=None, dir=None):
        self.tls, self.user, self.password = tls, user, password
        self._own_dir = dir is None
        self.dir = dir or tempfile.mkdtemp(prefix="kubicle-registry-")
        self.proc = None
        self.address = None
        self.ca_file = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def url(self, path=""):
        return ("https://" if self.tls else "http://") + self.address + path

    def ssl_context(self):
        return ssl.create_default_context(cafile=self.ca_file) if self.tls else None

    def docker_config(self):
        """A docker/kubelet config.json with this registry's credentials."""
        auths = {}
        if self.user:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            auths[self.address] = {"auth": token}
        return json.dumps({"auths": auths})

    def _make_certs(self):
        d = self.dir
        self.ca_file = os.path.join(d, "ca.pem")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _run("openssl", "req", "-x509", *ec, "-keyout", f"{d}/ca.key", "-out", self.ca_file,
             "-days", "2", "-subj", "/CN=kubicle test registry CA")
        _run("openssl", "req", *ec, "-keyout", f"{d}/server.key", "-out", f"{d}/server.csr",
             "-subj", "/CN=127.0.0.1")
        with open(f"{d}/san.ext", "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        _run("openssl", "x509", "-req", "-in", f"{d}/server.csr", "-CA", self.ca_file,
             "-CAkey", f"{d}/ca.key", "-CAcreateserial", "-out", f"{d}/server.pem", "-days", "2",
             "-extfile", f"{d}/san.ext")

    def _config(self, port):
        lines = [
            "version: 0.1",
            "log:", "  level: error", "  accesslog:", "    disabled: true",
            "storage:", "  filesystem:", f"    rootdirectory: {self.dir}/data",
            "  delete:", "    enabled: true",
            "http:", f"  addr: 127.0.0.1:{port}", "  secret: kubicle-test-only",
        ]
        if self.tls:
            lines += ["  tls:", f"    certificate: {self.dir}/server.pem", f"    key: {self.dir}/server.key"]
        if self.user:
            lines += ["auth:", "  htpasswd:", "    realm: kubicle-test", f"    path: {self.dir}/htpasswd"]
        path = os.path.join(self.dir, "config.yml")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def start(self):
        why = Registry.available()
        if why:
            raise RuntimeError(why)
        if self.tls:
            self._make_certs()
        if self.user:
            out = subprocess.run(["htpasswd", "-Bbn", self.user, self.password], check=True,
                                 capture_output=True, text=True).stdout
            with open(os.path.join(self.dir, "htpasswd"), "w") as f:
                f.write(out)
        # The port is chosen free, then bound by the registry: another process
        # may take it in between, so a registry that dies early is retried.
        for _ in range(5):
            port = _free_port()
            log = open(os.path.join(self.dir, "registry.log"), "wb")
            self.proc = subprocess.Popen([REGISTRY_BIN, "serve", self._config(port)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            log.close()
            self.address = f"127.0.0.1:{port}"
            if self._wait_ready():
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError("docker-registry did not start: " + self._log_tail())

    def _log_tail(self):
        try:
            with open(os.path.join(self.dir, "registry.log"), "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def _wait_ready(self):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                urllib.request.urlopen(self.url("/v2/"), timeout=2, context=self.ssl_context())
                return True
            except urllib.error.HTTPError as e:
                if e.code == 401:  # up, asking for auth
                    return True
            except (OSError, ssl.SSLError):
                pass
            time.sleep(0.1)
        return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["serve", "check"])
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--dir")
    a = ap.parse_args()
    if a.command == "check":
        why = Registry.available()
        print(why or "ok")
        return 1 if why else 0
    def on_term(*_):
        raise SystemExit(0)  # unwinds through the with: the registry stops, its dir goes

    signal.signal(signal.SIGTERM, on_term)
    with Registry(tls=a.tls, user=a.user, password=a.password, dir=a.dir) as reg:
        print(json.dumps({"address": reg.address, "ca_file": reg.ca_file, "dir": reg.dir,
                          "docker_config": reg.docker_config()}), flush=True)
        # Until stdin closes (the parent went away) or SIGTERM.
        while True:
            try:
                if not sys.stdin.buffer.read(1):
                    break
            except (OSError, ValueError):
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
