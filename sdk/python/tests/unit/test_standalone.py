"""Kubicle(node_url=..., token=...) against the fake node: the node's own
API with its admin token, and the data plane every mode shares."""

import io

import pytest

import kubicle
from kubicle import errors


def test_create_body_and_env_applied_client_side(standalone, node):
    sb = standalone.sandboxes.create("tg", metadata={"run": "r1", "agent": "a"}, ttl_seconds=30,
                                     env={"A": "1", "B": "2"}, name="my-sb")
    method, path, body = node.requests[-1]
    assert (method, path) == ("POST", "/v1/sandboxes")
    assert body == {"template": "tg", "id": "my-sb", "ttlSeconds": 30,
                    "labels": {"kubicle.dev/run": "r1", "kubicle.dev/agent": "a"}}
    assert sb.name == sb.id == "my-sb" and sb.metadata == {"run": "r1", "agent": "a"}
    assert standalone.mode == "node"
    # The node's create takes no env: the SDK sends it with every exec, the
    # exec's own variables winning.
    assert sb.exec(["printenv", "A", "B"], env={"B": "3"}).stdout == "1\n3\n"
    assert node.requests[-1][2]["env"] == ["A=1", "B=3"]
    # The data plane uses the sandbox's own token, not the admin one.
    assert node.sandboxes["my-sb"].token == sb._ref.token
    sb.delete()


def test_create_errors(standalone, node):
    with pytest.raises(errors.TemplateNotFoundError):
        standalone.sandboxes.create("nope")
    node.templates["baking"] = "Baking"
    with pytest.raises(errors.TemplateNotReadyError) as e:
        standalone.sandboxes.create("baking")
    assert "Baking" in e.value.message
    node.capacity = 0
    with pytest.raises(errors.CapacityError) as e:
        standalone.sandboxes.create("tg")
    assert e.value.status_code == 429
    with pytest.raises(errors.UnsupportedError):
        standalone.sandboxes.create("tg", resources={"vcpus": 2})


def test_bad_admin_token(node):
    with kubicle.Kubicle(node_url=node.url, token="wrong") as k:
        with pytest.raises(errors.AuthError) as e:
            k.sandboxes.create("tg")
        assert e.value.status_code == 401
    with pytest.raises(ValueError):
        kubicle.Kubicle(node_url=node.url)


def test_exec(standalone, node):
    with standalone.sandboxes.create("tg") as sb:
        r = sb.exec("echo hello world")   # no shell in the guest: sent again as an argv
        assert r.stdout == "hello world\n" and r.exit_code == 0
        with pytest.raises(errors.UnsupportedError):
            sb.exec("echo $HOME | tr a b")
        assert sb.exec(["cat"], stdin=b"piped").stdout == "piped"
        assert sb.exec(["pwd"], cwd="/work").stdout == "/work\n"
        r = sb.exec(["false"])
        assert r.exit_code == 1 and not r.ok
        with pytest.raises(errors.CommandError):
            r.check()
        assert sb.exec(["nosuch"]).exit_code == 127
        r = sb.exec(["binary"])
        assert r.stdout_bytes == b"\xff\xfe\x00"
        with pytest.raises(errors.ExecTimeoutError) as e:
            sb.exec(["sleep", "5"], timeout_seconds=1)
        assert e.value.result is not None and e.value.result.timed_out
        r = sb.exec(["sleep", "5"], timeout_seconds=1, raise_on_timeout=False)
        assert r.timed_out and r.exit_code is None
        assert node.requests[-1][2]["timeoutSeconds"] == 1


def test_exec_streaming(standalone, node):
    with standalone.sandboxes.create("tg") as sb:
        out, err = [], []
        r = sb.exec(["chunks", "x", "y", "z"], on_stdout=out.append, on_stderr=err.append)
        assert out == ["x", "y", "z"] and err == ["X", "Y", "Z"]
        assert r.stdout == "xyz" and r.stderr == "XYZ" and r.exit_code == 0
        got = []
        assert sb.exec(["utf8split"], on_stdout=got.append).stdout == "café\n"
        assert "".join(got) == "café\n"
        assert node.requests[-1][2]["argv"] == ["utf8split"]
        with pytest.raises(errors.ApiError, match="agent connection broke"):
            sb.exec(["explode"], on_stdout=print)
        with pytest.raises(errors.ExecTimeoutError):
            sb.exec(["sleep", "3"], timeout_seconds=1, on_stdout=print)
        assert sb.exec("echo via stream", on_stdout=got.append).stdout == "via stream\n"


