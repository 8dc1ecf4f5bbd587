"""Plain values the SDK returns: command results, sandbox descriptions and
file metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from .errors import CommandError


@dataclass(frozen=True)
class ExecResult:
    """What a command did. ``exit_code`` is None when it was killed (timeout
    or signal). ``stdout``/``stderr`` are text (invalid UTF-8 replaced); the
    exact bytes are in ``stdout_bytes``/``stderr_bytes``."""

    exit_code: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool = False
    signal: Optional[int] = None
    truncated: bool = False
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def check(self) -> "ExecResult":
        """Returns self when the command exited 0, else raises CommandError."""
        if not self.ok:
            how = "timed out" if self.timed_out else (
                f"was killed by signal {self.signal}" if self.exit_code is None
                else f"exited {self.exit_code}")
            tail = self.stderr.strip()[-500:]
            raise CommandError(f"command {how}" + (f": {tail}" if tail else ""), result=self)
        return self


@dataclass(frozen=True)
class RunTimings:
    """Where a per-call run's time went, in ms, as the node measured it:
    restore (call start to the new VM answering), the command through the
    agent, and the total (the VM's teardown comes after, off the call)."""

    restore_ms: float = 0.0
    exec_ms: float = 0.0
    total_ms: float = 0.0


@dataclass(frozen=True)
class RunResult(ExecResult):
    """An ExecResult of a per-call run, with the node's ``timings``."""

    timings: RunTimings = RunTimings()


@dataclass(frozen=True)
class SandboxInfo:
    """A snapshot of one Sandbox as the control plane (or the node) reports it.

    ``name`` is the Kubernetes object name (the node id in standalone mode);
    ``id`` is the node's id of the VM (``k-<uid>`` under Kubernetes).
    ``metadata`` holds the ``kubicle.dev/<key>`` labels by ``<key>``."""

    name: str
    id: str
    template: str
    phase: str
    namespace: str = ""
    uid: str = ""
    metadata: Dict[str, str] = field(default_factory=dict)
    labels: Dict[str, str] = field(default_factory=dict)
    node: str = ""
    endpoint: str = ""
    message: str = ""
    fork_of: str = ""
    created_at: str = ""
    expires_at: str = ""
    restore_ms: Optional[float] = None


class _FileKind:
    """``is_dir``/``is_file`` from the node's ``type``: ``"file"``, ``"dir"``,
    ``"symlink"`` (not followed: a link to a directory is not ``is_dir``)
    or ``"other"`` (devices, sockets, fifos)."""

    type: str

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"


@dataclass(frozen=True)
class EntryInfo(_FileKind):
    """One entry of a directory listing (``GET .../ls``). ``mtime`` is RFC
    3339 UTC, None where the guest keeps none (the test guest's
    directories). A directory's ``size`` is what the guest reports (0 in
    the test guest)."""

    name: str
    path: str
    type: str
    size: int = 0
    mode: int = 0
    mtime: Optional[str] = None


@dataclass(frozen=True)
class FileInfo(_FileKind):
    """One path's metadata (``GET .../stat``); fields as in EntryInfo, plus
    the owner."""

    path: str
    type: str
    size: int = 0
    mode: int = 0
    mtime: Optional[str] = None
    uid: int = 0
    gid: int = 0


@dataclass(frozen=True)
class WorkspaceInfo:
    """A workspace: a durable ext4 disk on one node (docs/workspaces.md).
    ``token`` is set only by the create that minted it (never with
    Kubernetes: it is in the Workspace's Secret); ``attached_to`` is what
    holds it (the node's sandbox id or ``run-...``; with Kubernetes the
    Sandbox's name), or None. ``state``: the node's (``Ready``, ``Failed``),
    with Kubernetes the Workspace's phase (also ``Pending``,
    ``Terminating``). ``id`` is the node's name of the disk (``w-<uid>``
    with Kubernetes) and ``node`` the node it lives on (Kubernetes only)."""
    name: str
    size_mib: int
    filesystem: str = "ext4"
    labels: Dict[str, str] = field(default_factory=dict)
    state: str = "Ready"
    message: str = ""
    attached_to: Optional[str] = None
    bytes_used: int = 0
    created_at: str = ""
    token: Optional[str] = None
    node: str = ""
    id: str = ""
