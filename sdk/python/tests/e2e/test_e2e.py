"""The SDK against the real thing: kube-apiserver, kubicle-operator and a
kubicle-node running the test guest (docs/testguest.md: echo, cat,
printenv, hostname, sha256sum; no shell)."""

import asyncio
import base64
import hashlib
import os
import subprocess
import sys
import time
import uuid

import httpx
import pytest

import kubicle
import stack as stack_mod
from kubicle import errors

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
TEMPLATE = "tg"


def run_id():
    return "e2e-" + uuid.uuid4().hex[:8]


def test_create_exec_files_delete(stack, kube):
    from kubernetes import client

    run = run_id()
    sb = kube.sandboxes.create(TEMPLATE, metadata={"run": run, "agent": "a0"},
                               env={"GREETING": "hello"}, ttl_seconds=600, timeout=60)
    co = client.CustomObjectsApi(stack.api)
    obj = co.get_namespaced_custom_object("kubicle.dev", "v1alpha1", "default", "sandboxes",
                                          sb.name)
    assert obj["metadata"]["labels"]["kubicle.dev/run"] == run
    assert obj["metadata"]["labels"]["kubicle.dev/agent"] == "a0"
    assert sb.id == "k-" + obj["metadata"]["uid"]
    assert sb.info.endpoint == stack.node_url.split("://", 1)[1]
    # The token is the client's own: only its hash went to the cluster
    # (spec.tokenSha256, published as is), and no Secret was made.
    own = hashlib.sha256(sb._ref.token.encode()).hexdigest()
    assert obj["spec"]["tokenSha256"] == own == obj["status"]["tokenSha256"]
    assert "tokenSecretName" not in obj["status"]
    core = client.CoreV1Api(stack.api)
    assert not [s for s in core.list_namespaced_secret("default").items
                if s.metadata.name == f"{sb.name}-token"]
    assert sb.exec(["echo", "hi"]).stdout == "hi\n"
    assert sb.exec(["printenv", "GREETING"]).stdout == "hello\n"   # spec.env, applied by the node
    assert sb.exec(["printenv", "GREETING"], env={"GREETING": "own"}).stdout == "own\n"
    assert sb.exec("hostname").stdout.strip() == sb.name   # a shell string, sent as argv
    out = []
    r = sb.exec(["cat"], stdin="streamed", on_stdout=out.append)
    assert r.stdout == "streamed" and "".join(out) == "streamed"
    data = os.urandom(48 * 1024)   # the test guest keeps files up to 64 KiB
    assert sb.filesystem.write("/work/blob", data) == len(data)
    assert sb.filesystem.read("/work/blob", format="bytes") == data
    assert b"".join(sb.filesystem.read("/work/blob", format="stream")) == data
    # An iterable is streamed chunked, a real file with its size.
    assert sb.filesystem.write("/work/gen", (bytes([i]) * 1000 for i in range(20))) == 20000
    assert sb.filesystem.read("/work/gen", format="bytes") == b"".join(
        bytes([i]) * 1000 for i in range(20))
    import tempfile
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        assert sb.filesystem.write("/work/file", f) == len(data)
    sink = __import__("io").BytesIO()
    assert sb.filesystem.read_to("/work/file", sink) == len(data) and sink.getvalue() == data
    sb.filesystem.write("/work/t.txt", "text\n")
    assert sb.exec(["cat", "/work/t.txt"]).stdout == "text\n"
    assert sb.filesystem.exists("/work/t.txt") and not sb.filesystem.exists("/work/none")
    with pytest.raises(errors.PathNotFoundError):
        sb.filesystem.read("/work/none")
    assert sb.exec(["false"]).exit_code == 1
    with pytest.raises(errors.UnsupportedError):
        sb.exec("echo $HOME")   # needs a shell; the test guest has none
    check_stat_list_remove(sb, blob_size=len(data))
    assert [s.name for s in kube.sandboxes.list(metadata={"run": run})] == [sb.name]
    sb.delete()
    assert kube.sandboxes.list(metadata={"run": run}) == []
    with pytest.raises(errors.SandboxNotFoundError):
        kube.sandboxes.get(sb.name)


