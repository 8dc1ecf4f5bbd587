"""The asyncio twin of ``kubicle.client``: the same calls as coroutines, for
fan-outs of hundreds of sandboxes on one event loop::

    async with AsyncKubicle() as k:
        sbs = await asyncio.gather(*(k.sandboxes.create("py") for _ in range(200)))

Each call drives the core's operation (``_api.py`` and the modules it
names), the same one the threaded client drives, on the asyncio transport
(``_io_async.py``)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, List, Mapping, Optional, Sequence, Union

from . import _ports_async, _sansio, _wire
from ._api import (DEFAULT_CREATE_TIMEOUT, DEFAULT_DELETE_TIMEOUT, DEFAULT_SUSPEND_TIMEOUT,
                   ClientCore, FilesCore, SandboxCore, SandboxesCore)
from ._io_async import AsyncIO
from ._ports_async import AsyncPortForward
from ._sansio import Op, T
from ._workspaces import WorkspacesCore
from .models import EntryInfo, ExecResult, FileInfo, RunResult, SandboxInfo, WorkspaceInfo


class AsyncFilesystem(FilesCore):
    """Filesystem's twin: the same calls, arguments and errors, as coroutines."""

    async def write(self, path: str, data: Any, *, mode: Optional[int] = None) -> int:
        """Like Filesystem.write; ``data`` may also be an async iterable of bytes."""
        return await self._sb._client._run(self._write(path, data, mode))

    async def read(self, path: str, *, format: str = "text") -> Any:
        """``"text"``, ``"bytes"``, or ``"stream"`` (an async iterator of chunks)."""
        return await self._sb._client._run(self._read(path, format))

    async def read_to(self, path: str, out: Any) -> int:
        return await self._sb._client._run(self._read_to(path, out))

    async def exists(self, path: str) -> bool:
        return await self._sb._client._run(self._exists(path))

    async def stat(self, path: str) -> FileInfo:
        return await self._sb._client._run(self._stat(path))

    async def list(self, path: str = "/") -> List[EntryInfo]:
        return await self._sb._client._run(self._list(path))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._sb._client._run(self._remove(path, recursive))


