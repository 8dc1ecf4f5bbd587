"""An in-process fake kube-apiserver for the SDK's unit tests, with a fake
operator and node behind it.

It speaks enough of the real API for both the ``kubernetes`` and the
``kubernetes_asyncio`` clients: create (generateName), get, list and
watch (resourceVersion, labelSelector, fieldSelector metadata.name,
timeoutSeconds; chunked JSON lines), delete with propagationPolicy
(Background deletes dependents, Orphan strips their ownerReferences),
deletecollection, finalizers, and Secrets. The "operator" moves each new
Sandbox through Scheduled to Running as docs/api.md describes, with a token
Secret (none for a client's own token, ``spec.tokenSha256``, whose hash it
publishes) and a VM on a FakeNode (``k-<uid>``), or sets the condition a
template, capacity or VM problem would; SandboxForks get children
``<fork>-<i>`` forked from their source's files. A new Workspace is placed
on n1 with a token Secret ``<name>-workspace-token``, then its disk
(``w-<uid>``) is made on the FakeNode and reported in ``status.disk``
(``workspace_disks`` makes it never come, or fail); a Sandbox with
``spec.workspaceRef`` attaches it, and deleting a Workspace a Sandbox uses
waits with Ready False InUse (finalizer ``kubicle.dev/workspace-teardown``).

Like the real apiserver it can serve https only (``tls=``, for the
in-cluster loaders, which know no other scheme), refuse any bearer token
but ``token`` (401 Unauthorized) and refuse verbs RBAC would (``forbid``,
403 Forbidden); it records every request's Authorization header."""

from __future__ import annotations

import base64
import copy
import json
import queue
import random
import secrets
import ssl
import string
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlparse

from fake_node import FakeNode

Key = Tuple[str, str, str]  # plural, namespace, name
FINALIZER = "kubicle.dev/vm-teardown"
WORKSPACE_FINALIZER = "kubicle.dev/workspace-teardown"


