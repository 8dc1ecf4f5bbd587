"""Per-call runs (docs/sdk.md, "Per-call runs"): one command in a VM restored
from a template for that call and discarded after it. Pure pieces shared by
the sync and async clients: where a template runs, the request, the answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

from . import _wire, errors
from .models import RunResult, RunTimings

Command = Union[str, Sequence[str]]


@dataclass
class RunTarget:
    base: str                # <scheme>://<endpoint>
    node_template: str       # the node's name of the template (the route's <name>)
    token: str               # the template's run token (or a node's admin token)
    http: Any = None         # the pooled client verifying that node; None: the default
    node_workspace: Optional[str] = None  # the node's name of the workspace (status.disk.id)


def run_body(command: Command, *, timeout_seconds: Optional[float],
             env: Optional[Mapping[str, str]], stdin: Union[bytes, str, None],
             workspace: Optional[str] = None) -> Dict[str, Any]:
    body = _wire.exec_body(command, env=env, cwd=None, stdin=stdin, timeout_seconds=timeout_seconds)
    if workspace is not None:
        if not isinstance(workspace, str) or not workspace:
            raise ValueError("workspace must be a workspace's name")
        body["workspace"] = workspace
    return body


def run_path(node_template: str) -> str:
    return f"/v1/templates/{node_template}/run"


def run_result(j: Mapping[str, Any]) -> RunResult:
    e = _wire.exec_result(j)
    t = j.get("timings") or {}
    return RunResult(exit_code=e.exit_code, stdout=e.stdout, stderr=e.stderr,
                     timed_out=e.timed_out, signal=e.signal, truncated=e.truncated,
                     stdout_bytes=e.stdout_bytes, stderr_bytes=e.stderr_bytes,
                     timings=RunTimings(restore_ms=float(t.get("restoreMs", 0)),
                                        exec_ms=float(t.get("execMs", 0)),
                                        total_ms=float(t.get("totalMs", 0))))


def run_error(status: int, code: str, message: str, template: str) -> errors.KubicleError:
    """A node's error answer to a run: the template is what 404/409 are about."""
    kw: Dict[str, Any] = {"reason": code or str(status), "status_code": status}
    if status == 404 and message.startswith("no workspace"):
        return errors.WorkspaceNotFoundError(message, **kw)
    if status == 409 and "workspace" in message and "attached to" in message:
        return errors.WorkspaceInUseError(message, **kw)
    if status == 404:
        return errors.TemplateNotFoundError(message or f"no template {template}", **kw)
    if status == 409:
        return errors.TemplateNotReadyError(message, **kw)
    if status == 501 and "workspace" in message:
        return errors.WorkspaceNotSupportedError(message, **kw)
    return _wire.error_for(status, code, message, op="run")


def pick_node(template: Mapping[str, Any], only: Optional[str] = None) -> Tuple[str, str, str]:
    """(node, endpoint, node template) of a node where the template's
    current generation is Ready, the first in status.nodes[] order (only
    node ``only`` when given: a workspace's); raises TemplateNotReadyError
    when none is."""
    name = (template.get("metadata") or {}).get("name", "")
    gen = (template.get("metadata") or {}).get("generation")
    for e in (template.get("status") or {}).get("nodes") or []:
        if not isinstance(e, Mapping):
            continue
        if only is not None and e.get("nodeName") != only:
            continue
        if (e.get("phase") == "Ready" and e.get("observedGeneration") == gen and
                e.get("endpoint") and e.get("nodeTemplate")):
            return str(e.get("nodeName", "")), str(e["endpoint"]), str(e["nodeTemplate"])
    raise errors.TemplateNotReadyError(
        f"SandboxTemplate {name} is not Ready on any node that serves runs" +
        (f" (the workspace is on node {only})" if only is not None else ""),
        reason="NoReadyNode")


def run_token_secret(template: Mapping[str, Any]) -> str:
    name = ((template.get("status") or {}).get("runTokenSecretName") or "")
    if not name or not (template.get("status") or {}).get("runTokenSha256"):
        raise errors.AuthError(
            f"SandboxTemplate {(template.get('metadata') or {}).get('name', '')} has no run "
            "token published yet (see its RunToken condition)", reason="NoRunToken")
    return str(name)


# The node restores the VM before the command's clock starts (bounded by its
# agent timeout, 10 s by default): the answer may take that much longer.
RESTORE_ALLOWANCE_SECONDS = 10.0


def read_timeout(connect: Optional[float], body: Mapping[str, Any]) -> Any:
    import httpx

    return httpx.Timeout(connect, read=float(body["timeoutSeconds"]) + _wire.EXEC_GRACE_SECONDS +
                         RESTORE_ALLOWANCE_SECONDS)


def answer(status: int, content: bytes, template: str) -> RunResult:
    import json

    if status >= 400:
        code, message = _wire.parse_error(content)
        raise run_error(status, code, message, template)
    return run_result(json.loads(content))


def finish(result: RunResult, raise_on_timeout: bool, template: str) -> RunResult:
    if result.timed_out and raise_on_timeout:
        raise errors.ExecTimeoutError(f"the run of {template} ran past its timeout", result=result)
    return result


def transport_error(e: Exception) -> errors.KubicleError:
    import httpx

    if isinstance(e, httpx.TimeoutException):
        return errors.ExecTimeoutError(f"the node did not answer the run in time: {e}")
    return errors.ApiError(f"cannot reach the node: {e}", reason="Unreachable")
