"""Workspaces (docs/sdk.md, "Workspaces") against the fake node: create (the
token once, idempotent, another size a conflict), get, list, delete; files
without a VM with the workspace's own token or the admin's; one writer (a
sandbox holding it makes file calls, a second holder and a delete raise
WorkspaceInUseError); a sandbox and a run with a workspace; the same async.

Kubernetes mode, against the fake cluster (whose operator places a
Workspace, mints its token Secret and has the fake node make the disk):
create waits for Ready (or fails, or times out, and deletes what it made),
get, list, delete (refused while a Sandbox uses it, else waits until the
disk is gone); files(name) finds the node's data plane, the node's name of
the disk, the token and the node's CA from the objects; a Workspace
without a disk or without its Secret is a clear error; sync and async. A
Sandbox sends spec.workspaceRef and a run goes to the Workspace's node."""

import base64

import pytest

import kubicle
from kubicle import errors


def test_create_get_list_delete(standalone, node):
    w = standalone.workspaces.create("ws-1", 64, labels={"team": "a"})
    assert w.name == "ws-1" and w.size_mib == 64 and w.filesystem == "ext4"
    assert w.token and w.attached_to is None
    again = standalone.workspaces.create("ws-1", 64)
    assert again.token is None, "the token is shown once"
    with pytest.raises(errors.ConflictError, match="64 MiB"):
        standalone.workspaces.create("ws-1", 128)
    with pytest.raises(ValueError):
        standalone.workspaces.create("ws-2", 1)
    assert [x.name for x in standalone.workspaces.list()] == ["ws-1"]
    assert standalone.workspaces.get("ws-1").labels == {"team": "a"}
    standalone.workspaces.delete("ws-1")
    with pytest.raises(errors.WorkspaceNotFoundError):
        standalone.workspaces.get("ws-1")


def test_files_without_a_vm_with_the_workspaces_own_token(standalone, node):
    token = standalone.workspaces.create("ws-1", 64).token
    fs = standalone.workspaces.files("ws-1", token=token)
    assert fs.write("/data/in.txt", "hello") == 5
    assert fs.read("/data/in.txt") == "hello"
    assert fs.read("/data/in.txt", format="bytes") == b"hello"
    assert fs.exists("/data/in.txt") and not fs.exists("/nope")
    assert fs.stat("/data/in.txt").size == 5
    assert [e.name for e in fs.list("/data")] == ["in.txt"]
    with pytest.raises(errors.PathNotFoundError):
        fs.read("/nope")
    fs.remove("/data", recursive=True)
    assert not fs.exists("/data/in.txt")
    # A wrong token is refused; the admin's (the default) works.
    with pytest.raises(errors.AuthError):
        standalone.workspaces.files("ws-1", token="nope").read("/x")
    standalone.workspaces.files("ws-1").write("/admin.txt", b"x")
    with pytest.raises(errors.WorkspaceNotFoundError):
        standalone.workspaces.files("absent").read("/x")


def test_one_writer_a_sandbox_holds_it_until_deleted(standalone, node):
    standalone.workspaces.create("ws-1", 64)
    files = standalone.workspaces.files("ws-1")
    files.write("/seed", "s")
    sb = standalone.sandboxes.create("tg", workspace="ws-1")
    assert node.requests[-1][2]["workspace"] == "ws-1"
    assert standalone.workspaces.get("ws-1").attached_to == sb.id
    with pytest.raises(errors.WorkspaceInUseError, match=sb.id):
        files.read("/seed")
    with pytest.raises(errors.WorkspaceInUseError):
        standalone.sandboxes.create("tg", workspace="ws-1")
    with pytest.raises(errors.WorkspaceInUseError):
        standalone.run("tg", ["true"], workspace="ws-1")
    with pytest.raises(errors.WorkspaceInUseError):
        standalone.workspaces.delete("ws-1")
    sb.delete()
    assert files.read("/seed") == "s"


