"""client.run (docs/sdk.md, "Per-call runs"): against the fake node directly
and through the fake cluster (a Ready node entry, the run token from the
template's Secret), sync and async; errors typed; a workspace sent with the run
any call."""

import base64

import pytest

import kubicle
from kubicle import errors


def test_standalone_run_output_exit_and_timings(standalone, node):
    r = standalone.run("tg", ["echo", "hi", "there"])
    assert isinstance(r, kubicle.RunResult)
    assert (r.stdout, r.exit_code, r.ok) == ("hi there\n", 0, True)
    assert (r.timings.restore_ms, r.timings.exec_ms, r.timings.total_ms) == (2.5, 0.5, 3.0)
    assert standalone.run("tg", ["false"]).exit_code == 1
    assert standalone.run("tg", ["cat"], stdin=b"in").stdout == "in"
    method, path, body = node.requests[-1]
    assert (method, path) == ("POST", "/v1/templates/tg/run")
    assert body["argv"] == ["cat"] and body["stdinBase64"] == base64.b64encode(b"in").decode()


def test_standalone_run_errors(standalone, node):
    with pytest.raises(errors.TemplateNotFoundError):
        standalone.run("nope", ["true"])
    node.templates["baking"] = "Baking"
    with pytest.raises(errors.TemplateNotReadyError, match="not ready on this node"):
        standalone.run("baking", ["true"])
    with pytest.raises(errors.ExecTimeoutError):
        standalone.run("tg", ["sleep", "5"], timeout_seconds=1)
    assert standalone.run("tg", ["sleep", "5"], timeout_seconds=1,
                          raise_on_timeout=False).timed_out
    with pytest.raises(ValueError):
        standalone.run("tg", [])
    bad = kubicle.Kubicle(node_url=node.url, token="not-the-admin")
    with pytest.raises(errors.AuthError):
        bad.run("tg", ["true"])
    bad.close()


def test_a_run_sends_its_workspace_and_missing_ones_are_typed(standalone, node):
    with pytest.raises(errors.WorkspaceNotFoundError):
        standalone.run("tg", ["true"], workspace="ws-1")
    assert node.requests[-1][2]["workspace"] == "ws-1" and node.runs == 0
    with pytest.raises(ValueError):
        standalone.run("tg", ["true"], workspace="")


def _publish_template(cluster, node, name="py", *, ready=True, token="run-tok",
                      generation_matches=True):
    """What the operator and a node agent leave on a SandboxTemplate."""
    node.templates[f"{name}-node"] = "Ready"
    node.run_tokens[f"{name}-node"] = token
    t = cluster.create("sandboxtemplates", "team-a", {
        "apiVersion": "kubicle.dev/v1alpha1", "kind": "SandboxTemplate",
        "metadata": {"name": name}, "spec": {"kernel": "/k", "rootfs": "/r"}})
    cluster.create("secrets", "team-a", {
        "apiVersion": "v1", "kind": "Secret", "type": "kubicle.dev/run-token",
        "metadata": {"name": f"{name}-run"},
        "data": {"token": base64.b64encode(token.encode()).decode()}})

    def status(o):
        o["status"] = {
            "runTokenSecretName": f"{name}-run", "runTokenSha256": "0" * 64,
            "nodes": [
                {"nodeName": "other", "phase": "Baking", "observedGeneration": 1},
                {"nodeName": "n1", "phase": "Ready" if ready else "Failed",
                 "observedGeneration": 1 if generation_matches else 0,
                 "endpoint": node.address, "nodeTemplate": f"{name}-node"}]}
    cluster.update(("sandboxtemplates", "team-a", name), status)
    return t


def test_kube_run_picks_a_ready_node_and_uses_the_run_token(kube, cluster, node):
    _publish_template(cluster, node)
    r = kube.run("py", ["echo", "from", "kube"])
    assert r.stdout == "from kube\n" and r.timings.total_ms == 3.0
    assert node.requests[-1][1] == "/v1/templates/py-node/run"


def test_kube_run_errors(kube, cluster, node):
    with pytest.raises(errors.TemplateNotFoundError):
        kube.run("absent", ["true"])
    _publish_template(cluster, node, "stale", generation_matches=False)
    with pytest.raises(errors.TemplateNotReadyError):
        kube.run("stale", ["true"])
    _publish_template(cluster, node, "failed", ready=False)
    with pytest.raises(errors.TemplateNotReadyError):
        kube.run("failed", ["true"])
    # The node holds another token than the Secret: the node refuses it.
    _publish_template(cluster, node, "rotated")
    node.run_tokens["rotated-node"] = "newer"
    with pytest.raises(errors.AuthError):
        kube.run("rotated", ["true"])
    # No hash published yet: no call is made.
    cluster.create("sandboxtemplates", "team-a", {"metadata": {"name": "fresh"}, "spec": {}})
    cluster.update(("sandboxtemplates", "team-a", "fresh"), lambda o: o.update(status={"nodes": [
        {"nodeName": "n1", "phase": "Ready", "observedGeneration": 1, "endpoint": node.address,
         "nodeTemplate": "tg"}]}))
    with pytest.raises(errors.AuthError, match="no run token"):
        kube.run("fresh", ["true"])


async def test_async_run(akube, astandalone, cluster, node):
    _publish_template(cluster, node)
    assert (await akube.run("py", ["echo", "a"])).stdout == "a\n"
    assert (await astandalone.run("tg", ["false"])).exit_code == 1
    with pytest.raises(errors.WorkspaceNotFoundError):
        await astandalone.run("tg", ["true"], workspace="w")
    with pytest.raises(errors.TemplateNotFoundError):
        await akube.run("absent", ["true"])
