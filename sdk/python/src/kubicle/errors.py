"""Exceptions a caller can act on.

Every exception carries ``reason`` (the Kubernetes condition reason or the
node API's error code, e.g. ``InsufficientCapacity``, ``VMFailed``,
``NotFound``) and ``message`` (the operator's or node's own words). Catch
:class:`KubicleError` for all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .models import ExecResult


class KubicleError(Exception):
    """Base class of every error the SDK raises on purpose."""

    def __init__(self, message: str, *, reason: str = "", status_code: Optional[int] = None,
                 sandbox: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.status_code = status_code
        self.sandbox = sandbox

    def __str__(self) -> str:
        parts = []
        if self.sandbox:
            parts.append(f"sandbox {self.sandbox}")
        if self.reason:
            parts.append(self.reason)
        prefix = ": ".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message


class AuthError(KubicleError):
    """401 or 403: the token is wrong, or not allowed to do this."""


class NotFoundError(KubicleError):
    """Something named does not exist (404)."""


class SandboxNotFoundError(NotFoundError):
    """The Sandbox (or the node's VM of it) does not exist."""


class PathNotFoundError(NotFoundError, FileNotFoundError):
    """A file in the sandbox does not exist (also a builtin FileNotFoundError)."""


class TemplateError(KubicleError):
    """The template cannot be used to create a Sandbox."""


class TemplateNotFoundError(TemplateError, NotFoundError):
    """No SandboxTemplate (or node template) of that name (reason TemplateNotFound)."""


class TemplateNotReadyError(TemplateError):
    """The template exists but no live node has it baked (reason NoReadyNode)."""


class CapacityError(KubicleError):
    """No node has room for the Sandbox (InsufficientCapacity, or the node's 429)."""


class SandboxFailedError(KubicleError):
    """The Sandbox's VM failed (Ready=False VMFailed, with status.vm.message),
    a fork failed, or the Sandbox was deleted while the SDK waited for it."""


class SandboxNotReadyError(KubicleError):
    """The Sandbox exists but has no running VM to talk to yet."""


class KubicleTimeoutError(KubicleError, TimeoutError):
    """A wait ran out of time (also a builtin TimeoutError)."""


class SandboxTimeoutError(KubicleTimeoutError):
    """A create, fork or delete did not finish within its timeout."""


class ExecTimeoutError(KubicleTimeoutError):
    """A command ran past its ``timeout_seconds``; ``result`` has what it wrote."""

    def __init__(self, message: str, *, result: Optional["ExecResult"] = None,
                 reason: str = "DeadlineExceeded", sandbox: Optional[str] = None) -> None:
        super().__init__(message, reason=reason, sandbox=sandbox)
        self.result = result


class CommandError(KubicleError):
    """Raised by ExecResult.check() for a non-zero exit."""

    def __init__(self, message: str, *, result: "ExecResult", sandbox: Optional[str] = None) -> None:
        super().__init__(message, reason="NonZeroExit", sandbox=sandbox)
        self.result = result


class UnsupportedError(KubicleError):
    """The node, guest or mode cannot do this (e.g. a shell in a guest without one)."""


class WorkspaceNotSupportedError(UnsupportedError):
    """Kept for compatibility: the SDK no longer raises it (per-call runs take
    ``workspace=`` since workspaces landed). A node older than workspaces
    answers a run with a workspace 501, which still maps here."""


class ConflictError(KubicleError):
    """409: the object exists with another spec, or is in the wrong state."""


class WorkspaceNotFoundError(NotFoundError):
    """No workspace of that name (on the node that was asked)."""


class WorkspaceInUseError(ConflictError):
    """The workspace is attached to a sandbox or run (one writer at a time);
    the message names the holder."""


class WorkspaceFailedError(KubicleError):
    """With Kubernetes, a Workspace that will not become Ready: its node
    could not make the disk (DiskFailed), the node is gone (NodeLost), its
    token Secret is someone else's or broken, its spec is invalid, or it
    was deleted while the SDK waited for it."""


class PortError(KubicleError, ConnectionError):
    """A guest port cannot be reached through the data plane: nothing
    listens there (reason PortRefused, 502), it does not answer (PortTimeout,
    504), the sandbox has no network (NoNetwork, 409), or the token's port
    streams are all open (TooManyStreams, 429/503)."""


class ApiError(KubicleError):
    """Any other error answer from the apiserver or the node."""