def test_a_run_with_a_workspace_frees_it_when_it_returns(standalone, node):
    standalone.workspaces.create("ws-1", 64)
    r = standalone.run("tg", ["wsput", "/out.txt", "from the run"], workspace="ws-1")
    assert r.exit_code == 0
    assert standalone.workspaces.get("ws-1").attached_to is None
    assert standalone.workspaces.files("ws-1").read("/out.txt") == "from the run"


async def test_async_workspaces(astandalone, node):
    w = await astandalone.workspaces.create("ws-1", 64)
    fs = astandalone.workspaces.files("ws-1", token=w.token)
    assert await fs.write("/a.txt", b"async") == 5
    assert await fs.read("/a.txt") == "async"
    assert [e.name for e in await fs.list("/")] == ["a.txt"]
    assert (await astandalone.workspaces.get("ws-1")).size_mib == 64
    assert [x.name for x in await astandalone.workspaces.list()] == ["ws-1"]
    r = await astandalone.run("tg", ["wsput", "/b.txt", "run"], workspace="ws-1")
    assert r.exit_code == 0 and await fs.read("/b.txt") == "run"
    sb = await astandalone.sandboxes.create("tg", workspace="ws-1")
    with pytest.raises(errors.WorkspaceInUseError):
        await fs.read("/a.txt")
    await sb.delete()
    await astandalone.workspaces.delete("ws-1")
    with pytest.raises(errors.WorkspaceNotFoundError):
        await astandalone.workspaces.get("ws-1")


def test_kubernetes_mode_sends_the_workspace_ref_and_runs_on_its_node(kube, cluster, node):
    # A run with a workspace goes to the Workspace's node only.
    node.templates["py-node"] = "Ready"
    node.run_tokens["py-node"] = "run-tok"
    cluster.create("sandboxtemplates", "team-a", {
        "apiVersion": "kubicle.dev/v1alpha1", "kind": "SandboxTemplate",
        "metadata": {"name": "py"}, "spec": {"kernel": "/k", "rootfs": "/r"}})
    cluster.create("secrets", "team-a", {"apiVersion": "v1", "kind": "Secret",
                                        "metadata": {"name": "py-run-token"},
                                        "data": {"token": base64.b64encode(b"run-tok").decode()}})
    cluster.update(("sandboxtemplates", "team-a", "py"), lambda o: o.update(status={
        "runTokenSecretName": "py-run-token", "runTokenSha256": "0" * 64,
        "nodes": [{"nodeName": "n1", "phase": "Ready", "observedGeneration": 1,
                   "endpoint": node.address, "nodeTemplate": "py-node"}]}))
    with pytest.raises(errors.WorkspaceNotFoundError):
        kube.run("py", ["true"], workspace="ws-1")
    cluster.create("workspaces", "team-a", {
        "apiVersion": "kubicle.dev/v1alpha1", "kind": "Workspace",
        "metadata": {"name": "ws-1"}, "spec": {"sizeMiB": 64}, "status": {"nodeName": "n2"}})
    with pytest.raises(errors.ConflictError, match="no disk on a node yet"):
        kube.run("py", ["true"], workspace="ws-1")  # placed, but its node has not made the disk
    cluster.update(("workspaces", "team-a", "ws-1"),
                   lambda o: o.update(status={"nodeName": "n2", "disk": {"id": "w-uid1"}}))
    with pytest.raises(errors.TemplateNotReadyError, match="n2"):
        kube.run("py", ["true"], workspace="ws-1")
    # On the template's node the run names the disk as that node knows it.
    cluster.update(("workspaces", "team-a", "ws-1"),
                   lambda o: o.update(status={"nodeName": "n1", "disk": {"id": "w-uid1"}}))
    with pytest.raises(errors.WorkspaceNotFoundError, match="w-uid1"):
        kube.run("py", ["true"], workspace="ws-1")
    body = kubicle._kobj.sandbox_manifest(namespace="team-a", template="py", name="s", labels={},
                                          ttl_seconds=None, env=None, resources=None,
                                          workspace="ws-1")
    assert body["spec"]["workspaceRef"] == {"name": "ws-1"}


# --- Kubernetes mode ---------------------------------------------------------

