"""The asyncio twin of ``kubicle.client``: the same calls as coroutines, for
fan-outs of hundreds of sandboxes on one event loop::

    async with AsyncKubicle() as k:
        sbs = await asyncio.gather(*(k.sandboxes.create("py") for _ in range(200)))
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import httpx

from . import _http, _labels, _ports, _ports_async, _run, _wire, errors
from ._dataplane import AsyncDataPlane
from ._ports_async import AsyncPortForward
from ._ref import Ref
from ._api import DEFAULT_CREATE_TIMEOUT, DEFAULT_DELETE_TIMEOUT, DEFAULT_SUSPEND_TIMEOUT
from .client import _merge_env, finish_exec
from .models import EntryInfo, ExecResult, FileInfo, RunResult, SandboxInfo


class AsyncFilesystem:
    """Filesystem's twin: the same calls, arguments and errors, as coroutines."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    async def write(self, path: str, data: Any, *, mode: Optional[int] = None) -> int:
        """Like Filesystem.write; ``data`` may also be an async iterable of bytes."""
        dp = await self._sb._dp()
        return int((await dp.write(path, data, mode)).get("size", 0))

    async def read(self, path: str, *, format: str = "text") -> Any:
        """``"text"``, ``"bytes"``, or ``"stream"`` (an async iterator of chunks)."""
        dp = await self._sb._dp()
        if format == "stream":
            return dp.read_stream(path)
        data = await dp.read(path)
        if format == "bytes":
            return data
        if format == "text":
            return data.decode("utf-8")
        raise ValueError('format must be "text", "bytes" or "stream"')

    async def read_to(self, path: str, out: Any) -> int:
        n = 0
        dp = await self._sb._dp()
        async for chunk in dp.read_stream(path):
            out.write(chunk)
            n += len(chunk)
        return n

    async def exists(self, path: str) -> bool:
        return await (await self._sb._dp()).exists(path)

    async def stat(self, path: str) -> FileInfo:
        return await (await self._sb._dp()).stat(path)

    async def list(self, path: str = "/") -> List[EntryInfo]:
        return await (await self._sb._dp()).list(path)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await (await self._sb._dp()).remove(path, recursive)


