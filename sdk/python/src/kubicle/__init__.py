"""Kubicle's Python SDK: a KVM microVM per agent, driven from Kubernetes.

    from kubicle import Kubicle

    k = Kubicle()                                   # kubeconfig or in-cluster
    with k.sandboxes.create("py", metadata={"run": "r1", "agent": "a0"}) as sb:
        sb.filesystem.write("/work/task.txt", "hello")
        print(sb.exec(["cat", "/work/task.txt"]).stdout)

See docs/sdk.md for every call.
"""

from .aio import AsyncFilesystem, AsyncKubicle, AsyncSandbox, AsyncSandboxes
from .client import Filesystem, Kubicle, Sandbox, Sandboxes
from .errors import (
    ApiError,
    AuthError,
    CapacityError,
    CommandError,
    ConflictError,
    ExecTimeoutError,
    KubicleError,
    KubicleTimeoutError,
    NotFoundError,
    PathNotFoundError,
    PortError,
    SandboxFailedError,
    SandboxNotFoundError,
    SandboxNotReadyError,
    SandboxTimeoutError,
    TemplateError,
    TemplateNotFoundError,
    TemplateNotReadyError,
    UnsupportedError,
    WorkspaceFailedError,
    WorkspaceInUseError,
    WorkspaceNotFoundError,
    WorkspaceNotSupportedError,
)
from ._ports import PortForward, PortStream
from ._ports_async import AsyncPortForward
from .aio import AsyncWorkspaces
from .client import Workspaces
from .models import (EntryInfo, ExecResult, FileInfo, RunResult, RunTimings, SandboxInfo,
                     WorkspaceInfo)

__version__ = "0.1.0"

__all__ = [
    "Kubicle", "Sandboxes", "Sandbox", "Filesystem",
    "AsyncKubicle", "AsyncSandboxes", "AsyncSandbox", "AsyncFilesystem",
    "ExecResult", "RunResult", "RunTimings", "SandboxInfo", "EntryInfo", "FileInfo",
    "PortStream", "PortForward", "AsyncPortForward",
    "KubicleError", "ApiError", "AuthError", "CapacityError", "CommandError", "ConflictError",
    "ExecTimeoutError", "KubicleTimeoutError", "NotFoundError", "PathNotFoundError", "PortError",
    "SandboxFailedError", "SandboxNotFoundError", "SandboxNotReadyError", "SandboxTimeoutError",
    "TemplateError", "TemplateNotFoundError", "TemplateNotReadyError", "UnsupportedError",
    "WorkspaceNotSupportedError", "WorkspaceNotFoundError", "WorkspaceInUseError",
    "WorkspaceFailedError",
    "Workspaces", "AsyncWorkspaces", "WorkspaceInfo",
]