def check_stat_list_remove(sb, blob_size):
    """The node's stat, ls and DELETE routes over the test guest's RAM files
    (docs/testguest.md): /work holds blob, gen, file and t.txt, written above
    with the default mode. Its directories exist only while files are under
    them, so none is ever empty, and a LIST comes in slot order, not sorted."""
    fs = sb.filesystem
    st = fs.stat("/work/t.txt")
    assert (st.path, st.type, st.size, st.mode) == ("/work/t.txt", "file", 5, 0o644)
    assert (st.uid, st.gid) == (0, 0)
    d = fs.stat("/work")
    assert d.is_dir and d.mode == 0o755 and d.mtime is None
    entries = {e.name: e for e in fs.list("/work")}
    assert sorted(entries) == ["blob", "file", "gen", "t.txt"]
    blob = entries["blob"]
    assert (blob.path, blob.type, blob.size, blob.mode) == ("/work/blob", "file", blob_size, 0o644)
    top = {e.name: e for e in fs.list("/")}
    assert top["work"].is_dir and top["work"].path == "/work"
    with pytest.raises(errors.ConflictError):
        fs.list("/work/blob")   # not a directory
    with pytest.raises(errors.PathNotFoundError):
        fs.list("/nowhere")
    with pytest.raises(errors.PathNotFoundError):
        fs.stat("/work/none")
    with pytest.raises(errors.ConflictError):
        fs.remove("/work")   # has files: only with recursive=True
    fs.remove("/work/t.txt")
    assert not fs.exists("/work/t.txt")
    assert sb.exec(["cat", "/work/t.txt"]).exit_code == 1   # gone in the guest too
    with pytest.raises(errors.PathNotFoundError):
        fs.remove("/work/t.txt")
    fs.write("/work/sub/x", "1")
    fs.remove("/work", recursive=True)
    assert not fs.exists("/work") and not fs.exists("/work/sub/x")
    with pytest.raises(errors.PathNotFoundError):
        fs.list("/work")


def test_own_token_and_a_token_secret_from_another_client(stack, kube):
    """Another client finds a Sandbox made with its creator's own token but
    cannot reach it (no Secret: AuthError OwnToken, and the node refuses
    every other token); one made with token_secret=True it reaches through
    the Secret the operator minted."""
    from kubernetes import client

    run = run_id()
    mine = kube.sandboxes.create(TEMPLATE, metadata={"run": run})
    shared = kube.sandboxes.create(TEMPLATE, metadata={"run": run}, token_secret=True)
    obj = client.CustomObjectsApi(stack.api).get_namespaced_custom_object(
        "kubicle.dev", "v1alpha1", "default", "sandboxes", shared.name)
    assert "tokenSha256" not in obj["spec"]
    secret = client.CoreV1Api(stack.api).read_namespaced_secret(
        obj["status"]["tokenSecretName"], "default")
    assert shared._ref.token == base64.b64decode(secret.data["token"]).decode()
    with kubicle.Kubicle(kubeconfig=stack.kubeconfig) as other:
        theirs = other.sandboxes.get(mine.name)
        with pytest.raises(errors.AuthError) as e:
            theirs.exec(["echo"])
        assert e.value.reason == "OwnToken"
        assert other.sandboxes.get(shared.name).exec(["echo", "s"]).stdout == "s\n"
    assert kube.sandboxes.get(mine.name).exec(["echo", "m"]).stdout == "m\n"
    assert sorted(kube.sandboxes.delete({"run": run})) == sorted([mine.name, shared.name])


def test_wrong_token_is_refused_by_the_node(kube):
    with kube.sandboxes.create(TEMPLATE, metadata={"run": run_id()}) as sb:
        sb._dp()
        sb._ref.token = "0" * 64
        with pytest.raises(errors.AuthError) as e:
            sb.exec(["echo"])
        assert e.value.status_code == 401