class AsyncSandbox(SandboxCore):
    _Filesystem = AsyncFilesystem
    filesystem: AsyncFilesystem
    files: AsyncFilesystem

    async def refresh(self) -> SandboxInfo:
        return await self._client._run(self._refresh())

    async def exec(self, cmd: Union[str, Sequence[str]], *, timeout_seconds: Optional[float] = 60,
                   env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
                   stdin: Union[bytes, str, None] = None,
                   on_stdout: Optional[_wire.OutputCallback] = None,
                   on_stderr: Optional[_wire.OutputCallback] = None,
                   raise_on_timeout: bool = True) -> ExecResult:
        """Like Sandbox.exec; callbacks may be plain functions or coroutines."""
        return await self._client._run(self._exec(
            cmd, timeout_seconds=timeout_seconds, env=env, cwd=cwd, stdin=stdin,
            on_stdout=on_stdout, on_stderr=on_stderr, raise_on_timeout=raise_on_timeout))

    async def connect_port(self, port: int, *, timeout: Optional[float] = 30.0) -> Any:
        """Like Sandbox.connect_port, as an asyncio (StreamReader,
        StreamWriter) pair; ``writer.write_eof()`` half-closes on plain
        http."""
        base, token, ctx = await self._client._run(self._port(port))
        return await _ports_async.open_stream(base, token, port, ssl_context=ctx,
                                              timeout=timeout, sandbox=self.name)

    async def forward_port(self, port: int, local_port: int = 0, *,
                           timeout: Optional[float] = 30.0) -> AsyncPortForward:
        """Like Sandbox.forward_port, on this event loop, already listening:
        ``async with await sb.forward_port(3000) as fwd:``."""
        await self._client._run(self._port(port))
        return await AsyncPortForward(lambda: self.connect_port(port, timeout=timeout),
                                      local_port).start()

    async def fork(self, count: int = 1, *, metadata: Optional[Mapping[str, str]] = None,
                   ttl_seconds: Optional[int] = None,
                   timeout: float = DEFAULT_CREATE_TIMEOUT) -> List["AsyncSandbox"]:
        return await self._client._run(self._fork(count, metadata, ttl_seconds, timeout))

    async def suspend(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Sandbox.suspend's twin."""
        return await self._client._run(self._set(True, timeout))

    async def resume(self, *, timeout: float = DEFAULT_SUSPEND_TIMEOUT) -> SandboxInfo:
        """Sandbox.resume's twin."""
        return await self._client._run(self._set(False, timeout))

    async def delete(self, *, wait: bool = True, timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        await self._client._run(self._delete(wait, timeout))

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.delete()


class AsyncSandboxes(SandboxesCore):
    _Sandbox = AsyncSandbox

    async def create(self, template: str, *, ttl_seconds: Optional[int] = None,
                     metadata: Optional[Mapping[str, str]] = None,
                     env: Optional[Mapping[str, str]] = None,
                     resources: Optional[Mapping[str, int]] = None,
                     timeout: float = DEFAULT_CREATE_TIMEOUT, name: Optional[str] = None,
                     wait_pending: bool = False, workspace: Optional[str] = None,
                     token_secret: bool = False) -> AsyncSandbox:
        return await self._client._run(self._create(
            template, ttl_seconds=ttl_seconds, metadata=metadata, env=env, resources=resources,
            timeout=timeout, name=name, wait_pending=wait_pending, workspace=workspace,
            token_secret=token_secret))

    async def get(self, name: str) -> AsyncSandbox:
        return await self._client._run(self._get(name))

    async def list(self, metadata: Optional[Mapping[str, str]] = None) -> List[AsyncSandbox]:
        return await self._client._run(self._list(metadata))

    async def delete(self, metadata: Mapping[str, str], *,
                     timeout: float = DEFAULT_DELETE_TIMEOUT) -> List[str]:
        return await self._client._run(self._sweep(metadata, timeout))


class AsyncWorkspaces(WorkspacesCore):
    """``AsyncKubicle.workspaces``: as Workspaces, awaited."""

    _Filesystem = AsyncFilesystem

    async def create(self, name: str, size_mib: int, *,
                     labels: Optional[Mapping[str, str]] = None,
                     token_sha256: Optional[str] = None,
                     timeout: float = DEFAULT_CREATE_TIMEOUT) -> WorkspaceInfo:
        return await self._client._run(self._create(name, size_mib, labels, token_sha256,
                                                    timeout))

    async def get(self, name: str) -> WorkspaceInfo:
        return await self._client._run(self._get(name))

    async def list(self) -> List[WorkspaceInfo]:
        return await self._client._run(self._list())

    async def delete(self, name: str, *, wait: bool = True,
                     timeout: float = DEFAULT_DELETE_TIMEOUT) -> None:
        await self._client._run(self._delete(name, wait, timeout))

    def files(self, name: str, *, token: Optional[str] = None,
              endpoint: Optional[str] = None) -> AsyncFilesystem:
        """As Workspaces.files; its calls are coroutines."""
        return self._files(name, token, endpoint)


class AsyncKubicle(ClientCore):
    """The asyncio client; same arguments as ``Kubicle``. Use ``async with``
    or call ``aclose()``. Kubernetes credentials load on first use."""

    _name = "AsyncKubicle"
    _IO = AsyncIO
    _Sandboxes = AsyncSandboxes
    _Workspaces = AsyncWorkspaces
    sandboxes: AsyncSandboxes
    workspaces: AsyncWorkspaces

    def _opened(self) -> None:
        self._lock = asyncio.Lock()

    async def _started(self) -> None:
        """Connects on first use (the credentials load then), once."""
        if self._backend.started:
            return
        async with self._lock:
            await _sansio.run_async(self._backend.start(), self._io)

    async def _run(self, op: Op[T]) -> T:
        await self._started()
        return await _sansio.run_async(op, self._io)

    def _stream(self, op: Op[None]) -> AsyncIterator[Any]:
        return _sansio.aiterate(op, self._io)

    async def connect(self) -> "AsyncKubicle":
        await self._started()
        return self

    async def run(self, template: str, command: Union[str, Sequence[str]], *,
                  workspace: Optional[str] = None, timeout_seconds: Optional[float] = 60,
                  env: Optional[Mapping[str, str]] = None, stdin: Union[bytes, str, None] = None,
                  raise_on_timeout: bool = True) -> RunResult:
        """As ``Kubicle.run``."""
        return await self._run(self._run_op(
            template, command, workspace=workspace, timeout_seconds=timeout_seconds, env=env,
            stdin=stdin, raise_on_timeout=raise_on_timeout))

    async def aclose(self) -> None:
        """Closes the connections; calls still running then fail with
        KubicleError (reason Closed) instead of opening new ones."""
        await _sansio.run_async(self._close(), self._io)

    async def __aenter__(self) -> "AsyncKubicle":
        return await self.connect()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

