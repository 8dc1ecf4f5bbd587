"""Pure pieces: metadata labels, the node's wire format, what a Sandbox's
status means."""

import base64

import pytest

from kubicle import _kobj, _labels, _wire, errors


def test_metadata_maps_to_kubicle_labels():
    assert _labels.to_labels({"run": "r1", "agent": "a-0"}) == {
        "kubicle.dev/run": "r1", "kubicle.dev/agent": "a-0"}
    assert _labels.to_labels({"team.example/x": "y"}) == {"team.example/x": "y"}
    assert _labels.to_metadata({"kubicle.dev/run": "r1", "other/x": "y"}) == {"run": "r1"}
    assert _labels.selector({"run": "r1", "agent": "a"}) == \
        "kubicle.dev/agent=a,kubicle.dev/run=r1"
    assert _labels.selector(None) == ""


@pytest.mark.parametrize("bad", [{"run": "has space"}, {"run": "-x"}, {"": "v"},
                                 {"run": 3}, {"bad key!": "v"}, {"run": "x" * 64}])
def test_metadata_kubernetes_refuses_is_refused_early(bad):
    with pytest.raises(ValueError):
        _labels.to_labels(bad)


def test_exec_body():
    b = _wire.exec_body(["echo", "hi"], env={"A": "1"}, cwd="/w", stdin="in", timeout_seconds=2.5)
    assert b == {"argv": ["echo", "hi"], "env": ["A=1"], "cwd": "/w",
                 "stdinBase64": base64.b64encode(b"in").decode(), "timeoutSeconds": 3}
    assert _wire.exec_body("ls | wc", env=None, cwd=None, stdin=None, timeout_seconds=None) == {
        "shell": "ls | wc", "timeoutSeconds": 60}
    for bad in ([], [""], "  "):
        with pytest.raises(ValueError):
            _wire.exec_body(bad, env=None, cwd=None, stdin=None, timeout_seconds=1)
    with pytest.raises(ValueError):
        _wire.exec_timeout(0)


def test_shell_as_argv_only_without_shell_syntax():
    assert _wire.shell_as_argv("echo hello world") == ["echo", "hello", "world"]
    for s in ("echo $HOME", "a | b", "x > f", "echo 'q'", "a && b", "A=1 cmd"):
        assert _wire.shell_as_argv(s) is None
    assert _wire.shell_as_argv(["echo"]) is None


def test_exec_result_text_and_base64():
    r = _wire.exec_result({"exitCode": 0, "signal": None, "timedOut": False, "truncated": False,
                           "encoding": "utf-8", "stdout": "é\n", "stderr": ""})
    assert r.stdout == "é\n" and r.stdout_bytes == "é\n".encode() and r.ok
    r = _wire.exec_result({"exitCode": None, "signal": 9, "timedOut": True, "truncated": True,
                           "encoding": "base64", "stdout": base64.b64encode(b"\xff").decode(),
                           "stderr": ""})
    assert r.stdout_bytes == b"\xff" and r.stdout == "\ufffd"
    assert r.timed_out and r.signal == 9 and r.truncated and not r.ok
    with pytest.raises(errors.CommandError):
        r.check()


def test_exec_stream_joins_split_utf8_and_collects():
    got = []
    s = _wire.ExecStream(got.append, None, "sb")
    for chunk in (b"caf\xc3", b"\xa9!"):
        s.feed('{"stream": "stdout", "data": "%s"}\n' % base64.b64encode(chunk).decode())
    s.feed('{"stream": "stderr", "data": "%s"}' % base64.b64encode(b"warn").decode())
    s.feed('{"exit": {"exitCode": 3, "signal": null, "timedOut": false, "truncated": false}}')
    r = s.finish()
    assert "".join(got) == "café!" and r.stdout == "café!" and r.stderr == "warn"
    assert r.exit_code == 3