def test_template_errors(stack, kube):
    from kubernetes import client

    with pytest.raises(errors.TemplateNotFoundError) as e:
        kube.sandboxes.create("no-such-template", timeout=30)
    assert e.value.reason == "TemplateNotFound" and "no-such-template" in e.value.message
    # A template no node can bake: its kernel is outside the node's image roots.
    co = client.CustomObjectsApi(stack.api)
    co.create_namespaced_custom_object("kubicle.dev", "v1alpha1", "default", "sandboxtemplates", {
        "apiVersion": "kubicle.dev/v1alpha1", "kind": "SandboxTemplate",
        "metadata": {"name": "unbakeable"},
        "spec": {"kernel": "/nonexistent/vmlinux", "rootfs": "/nonexistent/rootfs.img",
                 "memoryMiB": 64}})
    try:
        with pytest.raises(errors.TemplateNotReadyError) as e:
            kube.sandboxes.create("unbakeable", timeout=30)
        assert e.value.reason == "NoReadyNode"
    finally:
        co.delete_namespaced_custom_object("kubicle.dev", "v1alpha1", "default",
                                           "sandboxtemplates", "unbakeable")


def _gone(kube, run, timeout=60):
    """Whether every Sandbox of the run is gone (the SDK deletes the one a
    failed create made, in the background: the node's teardown comes first)."""
    deadline = time.monotonic() + timeout
    while kube.sandboxes.list(metadata={"run": run}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return kube.sandboxes.list(metadata={"run": run}) == []


def _node_memory_mib(stack):
    """The memory the node offers the operator's placement (its Lease's
    kubicle.dev/capacity-memory-mib: --capacity-mem, default 3/4 of the
    host's RAM). Every node publishes it: its absence fails the test."""
    from kubernetes import client

    lease = client.CoordinationV1Api(stack.api).read_namespaced_lease(
        f"kubicle-node-{stack_mod.NODE_NAME}", stack_mod.LEASE_NS)
    v = (lease.metadata.annotations or {}).get("kubicle.dev/capacity-memory-mib")
    assert v, f"the node's Lease has no kubicle.dev/capacity-memory-mib: {lease.metadata.annotations}"
    return int(v)


# The largest spec.resources.memoryMiB the Sandbox CRD admits.
MAX_SANDBOX_MIB = 262144


def test_capacity_error_from_the_operators_placement(stack, kube):
    # More memory than the node offers: the operator's placement finds no
    # node with room (Scheduled=False InsufficientCapacity, "every node with
    # the template ready is full") and nothing starts on the node.
    offered = _node_memory_mib(stack)
    if offered >= MAX_SANDBOX_MIB:  # a host of over 341 GiB (3/4 of its RAM)
        pytest.skip(f"the node offers {offered} MiB: no Sandbox the CRD admits is too big")
    run = run_id()
    with pytest.raises(errors.KubicleError) as e:
        kube.sandboxes.create(TEMPLATE, metadata={"run": run}, timeout=60,
                              resources={"memory_mib": MAX_SANDBOX_MIB})
    assert type(e.value) is errors.CapacityError, repr(e.value)
    assert e.value.reason == "InsufficientCapacity"
    assert e.value.message == "every node with the template ready is full"
    assert e.value.sandbox.startswith(TEMPLATE + "-")
    assert _gone(kube, run)


async def test_async_capacity_error_from_the_operators_placement(stack, akube):
    offered = _node_memory_mib(stack)
    if offered >= MAX_SANDBOX_MIB:  # a host of over 341 GiB (3/4 of its RAM)
        pytest.skip(f"the node offers {offered} MiB: no Sandbox the CRD admits is too big")
    with pytest.raises(errors.CapacityError) as e:
        await akube.sandboxes.create(TEMPLATE, metadata={"run": run_id()}, timeout=60,
                                     resources={"memory_mib": MAX_SANDBOX_MIB})
    assert e.value.reason == "InsufficientCapacity" and "full" in e.value.message


def test_sandbox_failed_with_the_nodes_message(kube):
    # The CRD admits any string as an env value; the node refuses one with
    # a NUL byte (SandboxManager's ValidateEnv), so the VM never starts:
    # status.vm Failed with the node's words, Ready=False VMFailed.
    run = run_id()
    with pytest.raises(errors.KubicleError) as e:
        kube.sandboxes.create(TEMPLATE, metadata={"run": run}, timeout=60,
                              env={"OK": "fine", "HAS_NUL": "a\x00b"})
    assert type(e.value) is errors.SandboxFailedError, repr(e.value)
    assert e.value.reason == "VMFailed"
    assert e.value.message == "env HAS_NUL: value over 32 KiB or with a NUL byte"
    assert _gone(kube, run)


def test_fork_of_a_deleted_source_fails(kube):
    # The operator keeps the SandboxFork waiting for its source (Ready=False
    # SourceNotFound, "waiting for the source"; it could come back), so
    # fork() says so when its timeout runs out, and deletes the SandboxFork.
    run = run_id()
    base = kube.sandboxes.create(TEMPLATE, metadata={"run": run})
    base.delete()
    with pytest.raises(errors.KubicleError) as e:
        base.fork(2, timeout=5)
    assert type(e.value) is errors.SandboxFailedError, repr(e.value)
    assert e.value.reason == "SourceNotFound"
    assert e.value.message == "waiting for the source"
    assert e.value.sandbox.startswith(base.name + "-f")
    assert _gone(kube, run)


def test_fork_children_outlive_parent_and_delete_alone(kube):
    run = run_id()
    base = kube.sandboxes.create(TEMPLATE, metadata={"run": run, "agent": "base"})
    base.filesystem.write("/work/state", "warm\n")
    kids = base.fork(3, metadata={"role": "c"})
    assert len(kids) == 3
    for k in kids:
        assert k.info.fork_of == base.name and k.metadata["run"] == run
        assert k.metadata["role"] == "c"
        assert k.exec(["cat", "/work/state"]).stdout == "warm\n"
    kids[0].filesystem.write("/work/state", "mine\n")   # copy-on-write: private to each
    assert kids[1].exec(["cat", "/work/state"]).stdout == "warm\n"
    kids[1].delete()   # not recreated: the SandboxFork let its children go
    base.delete()
    time.sleep(1)
    names = sorted(s.name for s in kube.sandboxes.list(metadata={"run": run}))
    assert names == sorted([kids[0].name, kids[2].name])
    assert kids[2].exec(["echo", "alive"]).stdout == "alive\n"
    assert sorted(kube.sandboxes.delete(metadata={"run": run})) == names
    assert kube.sandboxes.list(metadata={"run": run}) == []


def test_sweep_waits_until_gone(stack, kube):
    run = run_id()
    made = [kube.sandboxes.create(TEMPLATE, metadata={"run": run, "agent": f"a{i}"})
            for i in range(4)]
    deleted = kube.sandboxes.delete(metadata={"run": run})
    assert sorted(deleted) == sorted(s.name for s in made)
    assert kube.sandboxes.list(metadata={"run": run}) == []
    # Gone on the node too: no VM with those ids.
    token = stack.admin_token()
    ids = [s["id"] for s in httpx.get(f"{stack.node_url}/v1/sandboxes", verify=stack.node_tls(),
                                      headers={"Authorization": f"Bearer {token}"}).json()["items"]]
    assert not set(ids) & {s.id for s in made}


async def test_async_fan_out(akube):
    run = run_id()

    async def agent(i):
        sb = await akube.sandboxes.create(TEMPLATE, metadata={"run": run, "agent": f"a{i}"})
        try:
            await sb.filesystem.write("/work/task", f"task {i}\n")
            assert [e.name for e in await sb.filesystem.list("/work")] == ["task"]
            return (await sb.exec(["cat", "/work/task"])).stdout
        finally:
            await sb.delete()

    got = await asyncio.gather(*(agent(i) for i in range(20)))
    assert got == [f"task {i}\n" for i in range(20)]
    assert await akube.sandboxes.list(metadata={"run": run}) == []


def test_standalone_mode_on_the_same_node(stack):
    token = stack.admin_token()
    tmpl = [t["name"] for t in httpx.get(f"{stack.node_url}/v1/templates", verify=stack.node_tls(),
                                         headers={"Authorization": f"Bearer {token}"}).json()["items"]
            if t["state"] == "Ready"][0]
    run = run_id()
    with kubicle.Kubicle(node_url=stack.node_url, token=token, verify=stack.ca_file) as k:
        with k.sandboxes.create(tmpl, metadata={"run": run}, env={"E": "1"}) as sb:
            assert sb.exec(["printenv", "E"]).stdout == "1\n"
            sb.filesystem.write("/x", "y")
            assert [(e.name, e.size) for e in sb.filesystem.list("/")] == [("x", 1)]
            kids = sb.fork(2)
            assert [c.exec(["cat", "/x"]).stdout for c in kids] == ["y", "y"]
            kids[0].filesystem.remove("/x")   # each child's files are its own
            assert not kids[0].filesystem.exists("/x") and kids[1].filesystem.exists("/x")
            assert sb.filesystem.stat("/x").size == 1
        assert len(k.sandboxes.delete(metadata={"run": run})) == 2
        assert k.sandboxes.list(metadata={"run": run}) == []


def _example(stack, name, *args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "sdk", "python", "src"))
    return subprocess.run([sys.executable, os.path.join(REPO, "examples", "python", name),
                           "--kubeconfig", stack.kubeconfig, "--template", TEMPLATE, *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_example_swarm(stack, kube):
    p = _example(stack, "swarm.py", "--count", "8", "--run", "ex-swarm")
    print(p.stdout, p.stderr)
    assert p.returncode == 0
    assert "8 of 8 agents ok" in p.stdout
    assert "agent-07" in p.stdout   # the default command, echo, printed the agent's name
    assert kube.sandboxes.list(metadata={"run": "ex-swarm"}) == []


def test_example_swarm_standalone(stack):
    token = stack.admin_token()
    tmpl = [t["name"] for t in httpx.get(f"{stack.node_url}/v1/templates", verify=stack.node_tls(),
                                         headers={"Authorization": f"Bearer {token}"}).json()["items"]
            if t["state"] == "Ready"][0]
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "sdk", "python", "src"),
               KUBICLE_NODE_TOKEN=token, KUBICLE_NODE_CA_FILE=stack.ca_file)
    p = subprocess.run([sys.executable, os.path.join(REPO, "examples", "python", "swarm.py"),
                        "--node-url", stack.node_url, "--template", tmpl, "--count", "4",
                        "--", "hostname"], capture_output=True, text=True, timeout=300, env=env)
    print(p.stdout, p.stderr)
    assert p.returncode == 0 and "4 of 4 agents ok" in p.stdout