class AsyncSandbox:
    def __init__(self, client: "AsyncKubicle", ref: Ref) -> None:
        self._client, self._ref = client, ref
        self.filesystem = AsyncFilesystem(self)
        self.files = self.filesystem

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
        return f"AsyncSandbox(name={self.name!r}, id={self.id!r}, phase={self._ref.info.phase!r})"

    async def refresh(self) -> SandboxInfo:
        fresh = await self._client._backend.get(self.name)
        self._ref.raw, self._ref.info = fresh.raw, fresh.info
        return self._ref.info

    async def _dp(self) -> AsyncDataPlane:
        await self._client._backend.resolve(self._ref)
        assert self._ref.base and self._ref.token
        return AsyncDataPlane(self._ref.http or self._client._http, self._ref.base, self._ref.token,
                              self.name)

    async def exec(self, cmd: Union[str, Sequence[str]], *, timeout_seconds: Optional[float] = 60,
                   env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                   stdin: Union[bytes, str, None] = None,
                   on_stdout: Optional[_wire.OutputCallback] = None,
                   on_stderr: Optional[_wire.OutputCallback] = None,
                   raise_on_timeout: bool = True) -> ExecResult:
        """Like Sandbox.exec; callbacks may be plain functions or coroutines."""
        dp = await self._dp()
        streamed = on_stdout is not None or on_stderr is not None
        kw: Dict[str, Any] = dict(env=_merge_env(self._ref.env, env) or None, cwd=cwd,
                                  stdin=stdin, timeout_seconds=timeout_seconds)

        async def run(body: Dict[str, Any]) -> ExecResult:
            stream = _wire.ExecStream(on_stdout, on_stderr, self.name) if streamed else None
            return await dp.exec(body, stream)

        try:
            result = await run(_wire.exec_body(cmd, **kw))
        except errors.UnsupportedError:
            argv = _wire.shell_as_argv(cmd)
            if argv is None:
                raise
            result = await run(_wire.exec_body(cmd, force_argv=argv, **kw))
        return finish_exec(result, raise_on_timeout, self.name, _wire.exec_timeout(timeout_seconds))

    async def connect_port(self, port: int, *, timeout: Optional[float] = 30.0) -> Any:
        """Like Sandbox.connect_port, as an asyncio (StreamReader,
        StreamWriter) pair; ``writer.write_eof()`` half-closes on plain
        http."""
        _ports.check_port(port)
        await self._client._backend.resolve(self._ref)
        assert self._ref.base and self._ref.token
        ctx = self._ref.ssl if self._ref.ssl is not None else \
            _http.ssl_context(self._client._transport.verify)
        return await _ports_async.open_stream(self._ref.base, self._ref.token, port,
                                              ssl_context=ctx, timeout=timeout, sandbox=self.name)

    async def forward_port(self, port: int, local_port: int = 0, *,
                           timeout: Optional[float] = 30.0) -> AsyncPortForward:
        """Like Sandbox.forward_port, on this event loop, already listening:
        ``async with await sb.forward_port(3000) as fwd:``."""
        _ports.check_port(port)
        await self._client._backend.resolve(self._ref)
        return await AsyncPortForward(lambda: self.connect_port(port, timeout=timeout),
                                      local_port).start()

    async def fork(self, count: int = 1, *, metadata: Optional[Mapping[str, str]] = None,
                   ttl_seconds: Optional[int] = None,
                   timeout: float = DEFAULT_CREATE_TIMEOUT) -> List["AsyncSandbox"]:
        refs = await self._client._backend.fork(self._ref, count=count,
                                                labels=_labels.to_labels(metadata),
                                                ttl_seconds=ttl_seconds, timeout=timeout)
        return [AsyncSandbox(self._client, r) for r in refs]

    async def suspend(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Sandbox.suspend's twin."""
        await self._set(True, timeout)
        return self._ref.info

    async def resume(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Sandbox.resume's twin."""
        await self._set(False, timeout)
        return self._ref.info

    async def _set(self, suspend: bool, timeout: float) -> None:
        fresh = await self._client._backend.set_suspend(self._ref, suspend, timeout=timeout)
        self._ref.raw, self._ref.info = fresh.raw, fresh.info
        self._ref.token, self._ref.base = fresh.token, fresh.base

    async def delete(self, *, wait: bool = True, timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        await self._client._backend.delete(self.name, wait=wait, timeout=timeout)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.delete()


class AsyncSandboxes:
    def __init__(self, client: "AsyncKubicle") -> None:
        self._client = client

    async def create(self, template: str, *, ttl_seconds: Optional[int] = None,
                     metadata: Optional[Mapping[str, str]] = None,
                     env: Optional[Mapping[str, str]] = None,
                     resources: Optional[Mapping[str, int]] = None,
                     timeout: float = DEFAULT_CREATE_TIMEOUT, name: Optional[str] = None,
                     wait_pending: bool = False, workspace: Optional[str] = None) -> AsyncSandbox:
        ref = await self._client._backend.create(
            template=template, name=name, labels=_labels.to_labels(metadata),
            ttl_seconds=ttl_seconds, env=env, resources=resources, timeout=timeout,
            wait_pending=wait_pending, workspace=workspace)
        return AsyncSandbox(self._client, ref)

    async def get(self, name: str) -> AsyncSandbox:
        return AsyncSandbox(self._client, await self._client._backend.get(name))

    async def list(self, metadata: Optional[Mapping[str, str]] = None) -> List[AsyncSandbox]:
        return [AsyncSandbox(self._client, r)
                for r in await self._client._backend.list(_labels.selector(metadata))]

    async def delete(self, metadata: Mapping[str, str], *,
                     timeout: float = DEFAULT_DELETE_TIMEOUT) -> List[str]:
        sel = _labels.selector(metadata)
        if not sel:
            raise ValueError("a sweep needs metadata (e.g. {'run': run_id}): nothing deletes "
                             "every sandbox by accident")
        return await self._client._backend.sweep(sel, timeout=timeout)


class AsyncKubicle:
    """The asyncio client; same arguments as ``Kubicle``. Use ``async with``
    or call ``aclose()``. Kubernetes credentials load on first use."""

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
        self._http = _http.async_client(self._transport)
        self._backend: Any
        if node_url:
            from ._node_async import AsyncNodeBackend

            token = token or os.environ.get("KUBICLE_NODE_TOKEN")
            if not token:
                raise ValueError("a standalone node needs its admin token (token= or "
                                 "$KUBICLE_NODE_TOKEN)")
            self._backend = AsyncNodeBackend(self._http, node_url, token)
        else:
            from ._kube_async import AsyncKubeBackend

            self._backend = AsyncKubeBackend(namespace=namespace, kubeconfig=kubeconfig,
                                             context=context, scheme=data_plane_scheme,
                                             pool_size=max_connections, http=self._http,
                                             transport=self._transport,
                                             node_lease_namespace=node_lease_namespace)
        self.sandboxes = AsyncSandboxes(self)
        from ._workspaces import AsyncWorkspaces

        self.workspaces = AsyncWorkspaces(self, AsyncFilesystem)

    @property
    def namespace(self) -> str:
        """The namespace (known once connected: after the first call or ``async with``)."""
        return str(self._backend.namespace)

    async def connect(self) -> "AsyncKubicle":
        await self._backend.start()
        return self

    async def run(self, template: str, command: Union[str, Sequence[str]], *,
                  workspace: Optional[str] = None, timeout_seconds: Optional[float] = 60,
                  env: Optional[Mapping[str, str]] = None, stdin: Union[bytes, str, None] = None,
                  raise_on_timeout: bool = True) -> RunResult:
        """As ``Kubicle.run``."""
        body = _run.run_body(command, timeout_seconds=timeout_seconds, env=env, stdin=stdin,
                             workspace=workspace)
        target = await self._backend.run_target(template, workspace)
        if target.node_workspace:  # the node knows a Workspace object by its disk id
            body["workspace"] = target.node_workspace
        http = target.http or self._http
        try:
            resp = await http.post(target.base + _run.run_path(target.node_template), json=body,
                                   headers=_http.auth(target.token),
                                   timeout=_run.read_timeout(http.timeout.connect, body))
        except httpx.TransportError as e:
            raise _run.transport_error(e) from e
        return _run.finish(_run.answer(resp.status_code, resp.content, template),
                           raise_on_timeout, template)

    async def aclose(self) -> None:
        """Closes the connections; calls still running then fail with
        KubicleError (reason Closed) instead of opening new ones."""
        await self._backend.close()
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncKubicle":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