def test_files(standalone, node):
    with standalone.sandboxes.create("tg") as sb:
        fs = sb.filesystem
        assert fs.write("/t.txt", "text") == 4
        assert fs.write("/b.bin", b"\x00\x01") == 2
        big = bytes(range(256)) * 4096   # 1 MiB, streamed both ways
        assert fs.write("/big", io.BytesIO(big)) == len(big)
        assert fs.write("/gen", (b"chunk%d" % i for i in range(3))) == 18
        assert node.sandboxes[sb.id].files["/gen"] == b"chunk0chunk1chunk2"
        assert fs.read("/t.txt") == "text" and fs.read("/b.bin", format="bytes") == b"\x00\x01"
        assert b"".join(fs.read("/big", format="stream")) == big
        sink = io.BytesIO()
        assert fs.read_to("/big", sink) == len(big) and sink.getvalue() == big
        assert fs.exists("/t.txt") and not fs.exists("/missing")
        with pytest.raises(FileNotFoundError):
            fs.read("/missing")
        with pytest.raises(ValueError):
            fs.read("relative")
        fs.write("/m", "x", mode=0o755)
        assert node.requests[-1][2]["mode"] == "0755"


def test_list_stat_exists(standalone, node):
    with standalone.sandboxes.create("tg") as sb:
        fs = sb.filesystem
        fs.write("/d/a", "one", mode=0o600)
        fs.write("/d/sub/b", "2")
        entries = fs.list("/d")
        assert node.requests[-1][:2] == ("GET", f"/v1/sandboxes/{sb.id}/ls")
        assert [(e.name, e.path, e.type, e.is_dir, e.size, e.mode) for e in entries] == [
            ("a", "/d/a", "file", False, 3, 0o600), ("sub", "/d/sub", "dir", True, 0, 0o755)]
        assert entries[0].mtime and entries[0].is_file and entries[1].mtime is None
        assert isinstance(entries[0], kubicle.EntryInfo)
        assert [e.name for e in fs.list()] == ["d"]   # "/" by default
        st = fs.stat("/d/a")
        assert node.requests[-1][:2] == ("GET", f"/v1/sandboxes/{sb.id}/stat")
        assert isinstance(st, kubicle.FileInfo)
        assert (st.path, st.type, st.size, st.mode, st.uid, st.gid) == ("/d/a", "file", 3, 0o600,
                                                                        0, 0)
        assert st.is_file and not st.is_dir and st.mtime
        d = fs.stat("/d/sub")
        assert d.is_dir and d.size == 0 and d.mtime is None
        assert fs.exists("/d/a") and fs.exists("/d/sub") and fs.exists("/")
        assert not fs.exists("/d/none") and not fs.exists("/none/deeper")
        assert node.requests[-1] == ("GET", f"/v1/sandboxes/{sb.id}/stat",
                                     {"path": "/none/deeper"})


def test_list_stat_errors(standalone, node):
    with standalone.sandboxes.create("tg") as sb:
        listed = standalone.sandboxes.get(sb.name)   # reached with the admin token
        fs = sb.filesystem
        fs.write("/f", "x")
        with pytest.raises(errors.PathNotFoundError) as e:
            fs.stat("/none")
        assert e.value.status_code == 404 and e.value.reason == "NotFound"
        with pytest.raises(FileNotFoundError):
            fs.list("/none")
        with pytest.raises(errors.ConflictError) as e:
            fs.list("/f")   # not a directory
        assert e.value.status_code == 409 and e.value.reason == "FailedPrecondition"
        with pytest.raises(errors.ApiError) as e:
            fs.list("/f/")  # the test guest takes no trailing slash
        assert e.value.status_code == 400 and e.value.reason == "InvalidArgument"
        sent = len(node.requests)
        for call in (fs.stat, fs.list, fs.exists, fs.remove):
            with pytest.raises(ValueError):
                call("relative")
        assert len(node.requests) == sent   # refused before any request
    # A missing sandbox is not a missing file: exists() raises.
    with pytest.raises(errors.SandboxNotFoundError):
        listed.filesystem.exists("/f")
    with pytest.raises(errors.SandboxNotFoundError):
        listed.filesystem.list("/")


