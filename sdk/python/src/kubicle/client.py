"""The synchronous client: ``Kubicle``, its ``sandboxes`` and each
``Sandbox`` with its ``filesystem``. Thread-safe: a fan-out runs one
sandbox per thread over one client (docs/sdk.md)."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import httpx

from . import _http, _labels, _ports, _run, _wire, errors
from ._api import DEFAULT_CREATE_TIMEOUT, DEFAULT_DELETE_TIMEOUT, DEFAULT_SUSPEND_TIMEOUT
from ._dataplane import Content, DataPlane
from ._ports import PortForward, PortStream
from ._ref import Ref
from .models import EntryInfo, ExecResult, FileInfo, RunResult, SandboxInfo



def _merge_env(base: Mapping[str, str], own: Optional[Mapping[str, str]]) -> Dict[str, str]:
    env = dict(base)
    env.update(own or {})
    return env


def exec_with_fallback(run: Any, cmd: _wire.Command, kw: Dict[str, Any]) -> Any:
    """Builds the body; a shell command the guest cannot run (no shell) is
    retried as an argv when it has no shell syntax. ``run(body)`` calls the
    node (sync here; the async client has its own twin)."""
    try:
        return run(_wire.exec_body(cmd, **kw))
    except errors.UnsupportedError:
        argv = _wire.shell_as_argv(cmd)
        if argv is None:
            raise
        return run(_wire.exec_body(cmd, force_argv=argv, **kw))


def finish_exec(result: ExecResult, raise_on_timeout: bool, sandbox: str,
                timeout: int) -> ExecResult:
    if result.timed_out and raise_on_timeout:
        raise errors.ExecTimeoutError(f"the command ran past its {timeout} s timeout",
                                      result=result, sandbox=sandbox)
    return result


class Filesystem:
    """Files of one sandbox. Paths are absolute."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def write(self, path: str, data: Content, *, mode: Optional[int] = None) -> int:
        """Writes ``data`` (str, bytes, a binary file object or an iterable of
        bytes, streamed) to ``path``; returns the size written."""
        return int(self._sb._dp().write(path, data, mode).get("size", 0))

    def read(self, path: str, *, format: str = "text") -> Any:
        """The file's contents: ``format="text"`` (str), ``"bytes"``, or
        ``"stream"`` (an iterator of byte chunks, for large files)."""
        if format == "stream":
            return self._sb._dp().read_stream(path)
        data = self._sb._dp().read(path)
        if format == "bytes":
            return data
        if format == "text":
            return data.decode("utf-8")
        raise ValueError('format must be "text", "bytes" or "stream"')

    def read_to(self, path: str, out: Any) -> int:
        """Streams the file into a binary file object; returns its size."""
        n = 0
        for chunk in self._sb._dp().read_stream(path):
            out.write(chunk)
            n += len(chunk)
        return n

    def exists(self, path: str) -> bool:
        """True when ``path`` is there (a file, directory or anything else)."""
        return self._sb._dp().exists(path)

    def stat(self, path: str) -> FileInfo:
        """``path``'s type, size, mode, mtime and owner (PathNotFoundError)."""
        return self._sb._dp().stat(path)

    def list(self, path: str = "/") -> List[EntryInfo]:
        """The entries of a directory, in the guest's order: PathNotFoundError
        when missing, ConflictError when ``path`` is not a directory."""
        return self._sb._dp().list(path)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or an empty directory; a directory with anything
        in it only with ``recursive=True`` (else ConflictError). A missing
        path is PathNotFoundError."""
        self._sb._dp().remove(path, recursive)


class Sandbox:
    """One running sandbox. ``with client.sandboxes.create(...) as sb:``
    deletes it on the way out."""

    def __init__(self, client: "Kubicle", ref: Ref) -> None:
        self._client, self._ref = client, ref
        self.filesystem = Filesystem(self)
        self.files = self.filesystem  # E2B's name for it

    # --- identity ---------------------------------------------------------
    @property
    def name(self) -> str:
        return self._ref.info.name

    @property
    def id(self) -> str:
        return self._ref.info.id

    @property
    def info(self) -> SandboxInfo:
        return self._ref.info

    @property
    def metadata(self) -> Dict[str, str]:
        return dict(self._ref.info.metadata)

    def refresh(self) -> SandboxInfo:
        fresh = self._client._backend.get(self.name)
        self._ref.raw, self._ref.info = fresh.raw, fresh.info
        return self._ref.info

    def __repr__(self) -> str:
        return f"Sandbox(name={self.name!r}, id={self.id!r}, phase={self._ref.info.phase!r})"

    def _dp(self) -> DataPlane:
        self._client._backend.resolve(self._ref)
        assert self._ref.base and self._ref.token
        return DataPlane(self._ref.http or self._client._http, self._ref.base, self._ref.token,
                         self.name)

    # --- commands ---------------------------------------------------------
    def exec(self, cmd: Union[str, Sequence[str]], *, timeout_seconds: Optional[float] = 60,
             env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             stdin: Union[bytes, str, None] = None, on_stdout: Optional[_wire.OutputCallback] = None,
             on_stderr: Optional[_wire.OutputCallback] = None,
             raise_on_timeout: bool = True) -> ExecResult:
        """Runs ``cmd`` (an argv list, or a shell command string) and returns
        its result. With ``on_stdout``/``on_stderr`` output is streamed to
        them as it comes. A command past ``timeout_seconds`` raises
        ExecTimeoutError (``raise_on_timeout=False``: a result with
        ``timed_out``). A non-zero exit is not an error: see ``check()``."""
        dp = self._dp()
        streamed = on_stdout is not None or on_stderr is not None
        kw = dict(env=_merge_env(self._ref.env, env) or None, cwd=cwd, stdin=stdin,
                  timeout_seconds=timeout_seconds)

        def run(body: Dict[str, Any]) -> ExecResult:
            stream = _wire.ExecStream(on_stdout, on_stderr, self.name) if streamed else None
            return dp.exec(body, stream)

        result = exec_with_fallback(run, cmd, kw)
        return finish_exec(result, raise_on_timeout, self.name, _wire.exec_timeout(timeout_seconds))

    # --- ports ------------------------------------------------------------
    def connect_port(self, port: int, *, timeout: Optional[float] = 30.0) -> PortStream:
        """A stream to the guest's TCP ``port`` through the node's data plane
        (only this sandbox's token holder can open one): a socket-like
        PortStream (``sendall``, ``recv``, ``shutdown_write``, ``close``; a
        context manager). ``timeout`` bounds connecting and the node's
        answer. PortError when nothing listens there, it does not answer,
        the sandbox has no network, or too many streams are open."""
        self._client._backend.resolve(self._ref)
        assert self._ref.base and self._ref.token
        return _ports.open_stream(self._ref.base, self._ref.token, _ports.check_port(port),
                                  ssl_context=self._ssl(), timeout=timeout, sandbox=self.name)

    def forward_port(self, port: int, local_port: int = 0, *,
                     timeout: Optional[float] = 30.0) -> PortForward:
        """Listens on ``127.0.0.1:local_port`` (0: any free port, see
        ``.local_port``) and forwards every connection to the guest's
        ``port`` over a stream of its own. A context manager:
        ``with sb.forward_port(3000) as fwd: urlopen(f"http://127.0.0.1:{fwd.local_port}/")``.
        A refused stream closes that local connection; the error is kept
        in ``.errors``."""
        _ports.check_port(port)
        self._client._backend.resolve(self._ref)
        return PortForward(lambda: self.connect_port(port, timeout=timeout), local_port)

    def _ssl(self) -> Any:
        if self._ref.ssl is not None:
            return self._ref.ssl
        return _http.ssl_context(self._client._transport.verify)

    # --- lifecycle --------------------------------------------------------
    def fork(self, count: int = 1, *, metadata: Optional[Mapping[str, str]] = None,
             ttl_seconds: Optional[int] = None,
             timeout: float = DEFAULT_CREATE_TIMEOUT) -> List["Sandbox"]:
        """``count`` copy-on-write copies of this running sandbox, returned
        once all are Ready. They carry its run and agent metadata (plus
        ``metadata``) and outlive it."""
        refs = self._client._backend.fork(self._ref, count=count,
                                          labels=_labels.to_labels(metadata),
                                          ttl_seconds=ttl_seconds, timeout=timeout)
        return [Sandbox(self._client, r) for r in refs]

    def suspend(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Parks the sandbox on its node: its memory, devices and disks are
        saved there and its VM stops (phase ``Suspended``); returns once
        they are. Commands and files then raise ConflictError until
        ``resume()``. Its TTL keeps counting. Idempotent. With Kubernetes
        this sets ``spec.suspend: true`` (so ``patch`` on Sandboxes is
        needed); CapacityError when the node has no disk room for it."""
        self._set(True, timeout)
        return self._ref.info

    def resume(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Runs a suspended sandbox again on the same node, with its files,
        memory and running processes as they were; returns once it answers.
        Idempotent."""
        self._set(False, timeout)
        return self._ref.info

    def _set(self, suspend: bool, timeout: float) -> None:
        fresh = self._client._backend.set_suspend(self._ref, suspend, timeout=timeout)
        self._ref.raw, self._ref.info = fresh.raw, fresh.info
        self._ref.token, self._ref.base = fresh.token, fresh.base

    def delete(self, *, wait: bool = True, timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        """Deletes the sandbox; with ``wait`` returns once it is gone."""
        self._client._backend.delete(self.name, wait=wait, timeout=timeout)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete()


class Sandboxes:
    def __init__(self, client: "Kubicle") -> None:
        self._client = client

    def create(self, template: str, *, ttl_seconds: Optional[int] = None,
               metadata: Optional[Mapping[str, str]] = None,
               env: Optional[Mapping[str, str]] = None,
               resources: Optional[Mapping[str, int]] = None,
               timeout: float = DEFAULT_CREATE_TIMEOUT, name: Optional[str] = None,
               wait_pending: bool = False, workspace: Optional[str] = None) -> Sandbox:
        """Creates a sandbox of ``template`` and returns it once Ready.

        Raises TemplateNotFoundError, TemplateNotReadyError or CapacityError
        as soon as the operator says so (``wait_pending=True`` keeps waiting
        for a node or room until ``timeout``), SandboxFailedError if the VM
        fails, SandboxTimeoutError after ``timeout`` seconds. On any error
        the half-made sandbox is deleted. ``workspace`` attaches that
        workspace (mounted at /workspace; WorkspaceInUseError while another
        sandbox or run holds it) until the sandbox is deleted."""
        ref = self._client._backend.create(
            template=template, name=name, labels=_labels.to_labels(metadata),
            ttl_seconds=ttl_seconds, env=env, resources=resources, timeout=timeout,
            wait_pending=wait_pending, workspace=workspace)
        return Sandbox(self._client, ref)

    def get(self, name: str) -> Sandbox:
        return Sandbox(self._client, self._client._backend.get(name))

    def list(self, metadata: Optional[Mapping[str, str]] = None) -> List[Sandbox]:
        """Sandboxes whose metadata includes every given key and value."""
        return [Sandbox(self._client, r)
                for r in self._client._backend.list(_labels.selector(metadata))]

    def delete(self, metadata: Mapping[str, str], *,
               timeout: float = DEFAULT_DELETE_TIMEOUT) -> List[str]:
        """The sweep: deletes every sandbox (and SandboxFork) with this
        metadata, e.g. ``{"run": run_id}``, and returns the names once all
        are gone. Empty metadata is refused."""
        sel = _labels.selector(metadata)
        if not sel:
            raise ValueError("a sweep needs metadata (e.g. {'run': run_id}): nothing deletes "
                             "every sandbox by accident")
        return self._client._backend.sweep(sel, timeout=timeout)


class Kubicle:
    """A client of Kubicle.

    ``Kubicle()`` talks to Kubernetes (in-cluster service account, else
    ``kubeconfig``/``$KUBECONFIG``/``~/.kube/config`` with ``context``) in
    ``namespace`` (default: the context's, else ``default``).
    ``Kubicle(node_url=..., token=...)`` talks to one kubicle-node with its
    admin token (``$KUBICLE_NODE_TOKEN`` when not given).

    The data plane: with Kubernetes, each node is reached over https and
    verified against the CA its Lease publishes (``kubicle.dev/serving-ca``
    in ``node_lease_namespace``; plain http for a node publishing none), so
    the client needs ``get`` on Leases there. ``verify`` (a CA bundle path
    or an ssl.SSLContext; ``$KUBICLE_NODE_CA_FILE`` for a standalone node
    when not given) and ``data_plane_scheme`` are for a standalone node, and
    override the Lease's CA when given."""

    def __init__(self, *, namespace: Optional[str] = None, kubeconfig: Optional[str] = None,
                 context: Optional[str] = None, node_url: Optional[str] = None,
                 token: Optional[str] = None, verify: _http.Verify = True,
                 data_plane_scheme: str = "http", request_timeout: float = 30.0,
                 max_connections: int = 1024,
                 node_lease_namespace: str = "kubicle-node-lease") -> None:
        self._lease_ns = node_lease_namespace
        if node_url and verify is True and os.environ.get("KUBICLE_NODE_CA_FILE"):
            verify = os.environ["KUBICLE_NODE_CA_FILE"]  # as kubicle-nodectl reads it
        self._transport = _http.TransportConfig(scheme=data_plane_scheme, verify=verify,
                                                request_timeout=request_timeout,
                                                max_connections=max_connections)
        self._http = _http.sync_client(self._transport)
        try:
            self._backend: Any = self._make_backend(namespace, kubeconfig, context, node_url,
                                                    token, max_connections)
        except BaseException:
            self._http.close()
            raise
        self.sandboxes = Sandboxes(self)
        from ._workspaces import Workspaces

        self.workspaces = Workspaces(self, Filesystem)

    def _make_backend(self, namespace: Optional[str], kubeconfig: Optional[str],
                      context: Optional[str], node_url: Optional[str], token: Optional[str],
                      pool: int) -> Any:
        if node_url:
            from ._node import NodeBackend

            token = token or os.environ.get("KUBICLE_NODE_TOKEN")
            if not token:
                raise ValueError("a standalone node needs its admin token (token= or "
                                 "$KUBICLE_NODE_TOKEN)")
            return NodeBackend(self._http, node_url, token)
        from ._kube import KubeBackend

        return KubeBackend(namespace=namespace, kubeconfig=kubeconfig, context=context,
                           scheme=self._transport.scheme, pool_size=min(pool, 256),
                           http=self._http, transport=self._transport,
                           node_lease_namespace=self._lease_ns)

    @property
    def namespace(self) -> str:
        return str(self._backend.namespace)

    @property
    def mode(self) -> str:
        """``"kubernetes"`` or ``"node"``."""
        from ._node import NodeBackend

        return "node" if isinstance(self._backend, NodeBackend) else "kubernetes"

    def run(self, template: str, command: Union[str, Sequence[str]], *,
            workspace: Optional[str] = None, timeout_seconds: Optional[float] = 60,
            env: Optional[Mapping[str, str]] = None, stdin: Union[bytes, str, None] = None,
            raise_on_timeout: bool = True) -> RunResult:
        """Runs ``command`` (an argv list, or a shell command string) once in
        a VM restored from ``template`` for this call alone and discarded
        after it; returns a RunResult with the node's ``timings``. With
        Kubernetes, ``template`` is a SandboxTemplate: a node where it is
        Ready is picked and its run token read from the Secret the template
        names (``get`` on that Secret is the permission to run). With a
        standalone node, it is the node's template name. ``workspace``
        names a workspace to attach for the call (mounted at /workspace in
        a Linux guest; with Kubernetes the run goes to the Workspace's
        node); it is free again when run returns, so its files can be read
        at once (``client.workspaces.files(name)``). Errors are typed:
        TemplateNotFoundError, TemplateNotReadyError, AuthError,
        CapacityError, WorkspaceNotFoundError, WorkspaceInUseError (another
        sandbox or run holds it); past ``timeout_seconds`` ExecTimeoutError
        (or a result with ``timed_out`` when ``raise_on_timeout=False``)."""
        body = _run.run_body(command, timeout_seconds=timeout_seconds, env=env, stdin=stdin,
                             workspace=workspace)
        target = self._backend.run_target(template, workspace)
        if target.node_workspace:  # the node knows a Workspace object by its disk id
            body["workspace"] = target.node_workspace
        http = target.http or self._http
        try:
            resp = http.post(target.base + _run.run_path(target.node_template), json=body,
                             headers=_http.auth(target.token),
                             timeout=_run.read_timeout(http.timeout.connect, body))
        except httpx.TransportError as e:
            raise _run.transport_error(e) from e
        return _run.finish(_run.answer(resp.status_code, resp.content, template),
                           raise_on_timeout, template)

    def close(self) -> None:
        self._backend.close()
        self._http.close()

    def __enter__(self) -> "Kubicle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

