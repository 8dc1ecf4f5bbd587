"""Plain values the SDK returns: command results and sandbox descriptions."""

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


@dataclass(frozen=True)
class EntryInfo:
    """One entry of a directory listing."""

    name: str
    path: str
    is_dir: bool