def _secret_token(cluster, name):
    s = cluster.get("secrets", "team-a", f"{name}-workspace-token")
    return base64.b64decode(s["data"]["token"]).decode()


def _disk_requests(node, disk):
    """(method, path) of the node's requests for the disk's files."""
    return [(m, p) for m, p, _ in node.requests if p.startswith(f"/v1/workspaces/{disk}/")]


def test_kube_create_waits_for_ready_and_returns_the_info(kube, cluster, node):
    w = kube.workspaces.create("ws-1", 64, labels={"team": "a"})
    obj = cluster.get("workspaces", "team-a", "ws-1")
    assert obj["spec"] == {"sizeMiB": 64} and obj["metadata"]["labels"]["team"] == "a"
    # Returned once Ready: the operator's phase, its node and the disk it made.
    assert (w.name, w.size_mib, w.state, w.node) == ("ws-1", 64, "Ready", "n1")
    assert w.id == "w-" + obj["metadata"]["uid"] and w.id in node.workspaces
    assert w.labels["team"] == "a" and w.token is None and w.attached_to is None
    assert w.message == "the disk is ready on node n1"
    again = kube.workspaces.create("ws-1", 64)
    assert again.id == w.id
    with pytest.raises(errors.ConflictError, match="64 MiB, not 128 MiB"):
        kube.workspaces.create("ws-1", 128)
    assert cluster.get("workspaces", "team-a", "ws-1") is not None, "a conflict deletes nothing"
    with pytest.raises(ValueError, match="token_sha256"):
        kube.workspaces.create("ws-2", 64, token_sha256="0" * 64)
    with pytest.raises(ValueError):
        kube.workspaces.create("ws-2", 4)
    kube.workspaces.create("ws-0", 8)
    assert [x.name for x in kube.workspaces.list()] == ["ws-0", "ws-1"]
    assert kube.workspaces.get("ws-1") == w
    with pytest.raises(errors.WorkspaceNotFoundError):
        kube.workspaces.get("absent")


def test_kube_create_that_cannot_finish_raises_and_deletes_what_it_made(kube, cluster, node):
    cluster.workspace_disks = "provisioning"
    with pytest.raises(errors.KubicleTimeoutError, match="Provisioning"):
        kube.workspaces.create("ws-1", 64, timeout=1)
    assert ("workspaces", "ws-1", "Background") in cluster.deletes
    cluster.workspace_disks = "diskfail"
    with pytest.raises(errors.WorkspaceFailedError, match="no space left") as e:
        kube.workspaces.create("ws-2", 64, timeout=30)
    assert e.value.reason == "DiskFailed"
    assert ("workspaces", "ws-2", "Background") in cluster.deletes


def test_kube_files_resolve_the_node_disk_token_and_read_and_write(kube, cluster, node):
    w = kube.workspaces.create("ws-1", 64)
    fs = kube.workspaces.files("ws-1")
    assert fs.write("/data/in.txt", "hello") == 5
    assert fs.read("/data/in.txt") == "hello"
    assert [e.name for e in fs.list("/data")] == ["in.txt"]
    assert node.workspaces[w.id].files["/data/in.txt"] == b"hello"
    # The node knows the disk as w-<uid>, never by the object's name, and
    # was reached with the token from the Workspace's Secret.
    assert ("PUT", f"/v1/workspaces/{w.id}/files") in _disk_requests(node, w.id)
    assert not [p for _, p, _ in node.requests if p.startswith("/v1/workspaces/ws-1")]
    assert node.workspaces[w.id].token == _secret_token(cluster, "ws-1")
    # token= and endpoint= win over what is found; both: the node directly.
    with pytest.raises(errors.AuthError):
        kube.workspaces.files("ws-1", token="not-its-token").read("/data/in.txt")
    direct = kube.workspaces.files(w.id, token=_secret_token(cluster, "ws-1"),
                                   endpoint=node.address)
    assert direct.read("/data/in.txt") == "hello"
    with pytest.raises(errors.WorkspaceNotFoundError):
        kube.workspaces.files("absent").read("/x")