def test_example_best_of_n(stack, kube):
    p = _example(stack, "best_of_n.py", "-n", "6", "--keep", "2", "--run", "ex-bon")
    print(p.stdout, p.stderr)
    assert p.returncode == 0
    assert "6 forks" in p.stdout and "2 kept, 2 sandboxes left" in p.stdout
    assert p.stdout.count("winner ") == 2
    assert kube.sandboxes.list(metadata={"run": "ex-bon"}) == []


def test_workspace_files_and_one_writer_in_kubernetes_mode(stack, kube):
    """A Workspace made, read and written through the SDK alone: files()
    finds node, disk id, token and CA from the objects; a Sandbox holding it
    makes every file call WorkspaceInUseError, and its delete frees it."""
    name = run_id()
    ws = kube.workspaces.create(name, 16, labels={"team": "e2e"}, timeout=120)
    assert ws.state == "Ready" and ws.size_mib == 16 and ws.id.startswith("w-")
    assert ws.node and ws.attached_to is None
    assert name in [w.name for w in kube.workspaces.list()]
    files = kube.workspaces.files(name)
    assert files.write("/notes/a.txt", "kept\n") == 5
    assert files.read("/notes/a.txt") == "kept\n"
    assert [e.name for e in files.list("/notes")] == ["a.txt"]
    sb = kube.sandboxes.create(TEMPLATE, workspace=name, ttl_seconds=600, timeout=60)
    try:
        assert kube.workspaces.get(name).attached_to == sb.name
        with pytest.raises(errors.WorkspaceInUseError):
            files.read("/notes/a.txt")
        with pytest.raises(errors.WorkspaceInUseError):
            kube.workspaces.delete(name)
    finally:
        sb.delete()
    deadline = time.monotonic() + 60
    while kube.workspaces.get(name).attached_to is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert files.read("/notes/a.txt") == "kept\n"   # the disk outlived the Sandbox
    kube.workspaces.delete(name)
    with pytest.raises(errors.WorkspaceNotFoundError):
        kube.workspaces.get(name)
