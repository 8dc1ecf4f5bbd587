"""What ``Kubicle`` and ``AsyncKubicle`` share above the transport: their
defaults, how a client is set up, and the logic of every call of the
client, its ``sandboxes``, a sandbox and its ``filesystem``, as operations
of the core (``_sansio.py``). ``client.py`` and ``aio.py`` subclass these
and only drive them: a public method there is its signature, its
docstring and one line."""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import httpx

from . import _http, _labels, _ports, _run, _wire, errors
from ._dataplane import DataPlane
from ._kube import KubeBackend
from ._node import NodeBackend
from ._ref import Ref
from ._sansio import Op, call, each
from .models import ExecResult, RunResult, SandboxInfo

T = TypeVar("T")

DEFAULT_CREATE_TIMEOUT = 120.0
DEFAULT_DELETE_TIMEOUT = 120.0
DEFAULT_SUSPEND_TIMEOUT = 300.0  # a snapshot of a large guest is written to the node's disk


def merge_env(base: Mapping[str, str], own: Optional[Mapping[str, str]]) -> Dict[str, str]:
    env = dict(base)
    env.update(own or {})
    return env


def finish_exec(result: ExecResult, raise_on_timeout: bool, sandbox: str,
                timeout: int) -> ExecResult:
    if result.timed_out and raise_on_timeout:
        raise errors.ExecTimeoutError(f"the command ran past its {timeout} s timeout",
                                      result=result, sandbox=sandbox)
    return result


def no_sweep_of_everything(metadata: Optional[Mapping[str, str]]) -> str:
    sel = _labels.selector(metadata)
    if not sel:
        raise ValueError("a sweep needs metadata (e.g. {'run': run_id}): nothing deletes "
                         "every sandbox by accident")
    return sel


class ClientCore:
    """A client's setup and its own calls. A subclass says how it drives an
    operation (``_run``, ``_stream``) and which transport it has."""

    _name = ""           # the client's class name, for a closed client's error
    _IO: Any             # its transport: SyncIO or AsyncIO
    _Sandboxes: Any      # its sandboxes and workspaces classes
    _Workspaces: Any
    _kube_pool_cap: Optional[int] = None  # at most this many connections to the apiserver
    _backend: Any
    _http: Any
    _io: Any

    def __init__(self, *, namespace: Optional[str] = None, kubeconfig: Optional[str] = None,
                 context: Optional[str] = None, node_url: Optional[str] = None,
                 token: Optional[str] = None, verify: _http.Verify = True,
                 data_plane_scheme: str = "http", request_timeout: float = 30.0,
                 max_connections: int = 1024,
                 node_lease_namespace: str = "kubicle-node-lease") -> None:
        if node_url and verify is True and os.environ.get("KUBICLE_NODE_CA_FILE"):
            verify = os.environ["KUBICLE_NODE_CA_FILE"]  # as kubicle-nodectl reads it
        self._transport = _http.TransportConfig(scheme=data_plane_scheme, verify=verify,
                                                request_timeout=request_timeout,
                                                max_connections=max_connections)
        if node_url:
            token = token or os.environ.get("KUBICLE_NODE_TOKEN")
            if not token:
                raise ValueError("a standalone node needs its admin token (token= or "
                                 "$KUBICLE_NODE_TOKEN)")
            self._backend = NodeBackend(node_url, token)
        else:
            self._backend = KubeBackend(
                namespace=namespace, kubeconfig=kubeconfig, context=context,
                pool_size=min(max_connections, self._kube_pool_cap or max_connections),
                transport=self._transport, make_client=self._IO.make_client, client=self._name,
                node_lease_namespace=node_lease_namespace)
        self._http = self._IO.make_client(self._transport)
        self._io = self._IO(self._http)
        self._opened()
        self.sandboxes = self._Sandboxes(self)
        self.workspaces = self._Workspaces(self)

    def _opened(self) -> None:
        """The transport is there: a subclass connects now or later."""

    @property
    def namespace(self) -> str:
        """The namespace in use ("" standalone; the asyncio client knows it
        once connected)."""
        return str(self._backend.namespace)

    @property
    def mode(self) -> str:
        """``"kubernetes"`` or ``"node"``."""
        return "node" if isinstance(self._backend, NodeBackend) else "kubernetes"

    def _close(self) -> Op[None]:
        yield from self._backend.close()
        yield call("close_http", self._http)

    def _run_op(self, template: str, command: Union[str, Sequence[str]], *,
                workspace: Optional[str], timeout_seconds: Optional[float],
                env: Optional[Mapping[str, str]], stdin: Union[bytes, str, None],
                raise_on_timeout: bool) -> Op[RunResult]:
        body = _run.run_body(command, timeout_seconds=timeout_seconds, env=env, stdin=stdin,
                             workspace=workspace)
        target = yield from self._backend.run_target(template, workspace)
        if target.node_workspace:  # the node knows a Workspace object by its disk id
            body["workspace"] = target.node_workspace
        try:
            resp = yield call("request", target.http, "POST",
                              target.base + _run.run_path(target.node_template), json=body,
                              headers=_http.auth(target.token),
                              timeout=_run.read_timeout(self._transport.request_timeout, body))
        except httpx.TransportError as e:
            raise _run.transport_error(e) from e
        return _run.finish(_run.answer(resp.status_code, resp.content, template),
                           raise_on_timeout, template)