def test_kube_files_of_a_workspace_without_a_disk_or_a_secret(kube, cluster, node):
    cluster.workspace_disks = "provisioning"
    cluster.create("workspaces", "team-a", {
        "apiVersion": "kubicle.dev/v1alpha1", "kind": "Workspace",
        "metadata": {"name": "ws-1"}, "spec": {"sizeMiB": 64}})
    fs = kube.workspaces.files("ws-1")
    with pytest.raises(errors.ConflictError, match="no disk on a node yet") as e:
        fs.read("/x")
    assert e.value.reason == "WorkspaceNotReady"
    cluster.workspace_disks = "ready"
    w = kube.workspaces.create("ws-2", 64)
    cluster.delete(("secrets", "team-a", "ws-2-workspace-token"))
    with pytest.raises(errors.AuthError, match="ws-2-workspace-token does not exist") as e:
        kube.workspaces.files("ws-2").read("/x")
    assert e.value.reason == "NoToken"
    # With its token given, the Secret is not needed.
    token = node.workspaces[w.id].token
    assert not kube.workspaces.files("ws-2", token=token).exists("/x")


def test_kube_delete_refused_while_a_sandbox_uses_it_then_waits_until_gone(kube, cluster, node):
    w = kube.workspaces.create("ws-1", 64)
    kube.workspaces.files("ws-1").write("/seed", "s")
    sb = kube.sandboxes.create("tg", workspace="ws-1")
    assert kube.workspaces.get("ws-1").attached_to == sb.name
    with pytest.raises(errors.WorkspaceInUseError):
        kube.workspaces.files("ws-1").read("/seed")
    with pytest.raises(errors.WorkspaceInUseError, match=sb.name):
        kube.workspaces.delete("ws-1")
    assert not cluster.get("workspaces", "team-a", "ws-1")["metadata"].get("deletionTimestamp")
    sb.delete()
    assert kube.workspaces.files("ws-1").read("/seed") == "s"
    cluster.delay = 0.3  # the node takes its time to remove the disk
    kube.workspaces.delete("ws-1")
    # Returned once the node removed the disk and the finalizer let go.
    assert cluster.get("workspaces", "team-a", "ws-1") is None and w.id not in node.workspaces
    with pytest.raises(errors.WorkspaceNotFoundError):
        kube.workspaces.delete("ws-1")


def test_kube_delete_of_one_being_deleted_under_a_sandbox_is_in_use(kube, cluster, node):
    kube.workspaces.create("ws-1", 64)
    sb = kube.sandboxes.create("tg", workspace="ws-1")
    cluster.delete(("workspaces", "team-a", "ws-1"))  # kubectl delete: the finalizer holds
    _eventually(lambda: _ready_reason(cluster, "ws-1") == "InUse")
    with pytest.raises(errors.WorkspaceInUseError,
                       match=f"deletion waits for Sandbox {sb.name}.*stays requested"):
        kube.workspaces.delete("ws-1")
    assert kube.workspaces.get("ws-1").state == "Terminating"
    sb.delete()
    _eventually(lambda: cluster.get("workspaces", "team-a", "ws-1") is None)


def _ready_reason(cluster, name):
    obj = cluster.get("workspaces", "team-a", name) or {}
    return next((c["reason"] for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == "Ready"), None)


def _eventually(pred, seconds=5.0):
    """The fake operator writes status on its own thread."""
    import time

    deadline = time.monotonic() + seconds
    while not pred():
        assert time.monotonic() < deadline, "not within 5 s"
        time.sleep(0.02)


def test_the_deletion_wait_reports_a_sandbox_that_holds_it():
    from kubicle import _workspace_obj

    step = _workspace_obj.GoneStep("ws-1")
    held = {"metadata": {"name": "ws-1", "deletionTimestamp": "now"}, "status": {
        "conditions": [{"type": "Ready", "status": "False", "reason": "InUse",
                        "message": "deletion waits for Sandbox a, which uses the workspace"}]}}
    terminating = {"metadata": {"name": "ws-1", "deletionTimestamp": "now"}, "status": {
        "conditions": [{"type": "Ready", "status": "False", "reason": "Terminating"}]}}
    assert step({"ws-1": terminating}) is None
    with pytest.raises(errors.WorkspaceInUseError, match="Sandbox a"):
        step({"ws-1": held})
    assert step({}) is True


