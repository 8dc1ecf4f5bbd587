"""An in-process fake of kubicle-node's HTTP API (docs/node.md): sandboxes,
fork, exec (collected and streamed NDJSON), files (read, write, stat, ls,
remove), port streams (a guest port is a listener on 127.0.0.1 the test
names in FakeSandbox.ports), auth with the admin token and per-sandbox
tokens, the same error bodies. Commands are a few built-ins, like the test guest's, plus ones that
exercise the SDK. Files behave as in the test guest's RamFs
(guest/testguest/ramfs.h): flat paths, directories implied by the files
under them, "/" always one."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import select
import secrets
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlparse

# The methods of each sandbox sub-route (noderuntime/api/routes.cc).
_SUB_METHODS = {"fork": "POST", "exec": "POST", "files": "GET, PUT, DELETE", "stat": "GET",
                "ls": "GET", "ports": "GET", "suspend": "POST", "resume": "POST"}
_BAD_GUEST_PATH = ("invalid path for the test guest (absolute, at most 127 bytes, no empty, . or "
                   ".. parts)")


def _selector_match(labels: Dict[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


class FakeSandbox:
    def __init__(self, sid: str, template: str, labels: Dict[str, str], token: str,
                 env: Optional[Dict[str, str]] = None, fork_of: str = "",
                 token_sha256: str = "") -> None:
        self.id, self.template, self.labels, self.token = sid, template, labels, token
        # The hash a client's own token must have (spec.tokenSha256); the
        # node knows only that, not the token.
        self.token_sha256 = token_sha256
        self.env = dict(env or {})
        self.files: Dict[str, bytes] = {}
        self.meta: Dict[str, Tuple[int, Optional[str]]] = {}   # path -> (mode, mtime)
        self.fork_of = fork_of
        self.state = "Running"
        self.message = ""   # why, for a Failed one (the node's words)
        self.network = True
        self.ports: Dict[int, int] = {}   # guest port -> a listener's port on 127.0.0.1
        self.suspended_at: Optional[str] = None
        self.workspace: Optional[str] = None

    def takes(self, token: str) -> bool:
        """The node's check of a bearer token: its SHA-256 is the one held."""
        if self.token_sha256:
            return hashlib.sha256(token.encode()).hexdigest() == self.token_sha256
        return bool(token) and token == self.token

    def json(self, with_token: bool = False) -> Dict[str, Any]:
        j: Dict[str, Any] = {
            "id": self.id, "template": self.template, "labels": self.labels,
            "state": self.state, "message": self.message, "forkOf": self.fork_of,
            "createdAt": "2026-01-01T00:00:00.000Z", "expiresAt": None, "cid": 3,
            "vmmPid": 0 if self.state == "Suspended" else 1, "readyMs": 1.5, "memMib": 64,
            "vcpus": 1, "suspendedAt": self.suspended_at,
            "suspendedBytes": 4 << 20 if self.state == "Suspended" else 0,
            "workspace": self.workspace}
        if with_token:
            j["token"] = self.token
        return j


class FakeWorkspace:
    """A workspace as the node keeps it: a RAM file table (the same shape as
    a sandbox's, so the file routes serve both), a token, a holder."""

    def __init__(self, name: str, size_mib: int, token: str, labels: Dict[str, str]) -> None:
        self.name, self.size_mib, self.token, self.labels = name, size_mib, token, labels
        self.files: Dict[str, bytes] = {}
        self.meta: Dict[str, Tuple[int, Optional[str]]] = {}
        self.attached_to: Optional[str] = None

    def json(self, with_token: bool = False) -> Dict[str, Any]:
        j: Dict[str, Any] = {"name": self.name, "sizeMiB": self.size_mib, "filesystem": "ext4",
                             "labels": self.labels, "state": "Ready", "message": "",
                             "attachedTo": self.attached_to,
                             "bytesUsed": sum(len(b) for b in self.files.values()),
                             "createdAt": "2026-12-05T09:00:00.000Z"}
        if with_token and self.token:
            j["token"] = self.token
        return j