def test_exec_stream_error_and_cut_short():
    s = _wire.ExecStream(None, None, "sb")
    with pytest.raises(errors.UnsupportedError):
        s.feed('{"error": {"code": "Unimplemented", "message": "no shell"}}')
    with pytest.raises(errors.ApiError, match="without an exit"):
        _wire.ExecStream(None, None, "sb").finish()
    with pytest.raises(errors.ApiError, match="not JSON"):
        _wire.ExecStream(None, None, "sb").feed("garbage")


@pytest.mark.parametrize("status,code,msg,op,cls", [
    (401, "Unauthenticated", "", "exec", errors.AuthError),
    (403, "PermissionDenied", "", "fork", errors.AuthError),
    (404, "NotFound", "no template 'x'", "create", errors.TemplateNotFoundError),
    (404, "NotFound", "no sandbox 'x'", "read", errors.SandboxNotFoundError),
    (404, "NotFound", "/a: no such file", "read", errors.PathNotFoundError),
    (404, "NotFound", "no sandbox 'x'", "exec", errors.SandboxNotFoundError),
    (409, "FailedPrecondition", "template 't' is Baking", "create", errors.TemplateNotReadyError),
    (409, "FailedPrecondition", "sandbox 'x' is Failed (vmm exited)", "exec",
     errors.SandboxFailedError),
    (409, "AlreadyExists", "sandbox 'x' exists", "create", errors.ConflictError),
    (429, "ResourceExhausted", "no capacity", "create", errors.CapacityError),
    (504, "DeadlineExceeded", "", "exec", errors.ExecTimeoutError),
    (501, "Unimplemented", "no shell", "exec", errors.UnsupportedError),
    (500, "Internal", "boom", "exec", errors.ApiError),
    (404, "NotFound", "no such file or directory", "stat", errors.PathNotFoundError),
    (404, "NotFound", "no such directory", "list", errors.PathNotFoundError),
    (404, "NotFound", "no such file or directory", "remove", errors.PathNotFoundError),
    (404, "NotFound", "no sandbox 'x'", "list", errors.SandboxNotFoundError),
    (409, "FailedPrecondition", "directory not empty", "remove", errors.ConflictError),
    (409, "FailedPrecondition", "not a directory", "list", errors.ConflictError),
    (409, "FailedPrecondition", "sandbox 'x' is Failed: vmm exited", "stat",
     errors.SandboxFailedError),
    (400, "InvalidArgument", "refusing to remove /", "remove", errors.ApiError),
    (429, "ResourceExhausted", "listing of /big exceeds the host's limit of 100000 entries",
     "list", errors.ApiError),
    (429, "ResourceExhausted", "too many requests in flight", "list", errors.CapacityError),
    # A node older than the SDK: no such route, or no such method on it.
    (404, "NotFound", "no route /v1/sandboxes/x/stat", "exists", errors.UnsupportedError),
    (405, "MethodNotAllowed", "DELETE is not allowed", "remove", errors.UnsupportedError),
])
def test_node_errors_map_to_their_class(status, code, msg, op, cls):
    e = _wire.error_for(status, code, msg, op=op, sandbox="sb")
    assert type(e) is cls
    assert e.sandbox == "sb"


def test_file_entries_and_stat_from_the_node():
    ls = {"path": "/w", "items": [
        {"name": "a", "path": "/w/a", "type": "file", "size": 3, "mode": 0o640,
         "mtime": "2026-12-03T18:00:00.000Z"},
        {"name": "d", "path": "/w/d", "type": "dir", "size": 0, "mode": 0o755, "mtime": None},
        {"name": "l", "path": "/w/l", "type": "symlink", "size": 1, "mode": 0o777,
         "mtime": None}]}
    a, d, link = _wire.entries(ls)
    assert (a.name, a.path, a.size, a.mode, a.mtime) == ("a", "/w/a", 3, 0o640,
                                                        "2026-12-03T18:00:00.000Z")
    assert a.is_file and not a.is_dir and d.is_dir and d.mtime is None
    assert link.type == "symlink" and not link.is_dir and not link.is_file
    assert _wire.entries({"path": "/e", "items": []}) == []
    st = _wire.file_info({"path": "/w/a", "type": "file", "size": 3, "mode": 0o640,
                          "mtime": None, "uid": 1000, "gid": 100})
    assert (st.path, st.size, st.mode, st.uid, st.gid, st.mtime) == ("/w/a", 3, 0o640, 1000,
                                                                    100, None)
    assert _wire.remove_params("/w", False) == {"path": "/w"}
    assert _wire.remove_params("/w", True) == {"path": "/w", "recursive": "true"}
    with pytest.raises(ValueError):
        _wire.remove_params("w", True)