def test_kube_files_verify_the_node_against_its_lease_ca(tls_kubeconfig, tls_cluster, tls_node):
    from fake_kube import publish_ca

    publish_ca(tls_cluster, tls_node.ca_pem)
    with kubicle.Kubicle(kubeconfig=tls_kubeconfig) as k:
        w = k.workspaces.create("ws-1", 64)
        fs = k.workspaces.files("ws-1")
        fs.write("/t.txt", "over tls")
        assert fs.read("/t.txt") == "over tls"
        assert tls_node.workspaces[w.id].files["/t.txt"] == b"over tls"


def test_kube_files_refuse_a_node_with_another_ca(tls_kubeconfig, tls_cluster, tls_node):
    from fake_kube import publish_ca
    from tls_certs import make_ca

    publish_ca(tls_cluster, make_ca("someone else's CA").pem)
    with kubicle.Kubicle(kubeconfig=tls_kubeconfig) as k:
        w = k.workspaces.create("ws-1", 64)
        with pytest.raises(errors.KubicleError) as e:
            k.workspaces.files("ws-1").write("/t.txt", "x")
        assert "certificate" in str(e.value).lower() or e.value.reason == "Unreachable", e.value
    assert not _disk_requests(tls_node, w.id)


async def test_async_kube_workspaces(akube, cluster, node):
    w = await akube.workspaces.create("ws-1", 64, labels={"team": "a"})
    assert (w.state, w.node, w.size_mib) == ("Ready", "n1", 64) and w.id in node.workspaces
    assert (await akube.workspaces.create("ws-1", 64)).id == w.id
    with pytest.raises(errors.ConflictError, match="64 MiB"):
        await akube.workspaces.create("ws-1", 128)
    with pytest.raises(ValueError):
        await akube.workspaces.create("ws-2", 64, token_sha256="0" * 64)
    assert [x.name for x in await akube.workspaces.list()] == ["ws-1"]
    assert (await akube.workspaces.get("ws-1")).labels["team"] == "a"
    fs = akube.workspaces.files("ws-1")
    assert await fs.write("/a.txt", b"async") == 5
    assert await fs.read("/a.txt") == "async"
    assert node.workspaces[w.id].files["/a.txt"] == b"async"
    assert ("PUT", f"/v1/workspaces/{w.id}/files") in _disk_requests(node, w.id)
    sb = await akube.sandboxes.create("tg", workspace="ws-1")
    with pytest.raises(errors.WorkspaceInUseError):
        await fs.read("/a.txt")
    with pytest.raises(errors.WorkspaceInUseError):
        await akube.workspaces.delete("ws-1")
    await sb.delete()
    cluster.delay = 0.3
    await akube.workspaces.delete("ws-1")
    assert cluster.get("workspaces", "team-a", "ws-1") is None and w.id not in node.workspaces
    with pytest.raises(errors.WorkspaceNotFoundError):
        await akube.workspaces.get("ws-1")


async def test_async_kube_errors_not_ready_no_secret_timeout(akube, cluster, node):
    cluster.workspace_disks = "provisioning"
    with pytest.raises(errors.KubicleTimeoutError):
        await akube.workspaces.create("ws-1", 64, timeout=1)
    assert ("workspaces", "ws-1", "Background") in cluster.deletes
    cluster.create("workspaces", "team-a", {
        "apiVersion": "kubicle.dev/v1alpha1", "kind": "Workspace",
        "metadata": {"name": "ws-2"}, "spec": {"sizeMiB": 64}})
    with pytest.raises(errors.ConflictError, match="no disk on a node yet"):
        await akube.workspaces.files("ws-2").read("/x")
    cluster.workspace_disks = "ready"
    await akube.workspaces.create("ws-3", 64)
    cluster.delete(("secrets", "team-a", "ws-3-workspace-token"))
    with pytest.raises(errors.AuthError, match="does not exist"):
        await akube.workspaces.files("ws-3").read("/x")