def test_remove(standalone, node):
    with standalone.sandboxes.create("tg") as sb:
        fs = sb.filesystem
        for p in ("/t.txt", "/d/a", "/d/sub/b", "/d/sub/c"):
            fs.write(p, "x")
        fs.remove("/t.txt")
        assert node.requests[-1] == ("DELETE", f"/v1/sandboxes/{sb.id}/files",
                                     {"path": "/t.txt"})
        assert not fs.exists("/t.txt")
        with pytest.raises(errors.PathNotFoundError):
            fs.remove("/t.txt")
        with pytest.raises(errors.ConflictError, match="not empty"):
            fs.remove("/d/sub")   # a directory with files needs recursive=True
        assert fs.exists("/d/sub/b")
        fs.remove("/d/sub", recursive=True)
        assert node.requests[-1][2] == {"path": "/d/sub", "recursive": "true"}
        assert [e.name for e in fs.list("/d")] == ["a"]
        fs.remove("/d/a", recursive=True)   # a file goes either way
        assert not fs.exists("/d")   # the test guest's directories are implied by files
        with pytest.raises(errors.ApiError) as e:
            fs.remove("/", recursive=True)
        assert e.value.status_code == 400


def test_sandbox_token_may_stat_list_remove(node):
    """The data plane of a created sandbox uses its own token, which the
    node lets call stat, ls and DELETE .../files."""
    with kubicle.Kubicle(node_url=node.url, token=node.admin_token) as k:
        with k.sandboxes.create("tg") as sb:
            assert sb._ref.token == node.sandboxes[sb.id].token
            sb.filesystem.write("/x/y", "z")
            assert sb.filesystem.stat("/x").is_dir
            assert [e.name for e in sb.filesystem.list("/x")] == ["y"]
            sb.filesystem.remove("/x", recursive=True)
            sb._ref.token = "wrong"
            with pytest.raises(errors.AuthError):
                sb.filesystem.stat("/x")


def test_node_without_the_routes_is_unsupported(standalone, node, monkeypatch):
    """An older node answers 404 "no route" (stat, ls) and 405 (DELETE on
    files): UnsupportedError, never a missing file or exists() False."""
    import fake_node

    monkeypatch.delitem(fake_node._SUB_METHODS, "stat")
    monkeypatch.delitem(fake_node._SUB_METHODS, "ls")
    monkeypatch.setitem(fake_node._SUB_METHODS, "files", "GET, PUT")
    with standalone.sandboxes.create("tg") as sb:
        sb.filesystem.write("/f", "x")
        for call in (sb.filesystem.exists, sb.filesystem.stat, sb.filesystem.list,
                     sb.filesystem.remove):
            with pytest.raises(errors.UnsupportedError) as e:
                call("/f")
            assert e.value.reason == "Unimplemented"


def test_fork_list_sweep(standalone, node):
    base = standalone.sandboxes.create("tg", metadata={"run": "r9"}, env={"E": "e"})
    base.filesystem.write("/s", "state")
    kids = base.fork(2, metadata={"role": "c"})
    assert node.requests[-1][2] == {"count": 2, "labels": {"kubicle.dev/role": "c"}}
    for k in kids:
        assert k.filesystem.read("/s") == "state"
        assert k.metadata["run"] == "r9" and k.metadata["fork-of"] == base.id
        assert k.exec(["printenv", "E"]).stdout == "e\n"   # the parent's env comes along
    listed = standalone.sandboxes.list(metadata={"run": "r9"})
    assert sorted(s.name for s in listed) == sorted([base.name] + [k.name for k in kids])
    assert listed[0].exec(["echo", "admin"]).stdout == "admin\n"  # listed: the admin token
    assert sorted(standalone.sandboxes.delete({"run": "r9"})) == sorted(s.name for s in listed)
    assert not node.sandboxes
    with pytest.raises(errors.SandboxNotFoundError):
        standalone.sandboxes.get(base.name)


def test_suspend_and_resume(standalone, node):
    """docs/sdk.md, "Suspend and resume": the node's POST .../suspend and
    .../resume with no body; files stay; commands in between are refused."""
    with standalone.sandboxes.create("tg", name="park") as sb:
        sb.files.write("/kept", "before")
        token = sb._ref.token
        info = sb.suspend()
        assert node.requests[-1][:2] == ("POST", "/v1/sandboxes/park/suspend")
        assert info.phase == "Suspended" and sb.info.phase == "Suspended"
        assert sb._ref.token == token  # the sandbox's own token is kept
        with pytest.raises(errors.ConflictError) as e:
            sb.exec(["echo", "hi"])
        assert "Suspended" in e.value.message
        assert sb.suspend().phase == "Suspended"  # idempotent
        assert sb.resume().phase == "Running"
        assert node.requests[-1][:2] == ("POST", "/v1/sandboxes/park/resume")
        assert sb.files.read("/kept") == "before"
        assert sb.exec(["echo", "hi"]).stdout == "hi\n"
        assert sb.refresh().phase == "Running"
    with pytest.raises(errors.SandboxNotFoundError):
        sb.resume()