def test_path_not_found_is_a_builtin_file_not_found():
    assert issubclass(errors.PathNotFoundError, FileNotFoundError)
    assert issubclass(errors.ExecTimeoutError, TimeoutError)


def _sbx(**status):
    return {"metadata": {"name": "s", "uid": "u-1", "namespace": "ns",
                         "labels": {"kubicle.dev/run": "r"}},
            "spec": {"templateRef": {"name": "tg"}}, "status": status}


def _c(t, s, reason, msg=""):
    return {"type": t, "status": s, "reason": reason, "message": msg}


def test_manifest():
    m = _kobj.sandbox_manifest(namespace="ns", template="tg", name=None,
                               labels={"kubicle.dev/run": "r"}, ttl_seconds=60,
                               env={"A": "1"}, resources={"vcpus": 2, "memory_mib": 128})
    assert m["metadata"] == {"namespace": "ns", "labels": {"kubicle.dev/run": "r"},
                             "generateName": "tg-"}
    assert m["spec"] == {"templateRef": {"name": "tg"}, "ttlSeconds": 60,
                         "env": [{"name": "A", "value": "1"}],
                         "resources": {"vcpus": 2, "memoryMiB": 128}}
    with pytest.raises(ValueError):
        _kobj.resources_spec({"gpus": 1})
    f = _kobj.fork_manifest(_sbx(), count=3, labels={"kubicle.dev/x": "y"}, ttl_seconds=None)
    assert f["spec"] == {"sourceRef": {"name": "s"}, "replicas": 3,
                         "childMetadata": {"labels": {"kubicle.dev/x": "y"}}}
    assert f["metadata"]["labels"] == {"kubicle.dev/run": "r"}
    assert f["metadata"]["name"].startswith("s-f")
    h = ["ab" * 32, "cd" * 32]
    f = _kobj.fork_manifest(_sbx(), count=2, labels={}, ttl_seconds=5, child_token_sha256=h)
    assert f["spec"] == {"sourceRef": {"name": "s"}, "replicas": 2, "ttlSeconds": 5,
                         "childTokenSha256": h}


@pytest.mark.parametrize("status,state,cls", [
    ({}, _kobj.PENDING, type(None)),
    ({"conditions": [_c("Scheduled", "False", "TemplateNotFound", "SandboxTemplate x not found")]},
     _kobj.FAILED, errors.TemplateNotFoundError),
    ({"conditions": [_c("Scheduled", "False", "NoReadyNode")]}, _kobj.FAILED,
     errors.TemplateNotReadyError),
    ({"conditions": [_c("Scheduled", "False", "InsufficientCapacity")]}, _kobj.FAILED,
     errors.CapacityError),
    ({"phase": "Failed", "vm": {"state": "Failed", "message": "vmm exited 1"},
      "conditions": [_c("Ready", "False", "VMFailed")]}, _kobj.FAILED, errors.SandboxFailedError),
    ({"phase": "Running", "tokenSecretName": "s-token", "vm": {"endpoint": "h:1"},
      "conditions": [_c("Ready", "True", "Running")]}, _kobj.READY, type(None)),
    ({"phase": "Running", "tokenSha256": "ab" * 32, "vm": {"endpoint": "h:1"},
      "conditions": [_c("Ready", "True", "Running")]}, _kobj.READY, type(None)),  # own token
    ({"phase": "Running", "vm": {"endpoint": "h:1"},
      "conditions": [_c("Ready", "True", "Running")]}, _kobj.PENDING, type(None)),  # no token
    ({"phase": "Running", "conditions": [_c("Ready", "True", "Running")]}, _kobj.PENDING,
     type(None)),  # Ready without an endpoint yet: keep waiting
])
def test_wait_state(status, state, cls):
    got, err = _kobj.wait_state(_sbx(**status), wait_pending=False)
    assert got == state and type(err) is cls