class SandboxesCore:
    """``client.sandboxes``; ``_Sandbox`` is the client's Sandbox class."""

    _Sandbox: Any

    def __init__(self, client: Any) -> None:
        self._client = client

    def _wrap(self, refs: Op[List[Ref]]) -> Op[List[Any]]:
        got = yield from refs
        return [self._Sandbox(self._client, r) for r in got]

    def _create(self, template: str, *, ttl_seconds: Optional[int],
                metadata: Optional[Mapping[str, str]], env: Optional[Mapping[str, str]],
                resources: Optional[Mapping[str, int]], timeout: float, name: Optional[str],
                wait_pending: bool, workspace: Optional[str], token_secret: bool) -> Op[Any]:
        ref = yield from self._client._backend.create(
            template=template, name=name, labels=_labels.to_labels(metadata),
            ttl_seconds=ttl_seconds, env=env, resources=resources, timeout=timeout,
            wait_pending=wait_pending, workspace=workspace, token_secret=token_secret)
        return self._Sandbox(self._client, ref)

    def _get(self, name: str) -> Op[Any]:
        return self._Sandbox(self._client, (yield from self._client._backend.get(name)))

    def _list(self, metadata: Optional[Mapping[str, str]]) -> Op[List[Any]]:
        return self._wrap(self._client._backend.list(_labels.selector(metadata)))

    def _sweep(self, metadata: Mapping[str, str], timeout: float) -> Op[List[str]]:
        sel = no_sweep_of_everything(metadata)
        return (yield from self._client._backend.sweep(sel, timeout=timeout))


