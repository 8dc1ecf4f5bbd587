"""The node's HTTP API on the wire (docs/node.md, "HTTP API"): request
bodies, answers and errors. Pure functions shared by the sync and async
clients; no I/O here."""

from __future__ import annotations

import base64
import codecs
import json
import re
import shlex
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import errors
from ._labels import FORK_OF, to_metadata
from .models import EntryInfo, ExecResult, FileInfo, SandboxInfo

Command = Union[str, Sequence[str]]
OutputCallback = Callable[[str], Any]

# Seconds the HTTP client waits past an exec's own timeout before giving up
# on the node: the node answers timedOut itself a little after the deadline.
EXEC_GRACE_SECONDS = 30.0
DEFAULT_EXEC_TIMEOUT = 60
MAX_EXEC_TIMEOUT = 86400

# Anything a shell would interpret: such a command cannot become an argv.
_SHELL_SYNTAX = re.compile(r"[|&;<>()$`\\\"'*?\[\]#~=%{}\n]")


def exec_body(cmd: Command, *, env: Optional[Mapping[str, str]], cwd: Optional[str],
              stdin: Union[bytes, str, None], timeout_seconds: Optional[float],
              force_argv: Optional[List[str]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {}
    if force_argv is not None:
        body["argv"] = force_argv
    elif isinstance(cmd, str):
        if not cmd.strip():
            raise ValueError("the command is empty")
        body["shell"] = cmd
    else:
        argv = list(cmd)
        if not argv or not all(isinstance(a, str) for a in argv) or not argv[0]:
            raise ValueError("argv must be a non-empty list of strings")
        body["argv"] = argv
    if env:
        body["env"] = [f"{k}={v}" for k, v in env.items()]
    if cwd:
        body["cwd"] = cwd
    if stdin is not None:
        data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        body["stdinBase64"] = base64.b64encode(data).decode("ascii")
    body["timeoutSeconds"] = exec_timeout(timeout_seconds)
    return body


def exec_timeout(timeout_seconds: Optional[float]) -> int:
    if timeout_seconds is None:
        return DEFAULT_EXEC_TIMEOUT
    t = int(-(-float(timeout_seconds) // 1))  # whole seconds, rounded up
    if t < 1 or t > MAX_EXEC_TIMEOUT:
        raise ValueError(f"timeout_seconds must be in [1, {MAX_EXEC_TIMEOUT}]")
    return t


def shell_as_argv(cmd: Command) -> Optional[List[str]]:
    """The argv for a shell command without shell syntax (``echo hi``), for
    guests with no shell (the node does the same with warm-up commands)."""
    if not isinstance(cmd, str) or _SHELL_SYNTAX.search(cmd):
        return None
    argv = shlex.split(cmd)
    return argv or None


def exec_result(j: Mapping[str, Any]) -> ExecResult:
    out, err = j.get("stdout", "") or "", j.get("stderr", "") or ""
    if j.get("encoding") == "base64":
        ob, eb = base64.b64decode(out), base64.b64decode(err)
    else:
        ob, eb = out.encode(), err.encode()
    return _result(j, ob, eb)


def _result(j: Mapping[str, Any], ob: bytes, eb: bytes) -> ExecResult:
    return ExecResult(
        exit_code=j.get("exitCode"),
        stdout=ob.decode("utf-8", "replace"),
        stderr=eb.decode("utf-8", "replace"),
        timed_out=bool(j.get("timedOut", False)),
        signal=j.get("signal"),
        truncated=bool(j.get("truncated", False)),
        stdout_bytes=ob,
        stderr_bytes=eb,
    )


class ExecStream:
    """Decodes the NDJSON of ``POST .../exec?stream=true`` line by line:
    output chunks go to the callbacks as text (a UTF-8 sequence split across
    chunks is joined) and are collected; the final line gives the result."""

    def __init__(self, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback],
                 sandbox: str) -> None:
        self._cb = {"stdout": on_stdout, "stderr": on_stderr}
        self._dec = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in self._cb}
        self._buf: Dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._sandbox = sandbox
        self.result: Optional[ExecResult] = None
        # Awaitables returned by async callbacks, for the async client to await.
        self.pending: List[Any] = []

    def feed(self, line: Union[str, bytes]) -> None:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        line = line.strip()
        if not line:
            return
        try:
            msg = json.loads(line)
        except ValueError as e:
            raise errors.ApiError(f"the node sent a stream line that is not JSON: {line[:200]!r}",
                                  reason="BadStream", sandbox=self._sandbox) from e
        if "stream" in msg:
            name = msg["stream"]
            data = base64.b64decode(msg.get("data", ""))
            if name not in self._buf:
                return
            self._buf[name] += data
            self._emit(name, self._dec[name].decode(data))
        elif "exit" in msg:
            for name in self._cb:
                self._emit(name, self._dec[name].decode(b"", final=True))
            self.result = _result(msg["exit"], bytes(self._buf["stdout"]), bytes(self._buf["stderr"]))
        elif "error" in msg:
            err = msg["error"] or {}
            raise error_for(200, err.get("code", ""), err.get("message", ""), op="exec",
                            sandbox=self._sandbox)

    def _emit(self, name: str, text: str) -> None:
        cb = self._cb[name]
        if cb is not None and text:
            r = cb(text)
            if r is not None and hasattr(r, "__await__"):
                self.pending.append(r)

    def finish(self) -> ExecResult:
        if self.result is None:
            raise errors.ApiError("the exec stream ended without an exit line (node restarted?)",
                                  reason="BadStream", sandbox=self._sandbox)
        return self.result


def parse_error(body: bytes) -> tuple:
    """(code, message) of a node error body ``{"error": {"code", "message"}}``."""
    try:
        e = json.loads(body.decode("utf-8", "replace")).get("error") or {}
        return str(e.get("code", "")), str(e.get("message", ""))
    except (ValueError, AttributeError):
        return "", body.decode("utf-8", "replace")[:500]


# Calls whose 404 is the path's unless the node names the sandbox.
_PATH_OPS = frozenset({"read", "exists", "stat", "list", "remove"})


def _port_reason(status: int, msg: str) -> str:
    """The reason of a port stream's refusal that is about the port, else ""."""
    if status == 502:
        return "PortRefused"
    if status == 504:
        return "PortTimeout"
    if status == 409 and "has no network" in msg:
        return "NoNetwork"
    if status in (429, 503):
        return "TooManyStreams"
    return ""


def _no_route(status: int, code: str, msg: str) -> bool:
    """The node's own answers for a route or method it does not have."""
    return (status == 404 and msg.startswith("no route ")) or status == 405 or \
        code == "MethodNotAllowed"


def error_for(status: int, code: str, message: str, *, op: str = "",
              sandbox: Optional[str] = None) -> errors.KubicleError:
    """The exception for a node answer. ``op`` names the call, because the
    same HTTP code means different things: a 404 on create is the template,
    on a file read the path."""
    kw: Dict[str, Any] = {"reason": code or str(status), "status_code": status or None,
                          "sandbox": sandbox}
    msg = message or f"HTTP {status}"
    if status in (401, 403) or code in ("Unauthenticated", "PermissionDenied"):
        return errors.AuthError(msg, **kw)
    # A workspace named by a create, a run or a workspace call (docs/sdk.md,
    # "Workspaces"): missing, or held by another sandbox or run.
    if status == 404 and msg.startswith("no workspace"):
        return errors.WorkspaceNotFoundError(msg, **kw)
    if status == 409 and msg.startswith("workspace ") and " is attached to " in msg:
        return errors.WorkspaceInUseError(msg, **kw)
    if op == "port":
        port_reason = _port_reason(status, msg)
        if port_reason:
            kw["reason"] = port_reason
            return errors.PortError(msg, **kw)
    if _no_route(status, code, msg):
        # A node older than the SDK: without this a missing /stat route
        # would read as a missing file, and exists() as False.
        kw["reason"] = "Unimplemented"
        return errors.UnsupportedError(f"the node does not serve this call (older than the "
                                       f"SDK?): {msg}", **kw)
    if status == 404 or code == "NotFound":
        if op == "create" and "template" in msg:
            kw["reason"] = "TemplateNotFound"
            return errors.TemplateNotFoundError(msg, **kw)
        if op in _PATH_OPS and not msg.startswith("no sandbox"):
            return errors.PathNotFoundError(msg, **kw)
        return errors.SandboxNotFoundError(msg, **kw)
    if status == 429 or code == "ResourceExhausted":
        if op == "list" and msg.startswith("listing of "):
            return errors.ApiError(msg, **kw)   # the host's cap on one listing, not capacity
        kw["reason"] = "InsufficientCapacity"
        return errors.CapacityError(msg, **kw)
    if status == 409 or code in ("FailedPrecondition", "AlreadyExists"):
        if op == "create" and msg.startswith("template"):
            kw["reason"] = "NoReadyNode"
            return errors.TemplateNotReadyError(msg, **kw)
        if "is Failed" in msg or "is Deleting" in msg:
            return errors.SandboxFailedError(msg, **kw)
        return errors.ConflictError(msg, **kw)
    if status == 504 or code == "DeadlineExceeded":
        if op == "exec":
            return errors.ExecTimeoutError(msg, sandbox=sandbox)
        return errors.SandboxTimeoutError(msg, **kw)
    if status == 501 or code == "Unimplemented":
        return errors.UnsupportedError(msg, **kw)
    return errors.ApiError(msg, **kw)


def node_sandbox_info(j: Mapping[str, Any]) -> SandboxInfo:
    labels = dict(j.get("labels") or {})
    return SandboxInfo(
        name=j.get("id", ""),
        id=j.get("id", ""),
        template=j.get("template", ""),
        phase=j.get("state", ""),
        metadata=to_metadata(labels),
        labels=labels,
        message=j.get("message", "") or "",
        fork_of=j.get("forkOf", "") or labels.get(FORK_OF, ""),
        created_at=j.get("createdAt", "") or "",
        expires_at=j.get("expiresAt", "") or "",
        restore_ms=j.get("readyMs"),
    )


def check_path(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise ValueError(f"sandbox paths are absolute: {path!r}")
    return path


def file_mode(mode: Optional[int]) -> Optional[str]:
    if mode is None:
        return None
    if not 0 <= mode <= 0o7777:
        raise ValueError("mode must be in 0..0o7777")
    return format(mode, "04o")


def entries(j: Mapping[str, Any]) -> List[EntryInfo]:
    """The items of ``GET .../ls``, in the guest's order."""
    return [EntryInfo(name=str(e.get("name", "")), path=str(e.get("path", "")),
                      type=str(e.get("type", "other")), size=int(e.get("size") or 0),
                      mode=int(e.get("mode") or 0), mtime=e.get("mtime"))
            for e in j.get("items") or []]


def file_info(j: Mapping[str, Any]) -> FileInfo:
    """The answer of ``GET .../stat``."""
    return FileInfo(path=str(j.get("path", "")), type=str(j.get("type", "other")),
                    size=int(j.get("size") or 0), mode=int(j.get("mode") or 0),
                    mtime=j.get("mtime"), uid=int(j.get("uid") or 0), gid=int(j.get("gid") or 0))


def remove_params(path: str, recursive: bool) -> Dict[str, str]:
    params = {"path": check_path(path)}
    if recursive:
        params["recursive"] = "true"
    return params