def _match(obj: Dict[str, Any], label_sel: str, field_sel: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (t.strip() for t in label_sel.split(","))):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    for term in filter(None, (t.strip() for t in field_sel.split(","))):
        k, _, v = term.partition("=")
        if k == "metadata.name" and obj["metadata"]["name"] != v:
            return False
    return True


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class FakeCluster:
    def __init__(self, node: FakeNode, *, delay: float = 0.02,
                 tls: Optional[Tuple[str, str]] = None, ca_pem: str = "") -> None:
        self.node = node
        self.delay = delay
        # None: any bearer token (or none) will do; else only this one.
        self.token: Optional[str] = None
        # (HTTP method, plural) pairs answered 403, as RBAC would.
        self.forbid: set = set()
        self.auth_headers: List[str] = []   # each request's Authorization header, in order
        self.requests: List[Tuple[str, str]] = []   # each request's (method, path), in order
        self.posted: List[Tuple[str, str, Any]] = []   # each POST's (method, path, body)
        self.ca_pem = ca_pem                # the serving CA, for kubeconfig() under tls
        # Template name -> "ready", "notready", "vmfail" or "nodefull" (the node
        # refuses the VM for want of vCPUs); absent: TemplateNotFound.
        self.templates: Dict[str, str] = {"tg": "ready"}
        self.capacity = 1000
        # What the node does with a new Workspace's disk: "ready" (makes it),
        # "provisioning" (never gets to it), "diskfail" (cannot make it).
        self.workspace_disks = "ready"
        # The next this many VMs start with a token hash other than their
        # Secret's (the operator's token-replacement race, docs/sdk.md).
        self.wrong_vm_tokens = 0
        # An apiserver whose Sandbox CRD predates spec.tokenSha256: it
        # prunes the field, as a structural schema does an unknown one.
        self.prunes_token_sha256 = False
        self.objects: Dict[Key, Dict[str, Any]] = {}
        self.events: List[Tuple[int, Key, str, Dict[str, Any]]] = []
        self.rv = 100
        self.cond = threading.Condition()
        self.watches = 0           # watch requests served
        self.deletes: List[Tuple[str, str, str]] = []  # (plural, name, propagationPolicy)
        self._work: "queue.Queue[Optional[Key]]" = queue.Queue()
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                cluster._http(self, "GET")

            def do_POST(self) -> None:
                cluster._http(self, "POST")

            def do_DELETE(self) -> None:
                cluster._http(self, "DELETE")

            def do_PATCH(self) -> None:
                cluster._http(self, "PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.scheme = "http"
        if tls:  # (certificate chain file, key file): https only, as kube-apiserver
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self._ctl = threading.Thread(target=self._controller, daemon=True)
        self._ctl.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def bearer_tokens(self) -> List[str]:
        """The bearer tokens requests carried (the scheme's case varies by client)."""
        return [h.split(" ", 1)[1] for h in self.auth_headers
                if h.split(" ", 1)[0].lower() == "bearer" and " " in h]

    def kubeconfig(self, path: str, namespace: str = "team-a") -> str:
        ca = ""
        if self.ca_pem:
            ca = "\n    certificate-authority-data: " + base64.b64encode(self.ca_pem.encode()).decode()
        with open(path, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {self.url}{ca}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: {namespace}
current-context: fake
users:
- name: fake
  user:
    token: fake-token
""")
        return path

    def close(self) -> None:
        self._work.put(None)
        self.server.shutdown()
        self.server.server_close()

    # --- store ------------------------------------------------------------------

    def _write(self, key: Key, obj: Optional[Dict[str, Any]], kind: str) -> None:
        """Records a change (call with cond held)."""
        self.rv += 1
        if obj is not None:
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[key] = obj
            snap = copy.deepcopy(obj)
        else:
            snap = self.objects.pop(key)
            snap["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, key, kind, snap))
        self.cond.notify_all()
        self._work.put(key)

    def create(self, plural: str, ns: str, obj: Dict[str, Any]) -> Dict[str, Any]:
        with self.cond:
            meta = obj.setdefault("metadata", {})
            if not meta.get("name"):
                meta["name"] = meta.pop("generateName", "x-") + "".join(
                    random.choices(string.ascii_lowercase + string.digits, k=5))
            meta.pop("generateName", None)
            if plural in ("sandboxes", "sandboxforks") and self.prunes_token_sha256:
                obj.get("spec", {}).pop("tokenSha256", None)
                obj.get("spec", {}).pop("childTokenSha256", None)
            key = (plural, ns, meta["name"])
            if key in self.objects:
                raise _ApiFail(409, "AlreadyExists", f"{plural} \"{meta['name']}\" already exists")
            meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=_now(),
                        generation=1)
            self._write(key, obj, "ADDED")
            return copy.deepcopy(obj)

    def update(self, key: Key, fn: Any) -> None:
        with self.cond:
            obj = self.objects.get(key)
            if obj is None:
                return
            obj = copy.deepcopy(obj)
            fn(obj)
            self._write(key, obj, "MODIFIED")

    def delete(self, key: Key, policy: str = "Background") -> Dict[str, Any]:
        with self.cond:
            obj = self.objects.get(key)
            if obj is None:
                raise _ApiFail(404, "NotFound", f"{key[0]} \"{key[2]}\" not found")
            self.deletes.append((key[0], key[2], policy))
            uid = obj["metadata"]["uid"]
            for k, o in list(self.objects.items()):
                owners = o["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in owners):
                    continue
                if policy == "Orphan":
                    o = copy.deepcopy(o)
                    o["metadata"]["ownerReferences"] = [r for r in owners if r.get("uid") != uid]
                    self._write(k, o, "MODIFIED")
                else:
                    self._delete_locked(k)
            return self._delete_locked(key)

    def _delete_locked(self, key: Key) -> Dict[str, Any]:
        obj = copy.deepcopy(self.objects[key])
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _now()
                self._write(key, obj, "MODIFIED")
            return obj
        self._write(key, None, "DELETED")
        return obj

    def bump(self, n: int = 1) -> None:
        """Writes of other kinds (Lease renewals): the store's revision moves
        with no Sandbox event."""
        with self.cond:
            self.rv += n

    def list(self, plural: str, ns: str, label_sel: str = "", field_sel: str = "") -> List[Dict[str, Any]]:
        with self.cond:
            return [copy.deepcopy(o) for (p, n, _), o in sorted(self.objects.items())
                    if p == plural and n == ns and _match(o, label_sel, field_sel)]

    def get(self, plural: str, ns: str, name: str) -> Optional[Dict[str, Any]]:
        with self.cond:
            o = self.objects.get((plural, ns, name))
            return copy.deepcopy(o) if o else None

    # --- the fake operator and node ------------------------------------------

    def _controller(self) -> None:
        while True:
            key = self._work.get()
            if key is None:
                return
            try:
                self._reconcile(key)
            except Exception as e:  # a test fake: say so, keep going
                print(f"fake controller: {key}: {e!r}")

    def _reconcile(self, key: Key) -> None:
        plural, ns, name = key
        obj = self.get(plural, ns, name)
        if obj is None:
            return
        if plural == "sandboxes":
            self._sandbox(key, obj)
        elif plural == "sandboxforks":
            self._fork(key, obj)
        elif plural == "workspaces":
            self._workspace(key, obj)

    def _sandbox(self, key: Key, obj: Dict[str, Any]) -> None:
        meta, status = obj["metadata"], obj.get("status") or {}
        if meta.get("deletionTimestamp"):
            time.sleep(self.delay)
            self.node.remove("k-" + meta["uid"])

            def unfinalize(o: Dict[str, Any]) -> None:
                o["metadata"]["finalizers"] = []
            self.update(key, unfinalize)
            with self.cond:
                if key in self.objects and not self.objects[key]["metadata"].get("finalizers"):
                    self._write(key, None, "DELETED")
            return self._detach(key[1], obj)
        if status.get("phase") in ("Running", "Suspended") and \
                bool(obj["spec"].get("suspend")) != (status["phase"] == "Suspended"):
            return self._suspend(key, obj)
        if status.get("phase") in ("Running", "Failed", "Suspended") or status.get("conditions"):
            if status.get("phase") != "Scheduled":
                return
        time.sleep(self.delay)
        spec = obj["spec"]
        template = spec["templateRef"]["name"]
        source = spec.get("forkSource")
        if status.get("phase") != "Scheduled":
            reason = self._placement(template, source, key[1])
            if reason:
                return self._set(key, "Pending", sched=("False", reason[0], reason[1]),
                                 ready=("False", "Unscheduled", reason[1]))

            def place(o: Dict[str, Any]) -> None:
                o["metadata"].setdefault("labels", {}).update(
                    {"kubicle.dev/node": "n1", "kubicle.dev/template": template})
                o["metadata"]["finalizers"] = [FINALIZER]
                o["status"] = {"phase": "Scheduled", "nodeName": "n1",
                               "conditions": [_cond("Scheduled", "True", "Scheduled", ""),
                                              _cond("Ready", "False", "Scheduled", "")]}
            return self.update(key, place)
        if self.templates.get(template) == "vmfail":
            return self._set(key, "Failed", sched=("True", "Scheduled", ""),
                             ready=("False", "VMFailed", "restore failed"),
                             vm={"state": "Failed", "message": "kubicle-vmm exited: restore failed"})
        if self.templates.get(template) == "nodefull":
            msg = ("node is full: 640 of 18432 MiB and 64 of 64 vCPUs in use; this sandbox "
                   "needs 64 MiB and 1 vCPUs")
            return self._set(key, "Failed", sched=("True", "Scheduled", ""),
                             ready=("False", "VMFailed", msg), vm={"state": "Failed", "message": msg})
        refused = self._attach(key[1], obj)
        if refused:
            return self._set(key, "Pending", sched=("False", refused[0], refused[1]),
                             ready=("False", "Unscheduled", refused[1]))
        env = {e["name"]: e["value"] for e in spec.get("env") or []}
        labels = meta.get("labels") or {}
        own = spec.get("tokenSha256") or ""
        if own:
            # The client's own token: no Secret; the node gets its hash.
            if source:
                src = self.get("sandboxes", key[1], source)
                self.node.copy("k-" + src["metadata"]["uid"], "k-" + meta["uid"], "",
                               labels).token_sha256 = own
            else:
                self.node.add("k-" + meta["uid"], "", template=template, labels=labels, env=env,
                              token_sha256=own)
            return self._set(key, "Running", sched=("True", "Scheduled", ""),
                             ready=("True", "Running", ""), token_sha256=own,
                             vm={"state": "Running", "endpoint": self.node.address,
                                 "restoreMillis": 4.2})
        token = secrets.token_hex(16)
        secret = f"{meta['name']}-token"
        self._create_token_secret(key[1], secret, "Sandbox", meta, token)
        if self.wrong_vm_tokens > 0:
            self.wrong_vm_tokens -= 1
            token = "not-the-secrets-token"
        if source:
            src = self.get("sandboxes", key[1], source)
            self.node.copy("k-" + src["metadata"]["uid"], "k-" + meta["uid"], token, labels)
        else:
            self.node.add("k-" + meta["uid"], token, template=template, labels=labels, env=env)
        self._set(key, "Running", sched=("True", "Scheduled", ""), ready=("True", "Running", ""),
                  vm={"state": "Running", "endpoint": self.node.address, "restoreMillis": 4.2},
                  secret=secret)

    def _attach(self, ns: str, sbx: Dict[str, Any]) -> Optional[Tuple[str, str]]:
        """A Sandbox's workspace attached to its VM-to-be: None, or why not."""
        name = ((sbx["spec"].get("workspaceRef") or {}).get("name"))
        if not name:
            return None
        ws = self.get("workspaces", ns, name)
        disk = ((ws or {}).get("status") or {}).get("disk") or {}
        if not disk.get("id"):
            return ("WorkspaceNotReady", f"Workspace {name} has no disk yet")
        holder = "k-" + sbx["metadata"]["uid"]
        with self.node.lock:
            if self.node._attach(disk["id"], holder):
                return ("WorkspaceInUse", f"Workspace {name} is in use")

        def held(o: Dict[str, Any]) -> None:
            o["status"]["attachedTo"] = sbx["metadata"]["name"]
            o["status"]["disk"]["attachedTo"] = holder
        self.update(("workspaces", ns, name), held)
        return None

    def _detach(self, ns: str, sbx: Dict[str, Any]) -> None:
        """After a Sandbox is gone: its workspace is free (and may go now)."""
        name = ((sbx["spec"].get("workspaceRef") or {}).get("name"))
        if not name:
            return

        def free(o: Dict[str, Any]) -> None:
            st = o.get("status") or {}
            if st.get("attachedTo") == sbx["metadata"]["name"]:
                st["attachedTo"] = None
                (st.get("disk") or {}).pop("attachedTo", None)
        self.update(("workspaces", ns, name), free)

    def _workspace(self, key: Key, obj: Dict[str, Any]) -> None:
        """The operator and node agent for a Workspace the SDK made (one made
        with a status is the test's own, left as it is)."""
        meta = obj["metadata"]
        if meta.get("deletionTimestamp"):
            return self._workspace_teardown(key, obj)
        status = obj.get("status")
        if status is None:
            time.sleep(self.delay)
            return self._place_workspace(key, obj)
        if WORKSPACE_FINALIZER not in (meta.get("finalizers") or []) or \
                status.get("phase") != "Pending" or self.workspace_disks == "provisioning":
            return
        time.sleep(self.delay)
        disk_id = "w-" + meta["uid"]
        if self.workspace_disks == "diskfail":
            msg = "mke2fs failed: no space left on device"
            return self.update(key, lambda o: o["status"].update(
                phase="Failed", disk={"state": "Failed", "message": msg},
                conditions=[_cond("Scheduled", "True", "Scheduled", "placed on node n1"),
                            _cond("Ready", "False", "DiskFailed", msg)]))
        secret = self.get("secrets", key[1], status["tokenSecretName"])
        token = base64.b64decode(secret["data"]["token"]).decode()
        self.node.add_workspace(disk_id, obj["spec"]["sizeMiB"], token)
        self.update(key, lambda o: o["status"].update(
            phase="Ready", bytesUsed=0,
            disk={"state": "Ready", "id": disk_id, "endpoint": self.node.address, "bytesUsed": 0},
            conditions=[_cond("Scheduled", "True", "Scheduled", "placed on node n1"),
                        _cond("Ready", "True", "DiskReady", "the disk is ready on node n1")]))

    def _create_token_secret(self, ns: str, name: str, kind: str, owner: Dict[str, Any],
                             token: str) -> None:
        """The operator's token Secret of a Sandbox or Workspace, owned by it."""
        self.create("secrets", ns, {
            "apiVersion": "v1", "kind": "Secret", "type": f"kubicle.dev/{kind.lower()}-token",
            "metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "kubicle.dev/v1alpha1", "kind": kind, "name": owner["name"],
                 "uid": owner["uid"]}]},
            "data": {"token": base64.b64encode(token.encode()).decode()}})

    def _place_workspace(self, key: Key, obj: Dict[str, Any]) -> None:
        meta = obj["metadata"]
        secret = f"{meta['name']}-workspace-token"
        self._create_token_secret(key[1], secret, "Workspace", meta, secrets.token_hex(16))

        def place(o: Dict[str, Any]) -> None:
            o["metadata"].setdefault("labels", {})["kubicle.dev/node"] = "n1"
            o["metadata"]["finalizers"] = [WORKSPACE_FINALIZER]
            o["status"] = {"phase": "Pending", "nodeName": "n1", "tokenSecretName": secret,
                           "tokenSha256": "0" * 64,
                           "conditions": [
                               _cond("Scheduled", "True", "Scheduled", "placed on node n1"),
                               _cond("Ready", "False", "Provisioning",
                                     "waiting for node n1 to make the disk")]}
        self.update(key, place)

    def _workspace_teardown(self, key: Key, obj: Dict[str, Any]) -> None:
        """The finalizer holds while a placed Sandbox uses the workspace."""
        if WORKSPACE_FINALIZER not in (obj["metadata"].get("finalizers") or []):
            return
        holders = sorted(o["metadata"]["name"] for o in self.list("sandboxes", key[1])
                         if (o["spec"].get("workspaceRef") or {}).get("name") == key[2] and
                         (o["metadata"].get("labels") or {}).get("kubicle.dev/node"))
        if holders:
            msg = (f"deletion waits for Sandbox {', '.join(holders)}, which uses the workspace, "
                   "to be deleted")
            ready = [c for c in (obj.get("status") or {}).get("conditions") or []
                     if c["type"] == "Ready"]
            if not ready or ready[0]["reason"] != "InUse":
                self.update(key, lambda o: o["status"].update(
                    phase="Terminating",
                    conditions=[_cond("Scheduled", "True", "Scheduled", "placed on node n1"),
                                _cond("Ready", "False", "InUse", msg)]))
            return
        time.sleep(self.delay)
        with self.node.lock:
            self.node.workspaces.pop("w-" + obj["metadata"]["uid"], None)

        def unfinalize(o: Dict[str, Any]) -> None:
            o["metadata"]["finalizers"] = []
        self.update(key, unfinalize)
        with self.cond:
            if key in self.objects and not self.objects[key]["metadata"].get("finalizers"):
                self._write(key, None, "DELETED")

    def _suspend(self, key: Key, obj: Dict[str, Any]) -> None:
        """The node and the operator for spec.suspend: the VM is suspended
        (phase Suspended, no endpoint) or resumed, files kept."""
        time.sleep(self.delay)
        sb = self.node.sandboxes.get("k-" + obj["metadata"]["uid"])
        if obj["spec"].get("suspend"):
            if sb is not None:
                sb.state = "Suspended"
            return self._set(key, "Suspended", sched=("True", "Scheduled", ""),
                             ready=("False", "Suspended", "the VM is suspended (spec.suspend)"),
                             vm={"state": "Suspended"})
        if sb is not None:
            sb.state = "Running"
        self._set(key, "Running", sched=("True", "Scheduled", ""), ready=("True", "Running", ""),
                  vm={"state": "Running", "endpoint": self.node.address, "restoreMillis": 4.2})

    def _placement(self, template: str, source: Optional[str], ns: str) -> Optional[Tuple[str, str]]:
        if source:
            src = self.get("sandboxes", ns, source)
            if src is None:
                return ("SourceNotFound", f"fork source {source} does not exist")
            return None
        state = self.templates.get(template)
        if state is None:
            return ("TemplateNotFound", f"SandboxTemplate {template} not found")
        if state == "notready":
            return ("NoReadyNode", f"no live node has SandboxTemplate {template} ready")
        running = sum(1 for o in self.list("sandboxes", ns)
                      if (o.get("status") or {}).get("phase") in ("Scheduled", "Running"))
        if running >= self.capacity:
            return ("InsufficientCapacity", "no node has room: n1 runs 1 of 1 sandboxes")
        return None

    def _set(self, key: Key, phase: str, *, sched: Tuple[str, str, str], ready: Tuple[str, str, str],
             vm: Optional[Dict[str, Any]] = None, secret: str = "",
             token_sha256: str = "") -> None:
        def fn(o: Dict[str, Any]) -> None:
            st = o.setdefault("status", {})
            st["phase"] = phase
            st["conditions"] = [_cond("Scheduled", *sched), _cond("Ready", *ready)]
            if vm:
                st["vm"] = vm
            if secret:
                st["tokenSecretName"] = secret
                st["tokenSha256"] = "0" * 64
            if token_sha256:
                st["tokenSha256"] = token_sha256
        self.update(key, fn)

    def _fork(self, key: Key, fork: Dict[str, Any]) -> None:
        if fork["metadata"].get("deletionTimestamp") or (fork.get("status") or {}).get("phase"):
            return
        src = self.get("sandboxes", key[1], fork["spec"]["sourceRef"]["name"])
        if src is None:
            return self.update(key, lambda o: o.update(status={"phase": "Pending", "conditions": [
                _cond("Ready", "False", "SourceNotFound", "waiting for the source")]}))
        labels = {k: v for k, v in (src["metadata"].get("labels") or {}).items()
                  if k in ("kubicle.dev/run", "kubicle.dev/agent", "kubicle.dev/template")}
        labels.update((fork["spec"].get("childMetadata") or {}).get("labels") or {})
        labels["kubicle.dev/fork-of"] = fork["metadata"]["name"]
        hashes = fork["spec"].get("childTokenSha256") or []
        for i in range(fork["spec"].get("replicas", 1)):
            spec = {"templateRef": src["spec"]["templateRef"], "forkSource": src["metadata"]["name"]}
            if i < len(hashes):
                spec["tokenSha256"] = hashes[i]   # the client's own token of child i
            self.create("sandboxes", key[1], {
                "apiVersion": "kubicle.dev/v1alpha1", "kind": "Sandbox",
                "metadata": {"name": f"{fork['metadata']['name']}-{i}", "labels": dict(labels),
                             "ownerReferences": [{"apiVersion": "kubicle.dev/v1alpha1",
                                                  "kind": "SandboxFork", "controller": True,
                                                  "name": fork["metadata"]["name"],
                                                  "uid": fork["metadata"]["uid"]}]},
                "spec": spec})
        self.update(key, lambda o: o.update(status={"phase": "Forking"}))

    # --- HTTP ---------------------------------------------------------------------

    def _http(self, h: BaseHTTPRequestHandler, method: str) -> None:
        u = urlparse(h.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        n = int(h.headers.get("Content-Length", "0") or 0)
        body = json.loads(h.rfile.read(n)) if n else {}
        p = [x for x in u.path.split("/") if x]
        auth = h.headers.get("Authorization", "")
        self.auth_headers.append(auth)
        self.requests.append((method, u.path))
        if method == "POST":
            self.posted.append((method, u.path, copy.deepcopy(body)))
        try:
            scheme, _, token = auth.partition(" ")
            if self.token is not None and (scheme.lower() != "bearer" or token != self.token):
                # kube-apiserver's answer to a credential it does not know.
                raise _ApiFail(401, "Unauthorized", "Unauthorized")
            if p[:3] == ["apis", "kubicle.dev", "v1alpha1"] and len(p) >= 6 and p[3] == "namespaces":
                ns, plural, name = p[4], p[5], (p[6] if len(p) > 6 else None)
            elif p[:2] == ["api", "v1"] and len(p) == 6 and p[4] == "secrets":
                ns, plural, name = p[3], "secrets", p[5]
            elif p[:4] == ["apis", "coordination.k8s.io", "v1", "namespaces"] and len(p) == 7 \
                    and p[5] == "leases" and method == "GET":
                ns, plural, name = p[4], "leases", p[6]
            else:
                raise _ApiFail(404, "NotFound", f"no route {u.path}")
            if (method, plural) in self.forbid:   # in the RBAC authorizer's words
                verb = {"POST": "create", "DELETE": "delete"}.get(method, "get" if name else "list")
                group = {"secrets": "", "leases": "coordination.k8s.io"}.get(plural, "kubicle.dev")
                raise _ApiFail(403, "Forbidden",
                               f'{plural}{"." + group if group else ""} is forbidden: User '
                               f'"system:serviceaccount:{ns}:agent" cannot {verb} resource '
                               f'"{plural}" in API group "{group}" in the namespace "{ns}"')
            self._serve(h, method, ns, plural, name, q, body)
        except _ApiFail as f:
            self._send(h, f.code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "message": f.message, "reason": f.reason, "code": f.code})

    def _serve(self, h: BaseHTTPRequestHandler, method: str, ns: str, plural: str,
               name: Optional[str], q: Dict[str, str], body: Dict[str, Any]) -> None:
        lsel, fsel = q.get("labelSelector", ""), q.get("fieldSelector", "")
        if method == "POST":
            return self._send(h, 201, self.create(plural, ns, body))
        if method == "PATCH":
            return self._send(h, 200, self._patch(plural, ns, name, body,
                                                  h.headers.get("Content-Type", "")))
        if method == "DELETE":
            policy = body.get("propagationPolicy") or q.get("propagationPolicy") or "Background"
            if name:
                return self._send(h, 200, self.delete((plural, ns, name), policy))
            for o in self.list(plural, ns, lsel):
                try:
                    self.delete((plural, ns, o["metadata"]["name"]), policy)
                except _ApiFail:
                    pass
            return self._send(h, 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        if name:
            o = self.get(plural, ns, name)
            if o is None:
                raise _ApiFail(404, "NotFound", f"{plural} \"{name}\" not found")
            return self._send(h, 200, o)
        if q.get("watch") in ("true", "1", "True"):
            return self._watch(h, plural, ns, lsel, fsel, int(q.get("resourceVersion", "0") or 0),
                               float(q.get("timeoutSeconds", "30")))
        with self.cond:
            items, rv = self.list(plural, ns, lsel, fsel), self.rv
        self._send(h, 200, {"kind": "List", "apiVersion": "kubicle.dev/v1alpha1",
                            "metadata": {"resourceVersion": str(rv)}, "items": items})

    def _patch(self, plural: str, ns: str, name: Optional[str],
               body: Dict[str, Any], content_type: str) -> Dict[str, Any]:
        """A merge patch of a Sandbox's spec (what the SDK patches: spec.suspend).
        The patch type is the Content-Type's, as kube-apiserver reads it: an
        object sent as a JSON patch is refused in its words."""
        if content_type.split(";")[0].strip() != "application/merge-patch+json":
            if content_type.startswith("application/json-patch+json") and isinstance(body, dict):
                raise _ApiFail(400, "BadRequest", "error decoding patch: json: cannot unmarshal "
                               "object into Go value of type []handlers.jsonPatchOp")
            raise _ApiFail(415, "UnsupportedMediaType",
                           f"the fake takes merge patches only, not {content_type!r}")
        if plural != "sandboxes" or not name or set(body) != {"spec"}:
            raise _ApiFail(405, "MethodNotAllowed", "the fake patches Sandbox specs only")
        key = (plural, ns, name)
        with self.cond:
            if key not in self.objects:
                raise _ApiFail(404, "NotFound", f"{plural} \"{name}\" not found")

        def fn(o: Dict[str, Any]) -> None:
            o["spec"].update(body["spec"])
            o["metadata"]["generation"] = o["metadata"].get("generation", 1) + 1
        self.update(key, fn)
        return copy.deepcopy(self.get(plural, ns, name))

    def _watch(self, h: BaseHTTPRequestHandler, plural: str, ns: str, lsel: str, fsel: str,
               rv: int, timeout: float) -> None:
        self.watches += 1
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        deadline = time.monotonic() + timeout
        i = 0
        try:
            while True:
                with self.cond:
                    pending = []
                    while i < len(self.events):
                        erv, key, kind, obj = self.events[i]
                        i += 1
                        if erv > rv and key[0] == plural and key[1] == ns and _match(obj, lsel, fsel):
                            pending.append({"type": kind, "object": obj})
                    if not pending:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self.cond.wait(min(left, 0.5))
                        continue
                for ev in pending:
                    data = (json.dumps(ev) + "\n").encode()
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                h.wfile.flush()
            h.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def publish_ca(cluster: FakeCluster, pem: str) -> None:
    """Node n1's heartbeat Lease with its serving CA, as kubicle-node writes it."""
    cluster.create("leases", "kubicle-node-lease", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kubicle-node-n1", "labels": {"kubicle.dev/node": "n1"},
                     "annotations": {"kubicle.dev/serving-ca": pem}},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}})


def _cond(type_: str, status: str, reason: str, message: str) -> Dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": _now()}


class _ApiFail(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