class FakeNode:
    def __init__(self, admin_token: str = "admin-token", shell: bool = False,
                 tls: Optional[Tuple[str, str]] = None) -> None:
        self.admin_token = admin_token
        self.shell = shell                   # False: "shell" is Unimplemented (the test guest)
        self.templates: Dict[str, str] = {"tg": "Ready"}
        self.run_tokens: Dict[str, str] = {}   # template -> its run token
        self.runs = 0
        self.capacity = 1000
        self.sandboxes: Dict[str, FakeSandbox] = {}
        self.workspaces: Dict[str, FakeWorkspace] = {}
        self.requests: List[Tuple[str, str, Any]] = []   # (method, path, json body or None)
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                node._handle(self, "GET")

            def do_POST(self) -> None:
                node._handle(self, "POST")

            def do_PUT(self) -> None:
                node._handle(self, "PUT")

            def do_DELETE(self) -> None:
                node._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.scheme = "http"
        if tls:  # (certificate chain file, key file): serve https as kubicle-node --tls=on
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, sid: str, token: str, *, template: str = "tg", labels: Optional[Dict[str, str]] = None,
            env: Optional[Dict[str, str]] = None, fork_of: str = "",
            token_sha256: str = "") -> FakeSandbox:
        with self.lock:
            sb = FakeSandbox(sid, template, dict(labels or {}), token, env, fork_of, token_sha256)
            self.sandboxes[sid] = sb
            return sb

    def copy(self, source: str, child: str, token: str, labels: Dict[str, str]) -> FakeSandbox:
        src = self.sandboxes[source]
        sb = self.add(child, token, template=src.template, labels=labels, env=src.env,
                      fork_of=source)
        sb.files, sb.meta = dict(src.files), dict(src.meta)
        return sb

    def remove(self, sid: str) -> None:
        """The VM goes; a workspace it held is free again, as on the node."""
        with self.lock:
            self.sandboxes.pop(sid, None)
            self._release(sid)

    def add_workspace(self, name: str, size_mib: int, token: str) -> FakeWorkspace:
        """A disk the node agent made for a Workspace object (name w-<uid>)."""
        with self.lock:
            ws = self.workspaces[name] = FakeWorkspace(name, size_mib, token, {})
            return ws

    # --- HTTP ---------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        u = urlparse(h.path)
        q = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
        body = self._body(h)
        parts = [p for p in u.path.split("/") if p]
        try:
            js = json.loads(body) if body and parts[-1] != "files" else None
        except ValueError:
            return self._error(h, 400, "InvalidArgument", "request body is not valid JSON")
        self.requests.append((method, u.path, js if js is not None else q))
        auth = h.headers.get("Authorization", "")
        token = auth[7:] if auth.startswith("Bearer ") else ""
        is_port = len(parts) == 5 and parts[:2] == ["v1", "sandboxes"] and parts[3] == "ports"
        if is_port:
            parts = parts[:4]
        if parts[:2] == ["v1", "templates"] and len(parts) == 4 and parts[3] == "run":
            return self._run(h, method, parts[2], token, js)
        if parts[:2] == ["v1", "workspaces"]:
            return self._workspace(h, method, parts, q, token, js, body)
        if parts[:2] != ["v1", "sandboxes"] or len(parts) > 4 or \
                (len(parts) == 4 and (parts[3] not in _SUB_METHODS or
                                      (parts[3] == "ports") != is_port)):
            return self._error(h, 404, "NotFound", f"no route {u.path}")
        sid = parts[2] if len(parts) > 2 else None
        sub = parts[3] if len(parts) > 3 else None
        if sub and method not in _SUB_METHODS[sub].split(", "):
            # As the node: decided from the route before the token is looked at.
            allowed = _SUB_METHODS[sub]
            return self._error(h, 405, "MethodNotAllowed",
                               f"{method} is not allowed on {u.path} (allowed: {allowed})")
        admin = token == self.admin_token
        sb = self.sandboxes.get(sid) if sid else None
        own = sb is not None and sb.takes(token)
        if not admin and not own:
            return self._error(h, 401, "Unauthenticated", "a valid bearer token is required")
        if not admin and (sub in ("fork",) or (sub is None and method == "DELETE")):
            return self._error(h, 403, "PermissionDenied", "a sandbox token may not do this")
        if sid is None:
            return self._collection(h, method, q, js)
        if sb is None:
            return self._error(h, 404, "NotFound", f"no sandbox '{sid}'")
        if sub is None:
            if method == "DELETE":
                self.remove(sid)
                return self._json(h, 200, {"deleted": sid})
            return self._json(h, 200, sb.json())
        if sub in ("suspend", "resume"):
            return self._suspend(h, sb, sub, body)
        if sb.state != "Running":
            # As the manager's AgentOf: no agent to talk to (fork: the source's state).
            why = f": {sb.message}" if sb.message and sub != "fork" else ""
            return self._error(h, 409, "FailedPrecondition", f"sandbox '{sid}' is {sb.state}{why}")
        if sub == "ports":
            return self._port(h, sb, u.path.rsplit("/", 1)[1])
        if sub == "fork":
            return self._fork(h, sb, js or {})
        if sub == "exec":
            return self._exec(h, sb, js or {}, q.get("stream") == "true")
        if sub == "files":
            return self._files(h, method, sb, q, body)
        return self._file_meta(h, sub, sb, q)

    def _suspend(self, h: BaseHTTPRequestHandler, sb: FakeSandbox, sub: str, body: bytes) -> None:
        """As the node (docs/node.md, "Suspend and resume"): no body,
        idempotent, 409 from any other state; files are kept."""
        if body:
            return self._error(h, 400, "InvalidArgument", f"{sub} takes no body")
        to, other = ("Suspended", "Running") if sub == "suspend" else ("Running", "Suspended")
        if sb.state not in (to, other):
            return self._error(h, 409, "FailedPrecondition",
                               f"sandbox '{sb.id}' is {sb.state}: only a {other} sandbox can be "
                               f"{'suspended' if sub == 'suspend' else 'resumed'}")
        sb.state = to
        sb.suspended_at = "2026-01-01T00:01:00.000Z" if to == "Suspended" else None
        return self._json(h, 200, sb.json())

    def _workspace(self, h: BaseHTTPRequestHandler, method: str, parts: List[str],
                   q: Dict[str, str], token: str, js: Any, body: bytes) -> None:
        """/v1/workspaces[/{name}[/files|stat|ls]], as noderuntime/api/workspaces.cc."""
        if len(parts) > 4 or (len(parts) == 4 and parts[3] not in ("files", "stat", "ls")):
            return self._error(h, 404, "NotFound", f"no route /{'/'.join(parts)}")
        admin = token == self.admin_token
        name = parts[2] if len(parts) > 2 else None
        ws = self.workspaces.get(name) if name else None
        own = ws is not None and bool(token) and token == ws.token
        sub = parts[3] if len(parts) > 3 else None
        if not admin and not own:
            return self._error(h, 401, "Unauthenticated", "the token is not valid for this request")
        if not admin and (sub is None and method != "GET"):
            return self._error(h, 403, "PermissionDenied", "a workspace token may not do this")
        if name is None:
            return self._json(h, 200, {"items": [w.json() for w in self.workspaces.values()]})
        if sub is None and method == "PUT":
            size = (js or {}).get("sizeMiB")
            if not isinstance(size, int) or size < 8:
                return self._error(h, 400, "InvalidArgument", "field \"sizeMiB\" is required")
            if ws is not None:
                if ws.size_mib != size:
                    return self._error(h, 409, "FailedPrecondition",
                                       f"workspace {name} exists with {ws.size_mib} MiB, not {size} MiB")
                return self._json(h, 200, ws.json())
            minted = "" if (js or {}).get("tokenSha256") else secrets.token_hex(16)
            ws = FakeWorkspace(name, size, minted, dict((js or {}).get("labels") or {}))
            self.workspaces[name] = ws
            return self._json(h, 201, ws.json(with_token=True))
        if ws is None:
            return self._error(h, 404, "NotFound", f"no workspace '{name}'")
        if sub is None and method == "GET":
            return self._json(h, 200, ws.json())
        if ws.attached_to:
            return self._error(h, 409, "FailedPrecondition",
                               f"workspace {name} is attached to {ws.attached_to}: its files are the "
                               "guest's while it runs (one writer)")
        if sub is None:  # DELETE
            del self.workspaces[name]
            return self._json(h, 200, {"deleted": name})
        if sub == "files":
            return self._files(h, method, ws, q, body)  # type: ignore[arg-type]
        return self._file_meta(h, sub, ws, q)  # type: ignore[arg-type]

    def _attach(self, name: Optional[str], holder: str) -> Optional[Tuple[int, str, str]]:
        """The one-writer check of a create or run: None, or the error."""
        if name is None:
            return None
        ws = self.workspaces.get(name)
        if ws is None:
            return 404, "NotFound", f"no workspace '{name}' on this node"
        if ws.attached_to:
            return 409, "FailedPrecondition", (f"workspace {name} is attached to {ws.attached_to} "
                                                "(one writer at a time)")
        ws.attached_to = holder
        return None

    def _release(self, holder: str) -> None:
        for ws in self.workspaces.values():
            if ws.attached_to == holder:
                ws.attached_to = None

    def _body(self, h: BaseHTTPRequestHandler) -> bytes:
        if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(h.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    h.rfile.readline()
                    return bytes(out)
                out += h.rfile.read(size)
                h.rfile.readline()
        n = int(h.headers.get("Content-Length", "0") or 0)
        return h.rfile.read(n) if n else b""

    def _collection(self, h: BaseHTTPRequestHandler, method: str, q: Dict[str, str],
                    js: Any) -> None:
        sel = q.get("labelSelector", "")
        if method == "POST":
            t = js.get("template", "")
            if t not in self.templates:
                return self._error(h, 404, "NotFound", f"no template '{t}'")
            if self.templates[t] != "Ready":
                return self._error(h, 409, "FailedPrecondition",
                                   f"template '{t}' is {self.templates[t]}")
            if len(self.sandboxes) >= self.capacity:
                return self._error(h, 429, "ResourceExhausted", "no capacity: 1 of 1 sandboxes")
            sid = js.get("id") or f"sb-{next(self._ids):04x}"
            if sid in self.sandboxes:
                return self._error(h, 409, "AlreadyExists", f"sandbox '{sid}' exists")
            refused = self._attach(js.get("workspace"), sid)
            if refused:
                return self._error(h, *refused)
            sb = self.add(sid, secrets.token_hex(8), template=t, labels=js.get("labels") or {})
            sb.workspace = js.get("workspace")
            return self._json(h, 201, sb.json(with_token=True))
        items = [s for s in list(self.sandboxes.values()) if _selector_match(s.labels, sel)]
        if method == "GET":
            return self._json(h, 200, {"items": [s.json() for s in items]})
        if not sel.strip():
            return self._error(h, 400, "InvalidArgument", "DELETE /v1/sandboxes needs a labelSelector")
        for s in items:
            self.remove(s.id)
        return self._json(h, 200, {"deleted": [s.id for s in items]})

    def _fork(self, h: BaseHTTPRequestHandler, sb: FakeSandbox, js: Dict[str, Any]) -> None:
        kids = []
        for _ in range(int(js.get("count", 1))):
            labels = dict(sb.labels)
            labels.update(js.get("labels") or {})
            labels["kubicle.dev/fork-of"] = sb.id
            kids.append(self.copy(sb.id, f"sb-{next(self._ids):04x}", secrets.token_hex(8), labels))
        return self._json(h, 201, {"items": [k.json(with_token=True) for k in kids]})

    # --- exec -----------------------------------------------------------------

    def run(self, sb: FakeSandbox, js: Dict[str, Any]) -> Tuple[List[Tuple[str, bytes]], Dict[str, Any]]:
        """(output chunks, exit) of one exec; raises _Fail for an API error."""
        if "shell" in js:
            if not self.shell:
                raise _Fail(501, "Unimplemented", "the guest has no shell")
            argv = js["shell"].split()
        else:
            argv = list(js["argv"])
        env = dict(sb.env)
        for e in js.get("env") or []:
            k, _, v = e.partition("=")
            env[k] = v
        stdin = base64.b64decode(js.get("stdinBase64", "") or "")
        timeout = js.get("timeoutSeconds", 60)
        prog, args = argv[0], argv[1:]
        out: List[Tuple[str, bytes]] = []
        code: Optional[int] = 0
        timed_out = False
        if prog == "echo":
            out.append(("stdout", (" ".join(args) + "\n").encode()))
        elif prog == "cat":
            if not args:
                out.append(("stdout", stdin))
            for p in args:
                if p in sb.files:
                    out.append(("stdout", sb.files[p]))
                else:
                    out.append(("stderr", f"cat: {p}: No such file or directory\n".encode()))
                    code = 1
        elif prog == "printenv":
            for n in args or sorted(env):
                if n in env:
                    out.append(("stdout", (env[n] if args else f"{n}={env[n]}").encode() + b"\n"))
                else:
                    code = 1
        elif prog == "pwd":
            out.append(("stdout", (js.get("cwd") or "/").encode() + b"\n"))
        elif prog == "true":
            pass
        elif prog == "false":
            code = 1
        elif prog == "sleep":
            secs = float(args[0])
            time.sleep(min(secs, timeout))
            if secs > timeout:
                code, timed_out = None, True
        elif prog == "chunks":      # chunks A B C: each argument its own chunk, on both streams
            for a in args:
                out.append(("stdout", a.encode()))
                out.append(("stderr", a.upper().encode()))
        elif prog == "utf8split":   # "é" split across two chunks
            out += [("stdout", b"caf\xc3"), ("stdout", b"\xa9\n")]
        elif prog == "binary":
            out.append(("stdout", b"\xff\xfe\x00"))
        elif prog == "explode":
            raise _Fail(500, "Internal", "the agent connection broke")
        else:
            out.append(("stderr", f"{prog}: not found\n".encode()))
            code = 127
        return out, {"exitCode": code, "signal": None, "timedOut": timed_out, "truncated": False}

    def _run(self, h: BaseHTTPRequestHandler, method: str, t: str, token: str, js: Any) -> None:
        """POST /v1/templates/{name}/run, as noderuntime/api/run.cc."""
        if method != "POST":
            return self._error(h, 405, "MethodNotAllowed", f"{method} is not allowed (allowed: POST)")
        if token != self.admin_token and (not token or self.run_tokens.get(t) != token):
            return self._error(h, 401, "Unauthenticated",
                               f"the token is not the run token of template \"{t}\"")
        js = dict(js or {})
        workspace = js.pop("workspace", None)
        if t not in self.templates:
            return self._error(h, 404, "NotFound", f"no template '{t}'")
        if self.templates[t] != "Ready":
            return self._error(h, 409, "FailedPrecondition",
                               f"template \"{t}\" is not ready on this node ({self.templates[t]})")
        refused = self._attach(workspace, "run-1")
        if refused:
            return self._error(h, *refused)
        ws = self.workspaces.get(workspace) if workspace else None
        try:
            # "wsput PATH TEXT" writes into the attached workspace, as a
            # command in the guest would at /workspace.
            argv = js.get("argv") or []
            if ws is not None and argv[:1] == ["wsput"] and len(argv) == 3:
                ws.files[argv[1]] = argv[2].encode()
                chunks, exit_ = [], {"exitCode": 0, "signal": None, "timedOut": False,
                                     "truncated": False}
            else:
                chunks, exit_ = self.run(FakeSandbox("run-1", t, {}, ""), js)
        except _Fail as f:
            self._release("run-1")
            return self._error(h, f.code, f.err, f.message)
        self._release("run-1")
        self.runs += 1
        o = b"".join(d for s, d in chunks if s == "stdout")
        e = b"".join(d for s, d in chunks if s == "stderr")
        self._json(h, 200, dict(exit_, encoding="utf-8", stdout=o.decode(), stderr=e.decode(),
                                timings={"restoreMs": 2.5, "execMs": 0.5, "totalMs": 3.0}))

    def _exec(self, h: BaseHTTPRequestHandler, sb: FakeSandbox, js: Dict[str, Any],
              stream: bool) -> None:
        try:
            chunks, exit_ = self.run(sb, js)
        except _Fail as f:
            if not stream or f.code == 501:
                return self._error(h, f.code, f.err, f.message)
            return self._ndjson(h, [{"error": {"code": f.err, "message": f.message}}])
        if stream:
            lines = [{"stream": s, "data": base64.b64encode(d).decode()} for s, d in chunks if d]
            return self._ndjson(h, lines + [{"exit": exit_}])
        o = b"".join(d for s, d in chunks if s == "stdout")
        e = b"".join(d for s, d in chunks if s == "stderr")
        try:
            j = dict(exit_, encoding="utf-8", stdout=o.decode(), stderr=e.decode())
        except UnicodeDecodeError:
            j = dict(exit_, encoding="base64", stdout=base64.b64encode(o).decode(),
                     stderr=base64.b64encode(e).decode())
        self._json(h, 200, j)

    def _files(self, h: BaseHTTPRequestHandler, method: str, sb: FakeSandbox, q: Dict[str, str],
               body: bytes) -> None:
        known = {"PUT": ("path", "mode"), "DELETE": ("path", "recursive")}.get(method, ("path",))
        path = self._path(h, q, known)
        if path is None:
            return
        if method != "DELETE" and (path == "/" or self._under(sb, path)):
            return self._error(h, 409, "FailedPrecondition", "path is a directory")
        if method == "PUT":
            if any(path[:i] in sb.files for i in range(1, len(path)) if path[i] == "/"):
                return self._error(h, 409, "FailedPrecondition", "a parent of path is a file")
            mode = int(q.get("mode", "0644"), 8)
            sb.files[path] = body
            sb.meta[path] = (mode, time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))
            return self._json(h, 200, {"path": path, "size": len(body), "mode": mode})
        if method == "DELETE":
            return self._remove(h, sb, path, q.get("recursive", "false"))
        if path not in sb.files:
            return self._error(h, 404, "NotFound", f"{path}: no such file")
        data = sb.files[path]
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    # --- stat, ls, remove: the node's codec (exec_files.cc) over the test
    # guest's answers (agent_files.cc), status codes and all ------------------

    def _path(self, h: BaseHTTPRequestHandler, q: Dict[str, str],
              known: Tuple[str, ...]) -> Optional[str]:
        """The checked path, or None once a 400 went out (node, then guest)."""
        for k in q:
            if k not in known:
                self._error(h, 400, "InvalidArgument", f"unknown query parameter \"{k}\"")
                return None
        path = q.get("path", "")
        if not path.startswith("/") or "\0" in path:
            self._error(h, 400, "InvalidArgument",
                        "query parameter \"path\" must be an absolute path")
            return None
        parts = path[1:].split("/")
        if path != "/" and (len(path) > 127 or any(p in ("", ".", "..") for p in parts)):
            self._error(h, 400, "InvalidArgument", _BAD_GUEST_PATH)
            return None
        return path

    @staticmethod
    def _under(sb: FakeSandbox, d: str) -> List[str]:
        prefix = "/" if d == "/" else d + "/"
        return [p for p in sb.files if p.startswith(prefix)]

    def _file_meta(self, h: BaseHTTPRequestHandler, sub: str, sb: FakeSandbox,
                   q: Dict[str, str]) -> None:
        path = self._path(h, q, ("path",))
        if path is None:
            return
        is_dir = path == "/" or bool(self._under(sb, path))
        if sub == "stat":
            if path in sb.files:
                mode, mtime = sb.meta.get(path, (0o644, None))
                return self._json(h, 200, {"path": path, "type": "file",
                                           "size": len(sb.files[path]), "mode": mode,
                                           "mtime": mtime, "uid": 0, "gid": 0})
            if not is_dir:
                return self._error(h, 404, "NotFound", "no such file or directory")
            return self._json(h, 200, {"path": path, "type": "dir", "size": 0, "mode": 0o755,
                                       "mtime": None, "uid": 0, "gid": 0})
        if not is_dir:
            if path in sb.files:
                return self._error(h, 409, "FailedPrecondition", "not a directory")
            return self._error(h, 404, "NotFound", "no such directory")
        self._json(h, 200, {"path": path, "items": self._entries(sb, path)})

    def _entries(self, sb: FakeSandbox, d: str) -> List[Dict[str, Any]]:
        base = d if d.endswith("/") else d + "/"
        items: Dict[str, Dict[str, Any]] = {}
        for p in sorted(self._under(sb, d)):
            name, _, rest = p[len(base):].partition("/")
            if name in items:
                continue
            mode, mtime = sb.meta.get(p, (0o644, None))
            items[name] = {"name": name, "path": base + name, "type": "dir" if rest else "file",
                           "size": 0 if rest else len(sb.files[p]),
                           "mode": 0o755 if rest else mode, "mtime": None if rest else mtime}
        return list(items.values())

    def _remove(self, h: BaseHTTPRequestHandler, sb: FakeSandbox, path: str,
                recursive: str) -> None:
        if recursive not in ("true", "1", "false", "0"):
            return self._error(h, 400, "InvalidArgument",
                               "query parameter \"recursive\" must be true or false")
        if path in sb.files:
            doomed = [path]
        elif path == "/":
            return self._error(h, 400, "InvalidArgument", "refusing to remove /")
        else:
            doomed = self._under(sb, path)
            if not doomed:
                return self._error(h, 404, "NotFound", "no such file or directory")
            if recursive in ("false", "0"):
                return self._error(h, 409, "FailedPrecondition", "directory not empty")
        for p in doomed:
            sb.files.pop(p, None)
            sb.meta.pop(p, None)
        self._json(h, 200, {"removed": path})

    # --- replies ----------------------------------------------------------------

    def _json(self, h: BaseHTTPRequestHandler, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _port(self, h: BaseHTTPRequestHandler, sb: FakeSandbox, port_s: str) -> None:
        """As noderuntime/api/ports.cc: 426, 400, 409, 502, then 101 and a relay."""
        if "upgrade" not in h.headers.get("Connection", "").lower() or \
                h.headers.get("Upgrade", "").lower() != "kubicle-tcp":
            return self._error(h, 426, "UpgradeRequired", "needs Upgrade: kubicle-tcp")
        if not port_s.isdigit() or port_s.startswith("0") or int(port_s) > 65535:
            return self._error(h, 400, "InvalidArgument",
                               f'port "{port_s}" must be a number from 1 to 65535')
        if not sb.network:
            return self._error(h, 409, "FailedPrecondition",
                               f"sandbox {sb.id} has no network: its guest ports cannot be reached")
        try:
            guest = socket.create_connection(("127.0.0.1", sb.ports.get(int(port_s), 1)))
        except OSError as e:
            return self._error(h, 502, "BadGateway",
                               f"connecting to 172.16.0.2:{port_s}: {e.strerror}")
        h.send_response(101)
        h.send_header("Connection", "Upgrade")
        h.send_header("Upgrade", "kubicle-tcp")
        h.end_headers()
        h.wfile.flush()
        h.close_connection = True
        _pipe(h.connection, guest)

    def _error(self, h: BaseHTTPRequestHandler, code: int, err: str, message: str) -> None:
        self._json(h, code, {"error": {"code": err, "message": message}})

    def _ndjson(self, h: BaseHTTPRequestHandler, lines: List[Any]) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/x-ndjson")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for line in lines:
            data = (json.dumps(line) + "\n").encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")


class _Fail(Exception):
    def __init__(self, code: int, err: str, message: str) -> None:
        super().__init__(message)
        self.code, self.err, self.message = code, err, message


def _pipe(client: socket.socket, guest: socket.socket) -> None:
    """Both ways until both ended (a TLS client's end ends both), one
    thread: the client side may be an SSLSocket. Blocking sends are fine
    for the tests' sizes."""
    open_ = {client: True, guest: True}
    try:
        while any(open_.values()):
            live = [s for s in open_ if open_[s]]
            ready = [s for s in live if isinstance(s, ssl.SSLSocket) and s.pending()]
            if not ready:
                ready, _, _ = select.select(live, [], [], 30)
                if not ready:
                    return
            for s in ready:
                other = guest if s is client else client
                try:
                    data = s.recv(65536)
                    if data:
                        other.sendall(data)
                        continue
                    open_[s] = False
                    if isinstance(other, ssl.SSLSocket):
                        return
                    other.shutdown(socket.SHUT_WR)
                except OSError:
                    return
    finally:
        guest.close()

