"""Workspaces (docs/sdk.md, "Workspaces") against the fake node: create (the
token once, idempotent, another size a conflict), get, list, delete; files
without a VM with the workspace's own token or the admin's; one writer (a
sandbox holding it makes file calls, a second holder and a delete raise
WorkspaceInUseError); a sandbox and a run with a workspace; the same async;
Kubernetes mode sends spec.workspaceRef and sends a run to the Workspace's
node."""

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
    with pytest.raises(errors.UnsupportedError):
        kube.workspaces.create("ws-1", 64)
    # A run with a workspace goes to the Workspace's node only.
    node.templates["py-node"] = "Ready"
    node.run_tokens["py-node"] = "run-tok"
    cluster.create("sandboxtemplates", "team-a", {
        "apiVersion": "kubicle.dev/v1alpha1", "kind": "SandboxTemplate",
        "metadata": {"name": "py"}, "spec": {"kernel": "/k", "rootfs": "/r"}})
    import base64
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