class SandboxCore:
    """One sandbox: its identity, and its calls as operations.
    ``_Filesystem`` is the client's Filesystem class."""

    _Filesystem: Any

    def __init__(self, client: Any, ref: Ref) -> None:
        self._client, self._ref = client, ref
        self.filesystem = self._Filesystem(self)
        self.files = self.filesystem  # E2B's name for it

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

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, id={self.id!r}, "
                f"phase={self._ref.info.phase!r})")

    def _refresh(self) -> Op[SandboxInfo]:
        fresh = yield from self._client._backend.get(self.name)
        self._ref.raw, self._ref.info = fresh.raw, fresh.info
        return self._ref.info

    def _plane(self) -> Op[DataPlane]:
        yield from self._client._backend.resolve(self._ref)
        assert self._ref.base and self._ref.token
        return DataPlane(self._ref.http, self._ref.base, self._ref.token, self.name,
                         self._client._transport.request_timeout)

    def _refine(self, e: errors.KubicleError) -> errors.KubicleError:
        return e

    def _exec(self, cmd: _wire.Command, *, timeout_seconds: Optional[float],
              env: Optional[Mapping[str, str]], cwd: Optional[str],
              stdin: Union[bytes, str, None], on_stdout: Optional[_wire.OutputCallback],
              on_stderr: Optional[_wire.OutputCallback],
              raise_on_timeout: bool) -> Op[ExecResult]:
        """Builds the body; a shell command the guest cannot run (no shell)
        is sent again as an argv when it has no shell syntax."""
        dp = yield from self._plane()
        streamed = on_stdout is not None or on_stderr is not None
        kw = dict(env=merge_env(self._ref.env, env) or None, cwd=cwd, stdin=stdin,
                  timeout_seconds=timeout_seconds)

        def attempt(body: Dict[str, Any]) -> Op[ExecResult]:
            stream = _wire.ExecStream(on_stdout, on_stderr, self.name) if streamed else None
            return dp.exec(body, stream)

        try:
            result = yield from attempt(_wire.exec_body(cmd, **kw))
        except errors.UnsupportedError:
            argv = _wire.shell_as_argv(cmd)
            if argv is None:
                raise
            result = yield from attempt(_wire.exec_body(cmd, force_argv=argv, **kw))
        return finish_exec(result, raise_on_timeout, self.name,
                           _wire.exec_timeout(timeout_seconds))

    def _port(self, port: int) -> Op[Tuple[str, str, Any]]:
        """(base, token, SSL context) of a port stream to the guest's ``port``."""
        _ports.check_port(port)
        yield from self._client._backend.resolve(self._ref)
        assert self._ref.base and self._ref.token
        ctx = self._ref.ssl if self._ref.ssl is not None else \
            _http.ssl_context(self._client._transport.verify)
        return self._ref.base, self._ref.token, ctx

    def _fork(self, count: int, metadata: Optional[Mapping[str, str]],
              ttl_seconds: Optional[int], timeout: float) -> Op[List[Any]]:
        refs = yield from self._client._backend.fork(self._ref, count=count,
                                                     labels=_labels.to_labels(metadata),
                                                     ttl_seconds=ttl_seconds, timeout=timeout)
        return [type(self)(self._client, r) for r in refs]

    def _set(self, suspend: bool, timeout: float) -> Op[SandboxInfo]:
        fresh = yield from self._client._backend.set_suspend(self._ref, suspend,
                                                             timeout=timeout)
        self._ref.raw, self._ref.info = fresh.raw, fresh.info
        self._ref.token, self._ref.base = fresh.token, fresh.base
        return self._ref.info

    def _delete(self, wait: bool, timeout: float) -> Op[None]:
        return self._client._backend.delete(self.name, wait=wait, timeout=timeout)


class FilesCore:
    """A sandbox's or a workspace's files. The owner gives the data plane
    (``_plane``), the client (``_client``) and how its errors read
    (``_refine``)."""

    def __init__(self, sandbox: Any) -> None:
        self._sb = sandbox  # a Sandbox, or a workspace's WorkspaceFiles

    def _do(self, use: Callable[[DataPlane], Op[T]]) -> Op[T]:
        dp = yield from self._sb._plane()
        try:
            return (yield from use(dp))
        except errors.KubicleError as e:
            r = self._sb._refine(e)
            if r is e:
                raise
            raise r from e

    def _write(self, path: str, data: Any, mode: Optional[int]) -> Op[int]:
        answer = yield from self._do(lambda dp: dp.write(path, data, mode))
        return int(answer.get("size", 0))

    def _read(self, path: str, format: str) -> Op[Any]:
        if format == "stream":  # errors surface while iterating, as they are
            dp = yield from self._sb._plane()
            return self._sb._client._stream(dp.read_stream(path))
        data = yield from self._do(lambda dp: dp.read(path))
        if format == "bytes":
            return data
        if format == "text":
            return data.decode("utf-8")
        raise ValueError('format must be "text", "bytes" or "stream"')

    def _read_to(self, path: str, out: Any) -> Op[int]:
        dp = yield from self._sb._plane()
        n = [0]

        def take(chunk: bytes) -> None:
            out.write(chunk)
            n[0] += len(chunk)
        yield from each(dp.read_stream(path), take)
        return n[0]

    def _exists(self, path: str) -> Op[bool]:
        return self._do(lambda dp: dp.exists(path))

    def _stat(self, path: str) -> Op[Any]:
        return self._do(lambda dp: dp.stat(path))

    def _list(self, path: str) -> Op[Any]:
        return self._do(lambda dp: dp.list(path))

    def _remove(self, path: str, recursive: bool) -> Op[None]:
        return self._do(lambda dp: dp.remove(path, recursive))