def test_wait_state_vm_message_and_pending_mode():
    _, err = _kobj.wait_state(_sbx(phase="Failed", vm={"message": "vmm exited 1"},
                                   conditions=[_c("Ready", "False", "VMFailed", "x")]),
                              wait_pending=False)
    assert err.reason == "VMFailed" and err.message == "vmm exited 1"
    _, err = _kobj.wait_state(_sbx(phase="Scheduled", vm={"state": "Failed", "message":
                                   "node is full: 64 of 64 vCPUs in use"},
                                   conditions=[_c("Ready", "False", "Scheduled")]),
                              wait_pending=False)
    assert isinstance(err, errors.CapacityError) and err.reason == "InsufficientCapacity"
    _, err = _kobj.wait_state(_sbx(vm={"state": "Failed", "message": "restore failed"},
                                   conditions=[_c("Ready", "False", "Scheduled")]),
                              wait_pending=False)
    assert isinstance(err, errors.SandboxFailedError) and err.reason == "VMFailed"
    st, err = _kobj.wait_state(_sbx(conditions=[_c("Scheduled", "False", "NoReadyNode", "m")]),
                               wait_pending=True)
    assert st == _kobj.PENDING and isinstance(err, errors.TemplateNotReadyError)
    assert err.message == "m"
    assert _kobj.wait_state(None, wait_pending=False)[0] == _kobj.GONE


def test_own_token_and_its_hash():
    """The token as the operator mints one (32 random bytes, hex), its
    SHA-256 as the node computes it, in the manifest only when given."""
    import hashlib

    t = _kobj.new_token()
    assert len(t) == 64 and int(t, 16) >= 0 and t == t.lower() and t != _kobj.new_token()
    h = _kobj.token_sha256(t)
    assert h == hashlib.sha256(t.encode()).hexdigest()
    m = _kobj.sandbox_manifest(namespace="ns", template="tg", name="n", labels={},
                               ttl_seconds=None, env=None, resources=None, token_sha256=h)
    assert m["spec"] == {"templateRef": {"name": "tg"}, "tokenSha256": h}
    mine = {"spec": {"tokenSha256": h}, "status": {"tokenSha256": h}}
    assert _kobj.holds_own_token(mine, h)
    assert not _kobj.holds_own_token({"spec": {}, "status": {"tokenSha256": h}}, h)  # pruned
    assert not _kobj.holds_own_token({"spec": {"tokenSha256": h},
                                      "status": {"tokenSha256": "0" * 64}}, h)  # an old operator
    e = _kobj.own_token_error({"metadata": {"name": "s"}})
    assert e.reason == "OwnToken" and e.sandbox == "s" and "token_secret=True" in e.message


def test_data_plane_url_and_token():
    obj = _sbx(phase="Running", tokenSecretName="s-token", vm={"endpoint": "10.0.0.1:7443"},
               conditions=[_c("Ready", "True", "Running")])
    assert _kobj.data_plane_url("http", obj) == "http://10.0.0.1:7443/v1/sandboxes/k-u-1"
    with pytest.raises(errors.SandboxNotReadyError):
        _kobj.data_plane_url("http", _sbx())
    assert _kobj.token_from_secret({"token": base64.b64encode(b"tok\n").decode()}, "s") == "tok"
    with pytest.raises(errors.AuthError):
        _kobj.token_from_secret({}, "s")
