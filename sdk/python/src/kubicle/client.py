"""The synchronous client: ``Kubicle``, its ``sandboxes`` and each
``Sandbox`` with its ``filesystem``. Thread-safe: a fan-out runs one
sandbox per thread over one client (docs/sdk.md).

The logic of every call is the core's (``_api.py``, ``_kube.py``,
``_node.py``, ``_dataplane.py``, ``_workspaces.py``), shared with the
asyncio client; here each call drives it on the blocking transport
(``_io_sync.py``)."""

from __future__ import annotations

from typing import Any, Iterator, List, Mapping, Optional, Sequence, Union

from . import _ports, _sansio, _wire
from ._api import (DEFAULT_CREATE_TIMEOUT, DEFAULT_DELETE_TIMEOUT, DEFAULT_SUSPEND_TIMEOUT,
                   ClientCore, FilesCore, SandboxCore, SandboxesCore)
from ._dataplane import Content
from ._io_sync import SyncIO
from ._ports import PortForward, PortStream
from ._sansio import Op, T
from ._workspaces import WorkspacesCore
from .models import EntryInfo, ExecResult, FileInfo, RunResult, SandboxInfo, WorkspaceInfo


class Filesystem(FilesCore):
    """Files of one sandbox. Paths are absolute."""

    def write(self, path: str, data: Content, *, mode: Optional[int] = None) -> int:
        """Writes ``data`` (str, bytes, a binary file object or an iterable of
        bytes, streamed) to ``path``; returns the size written."""
        return self._sb._client._run(self._write(path, data, mode))

    def read(self, path: str, *, format: str = "text") -> Any:
        """The file's contents: ``format="text"`` (str), ``"bytes"``, or
        ``"stream"`` (an iterator of byte chunks, for large files)."""
        return self._sb._client._run(self._read(path, format))

    def read_to(self, path: str, out: Any) -> int:
        """Streams the file into a binary file object; returns its size."""
        return self._sb._client._run(self._read_to(path, out))

    def exists(self, path: str) -> bool:
        """True when ``path`` is there (a file, directory or anything else)."""
        return self._sb._client._run(self._exists(path))

    def stat(self, path: str) -> FileInfo:
        """``path``'s type, size, mode, mtime and owner (PathNotFoundError)."""
        return self._sb._client._run(self._stat(path))

    def list(self, path: str = "/") -> List[EntryInfo]:
        """The entries of a directory, in the guest's order: PathNotFoundError
        when missing, ConflictError when ``path`` is not a directory."""
        return self._sb._client._run(self._list(path))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or an empty directory; a directory with anything
        in it only with ``recursive=True`` (else ConflictError). A missing
        path is PathNotFoundError."""
        self._sb._client._run(self._remove(path, recursive))


class Sandbox(SandboxCore):
    """One running sandbox. ``with client.sandboxes.create(...) as sb:``
    deletes it on the way out."""

    _Filesystem = Filesystem
    filesystem: Filesystem
    files: Filesystem

    def refresh(self) -> SandboxInfo:
        """Reads the object again; returns ``info``."""
        return self._client._run(self._refresh())

    def _dp(self) -> Any:
        """The data plane, resolved now (token, node, CA)."""
        return self._client._run(self._plane())

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
        return self._client._run(self._exec(
            cmd, timeout_seconds=timeout_seconds, env=env, cwd=cwd, stdin=stdin,
            on_stdout=on_stdout, on_stderr=on_stderr, raise_on_timeout=raise_on_timeout))

    # --- ports ------------------------------------------------------------
    def connect_port(self, port: int, *, timeout: Optional[float] = 30.0) -> PortStream:
        """A stream to the guest's TCP ``port`` through the node's data plane
        (only this sandbox's token holder can open one): a socket-like
        PortStream (``sendall``, ``recv``, ``shutdown_write``, ``close``; a
        context manager). ``timeout`` bounds connecting and the node's
        answer. PortError when nothing listens there, it does not answer,
        the sandbox has no network, or too many streams are open."""
        base, token, ctx = self._client._run(self._port(port))
        return _ports.open_stream(base, token, port, ssl_context=ctx, timeout=timeout,
                                  sandbox=self.name)

    def forward_port(self, port: int, local_port: int = 0, *,
                     timeout: Optional[float] = 30.0) -> PortForward:
        """Listens on ``127.0.0.1:local_port`` (0: any free port, see
        ``.local_port``) and forwards every connection to the guest's
        ``port`` over a stream of its own. A context manager:
        ``with sb.forward_port(3000) as fwd: urlopen(f"http://127.0.0.1:{fwd.local_port}/")``.
        A refused stream closes that local connection; the error is kept
        in ``.errors``."""
        self._client._run(self._port(port))
        return PortForward(lambda: self.connect_port(port, timeout=timeout), local_port)

    # --- lifecycle --------------------------------------------------------
    def fork(self, count: int = 1, *, metadata: Optional[Mapping[str, str]] = None,
             ttl_seconds: Optional[int] = None,
             timeout: float = DEFAULT_CREATE_TIMEOUT) -> List["Sandbox"]:
        """``count`` copy-on-write copies of this running sandbox, returned
        once all are Ready. They carry its run and agent metadata (plus
        ``metadata``) and outlive it."""
        return self._client._run(
            self._fork(count, metadata, ttl_seconds, timeout))

    def suspend(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Parks the sandbox on its node: its memory, devices and disks are
        saved there and its VM stops (phase ``Suspended``); returns once
        they are. Commands and files then raise ConflictError until
        ``resume()``. Its TTL keeps counting. Idempotent. With Kubernetes
        this sets ``spec.suspend: true`` (so ``patch`` on Sandboxes is
        needed); CapacityError when the node has no disk room for it."""
        return self._client._run(self._set(True, timeout))

    def resume(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Runs a suspended sandbox again on the same node, with its files,
        memory and running processes as they were; returns once it answers.
        Idempotent."""
        return self._client._run(self._set(False, timeout))

    def delete(self, *, wait: bool = True, timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        """Deletes the sandbox; with ``wait`` returns once it is gone."""
        self._client._run(self._delete(wait, timeout))

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.delete()


class Sandboxes(SandboxesCore):
    _Sandbox = Sandbox

    def create(self, template: str, *, ttl_seconds: Optional[int] = None,
               metadata: Optional[Mapping[str, str]] = None,
               env: Optional[Mapping[str, str]] = None,
               resources: Optional[Mapping[str, int]] = None,
               timeout: float = DEFAULT_CREATE_TIMEOUT, name: Optional[str] = None,
               wait_pending: bool = False, workspace: Optional[str] = None,
               token_secret: bool = False) -> Sandbox:
        """Creates a sandbox of ``template`` and returns it once Ready.

        Raises TemplateNotFoundError, TemplateNotReadyError or CapacityError
        as soon as the operator says so (``wait_pending=True`` keeps waiting
        for a node or room until ``timeout``), SandboxFailedError if the VM
        fails, SandboxTimeoutError after ``timeout`` seconds. On any error
        the half-made sandbox is deleted. ``workspace`` attaches that
        workspace (mounted at /workspace; WorkspaceInUseError while another
        sandbox or run holds it) until the sandbox is deleted.

        Kubernetes: the data-plane token is made here and only its SHA-256
        sent (spec.tokenSha256; no Secret), so only this client reaches the
        sandbox; ``token_secret=True`` has the operator mint it into a
        Secret instead, for others with get on it (``kubectl kubicle``)."""
        return self._client._run(self._create(
            template, ttl_seconds=ttl_seconds, metadata=metadata, env=env, resources=resources,
            timeout=timeout, name=name, wait_pending=wait_pending, workspace=workspace,
            token_secret=token_secret))

    def get(self, name: str) -> Sandbox:
        """By name (standalone: the node id); SandboxNotFoundError."""
        return self._client._run(self._get(name))

    def list(self, metadata: Optional[Mapping[str, str]] = None) -> List[Sandbox]:
        """Sandboxes whose metadata includes every given key and value."""
        return self._client._run(self._list(metadata))

    def delete(self, metadata: Mapping[str, str], *,
               timeout: float = DEFAULT_DELETE_TIMEOUT) -> List[str]:
        """The sweep: deletes every sandbox (and SandboxFork) with this
        metadata, e.g. ``{"run": run_id}``, and returns the names once all
        are gone. Empty metadata is refused."""
        return self._client._run(self._sweep(metadata, timeout))


class Workspaces(WorkspacesCore):
    """``client.workspaces``: create, get, list, delete and ``files(name)``,
    on a standalone node or, with Kubernetes, as Workspace objects in the
    client's namespace."""

    _Filesystem = Filesystem

    def create(self, name: str, size_mib: int, *, labels: Optional[Mapping[str, str]] = None,
               token_sha256: Optional[str] = None,
               timeout: float = DEFAULT_CREATE_TIMEOUT) -> WorkspaceInfo:
        """Makes the workspace (an empty ext4 of ``size_mib``) and returns it
        once its disk is there, or returns the existing one of that size
        (ConflictError for another size). On a standalone node the token is
        in the answer only when the node minted it. With Kubernetes this
        creates a Workspace object and waits until it is Ready:
        WorkspaceFailedError if it cannot be, KubicleTimeoutError after
        ``timeout`` s (a Workspace this call made is then deleted again);
        its token is in Secret ``<name>-workspace-token``, so
        ``token_sha256`` is a ValueError there."""
        return self._client._run(
            self._create(name, size_mib, labels, token_sha256, timeout))

    def get(self, name: str) -> WorkspaceInfo:
        """WorkspaceNotFoundError when there is none of that name."""
        return self._client._run(self._get(name))

    def list(self) -> List[WorkspaceInfo]:
        """Every workspace of the node (with Kubernetes: of the namespace), by name."""
        return self._client._run(self._list())

    def delete(self, name: str, *, wait: bool = True,
               timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        """Removes it and its disk: WorkspaceInUseError while a sandbox holds
        it, WorkspaceNotFoundError when there is none. With Kubernetes this
        deletes the Workspace object; with ``wait`` it returns once the
        node has removed the disk (a per-call run holding it only delays
        that), KubicleTimeoutError after ``timeout`` s."""
        self._client._run(self._delete(name, wait, timeout))

    def files(self, name: str, *, token: Optional[str] = None,
              endpoint: Optional[str] = None) -> Filesystem:
        """The workspace's files without a VM, as ``sandbox.filesystem``:
        write, read, read_to, exists, stat, list, remove. While a sandbox or
        run holds it, every call raises WorkspaceInUseError. With
        Kubernetes, the first call finds the Workspace's node and data plane
        (``status.disk``), the node's name of the disk, the token (its
        Secret) and the node's CA (its Lease), as for a Sandbox; a Workspace
        without a disk yet is ConflictError (WorkspaceNotReady). ``token``
        and ``endpoint`` override what is found (default on a standalone
        node: its admin token and URL); with both given no apiserver call
        is made and ``name`` is the node's name of the disk."""
        return self._files(name, token, endpoint)


class Kubicle(ClientCore):
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

    _name = "Kubicle"
    _IO = SyncIO
    _Sandboxes = Sandboxes
    _Workspaces = Workspaces
    _kube_pool_cap = 256
    sandboxes: Sandboxes
    workspaces: Workspaces

    def _opened(self) -> None:
        try:
            self._run(self._backend.start())  # credentials load now, and fail here
        except BaseException:
            self._http.close()
            raise

    def _run(self, op: Op[T]) -> T:
        return _sansio.run(op, self._io)

    def _stream(self, op: Op[None]) -> Iterator[Any]:
        return _sansio.iterate(op, self._io)

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
        return self._run(self._run_op(
            template, command, workspace=workspace, timeout_seconds=timeout_seconds, env=env,
            stdin=stdin, raise_on_timeout=raise_on_timeout))

    def close(self) -> None:
        self._run(self._close())

    def __enter__(self) -> "Kubicle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

