"""Kubicle() against the fake apiserver (and the fake node behind it)."""

import base64
import hashlib
import threading
import time

import pytest

import kubicle
from kubicle import errors


def test_create_waits_for_ready_by_watching(kube, cluster, node):
    before = cluster.watches
    sb = kube.sandboxes.create("tg", metadata={"run": "r1", "agent": "a0"}, ttl_seconds=300,
                               env={"GREETING": "hi"}, resources={"vcpus": 2, "memory_mib": 128})
    assert cluster.watches > before  # a watch, not polling
    obj = cluster.get("sandboxes", "team-a", sb.name)
    assert obj["metadata"]["labels"]["kubicle.dev/run"] == "r1"
    assert obj["metadata"]["labels"]["kubicle.dev/agent"] == "a0"
    own = hashlib.sha256(sb._ref.token.encode()).hexdigest()
    assert obj["spec"] == {"templateRef": {"name": "tg"}, "ttlSeconds": 300,
                           "env": [{"name": "GREETING", "value": "hi"}],
                           "resources": {"vcpus": 2, "memoryMiB": 128}, "tokenSha256": own}
    assert sb.name.startswith("tg-") and sb.id == "k-" + obj["metadata"]["uid"]
    assert sb.info.phase == "Running" and sb.info.node == "n1"
    assert sb.info.endpoint == node.address and sb.info.restore_ms == 4.2
    assert sb.metadata == {"run": "r1", "agent": "a0", "node": "n1", "template": "tg"}
    assert kube.namespace == "team-a" and kube.mode == "kubernetes"
    # The data plane: k-<uid> on the node, with the client's own token.
    assert sb.exec(["printenv", "GREETING"]).stdout == "hi\n"
    path = node.requests[-1][1]
    assert path == f"/v1/sandboxes/{sb.id}/exec"
    sb.delete()
    assert cluster.get("sandboxes", "team-a", sb.name) is None
    assert sb.id not in node.sandboxes


def test_namespace_argument_wins(kubeconfig, cluster):
    with kubicle.Kubicle(kubeconfig=kubeconfig, namespace="other") as k:
        sb = k.sandboxes.create("tg", name="fixed")
        assert cluster.get("sandboxes", "other", "fixed") is not None
        assert sb.name == "fixed"
        sb.delete()


def test_files_and_exec_features(kube, node):
    with kube.sandboxes.create("tg") as sb:
        assert sb.filesystem.write("/w/a.txt", "héllo") == 6
        assert sb.filesystem.read("/w/a.txt") == "héllo"
        assert sb.files.read("/w/a.txt", format="bytes") == "héllo".encode()
        assert sb.filesystem.exists("/w/a.txt") and not sb.filesystem.exists("/nope")
        # stat, ls and remove with the token from the Sandbox's Secret.
        assert sb.filesystem.stat("/w/a.txt").size == 6
        assert [e.path for e in sb.filesystem.list("/w")] == ["/w/a.txt"]
        sb.filesystem.write("/w/b.txt", "b")
        sb.filesystem.remove("/w/b.txt")
        assert [e.name for e in sb.filesystem.list("/w")] == ["a.txt"]
        assert sb.exec(["cat", "/w/a.txt"]).stdout == "héllo"
        with pytest.raises(errors.PathNotFoundError):
            sb.filesystem.read("/nope")
        out = []
        r = sb.exec(["chunks", "a", "b"], on_stdout=out.append)
        assert out == ["a", "b"] and r.stderr == "AB"
    assert kube.sandboxes.list() == []   # the with block deleted it


def test_template_not_found_fails_fast_and_cleans_up(kube, cluster):
    with pytest.raises(errors.TemplateNotFoundError) as e:
        kube.sandboxes.create("nope", timeout=10)
    assert e.value.reason == "TemplateNotFound"
    assert "SandboxTemplate nope not found" in e.value.message
    assert not cluster.list("sandboxes", "team-a")   # the half-made Sandbox is gone


def test_template_not_ready(kube, cluster):
    cluster.templates["baking"] = "notready"
    with pytest.raises(errors.TemplateNotReadyError) as e:
        kube.sandboxes.create("baking", timeout=10)
    assert e.value.reason == "NoReadyNode"
    with pytest.raises(errors.TemplateNotReadyError):   # waited out, then the same reason
        kube.sandboxes.create("baking", timeout=0.5, wait_pending=True)


def test_no_capacity(kube, cluster):
    cluster.capacity = 1
    first = kube.sandboxes.create("tg")
    with pytest.raises(errors.CapacityError) as e:
        kube.sandboxes.create("tg", timeout=10)
    assert e.value.reason == "InsufficientCapacity" and "no node has room" in e.value.message
    first.delete()


def test_vm_failed_carries_the_nodes_message(kube, cluster):
    cluster.templates["broken"] = "vmfail"
    with pytest.raises(errors.SandboxFailedError) as e:
        kube.sandboxes.create("broken", timeout=10)
    assert e.value.reason == "VMFailed"
    assert e.value.message == "kubicle-vmm exited: restore failed"


def test_create_timeout(kube, cluster):
    cluster.delay = 3
    with pytest.raises(errors.SandboxTimeoutError):
        kube.sandboxes.create("tg", timeout=0.5)
    cluster.delay = 0.01


def test_fork_children_ready_and_independent(kube, cluster, node):
    base = kube.sandboxes.create("tg", metadata={"run": "bo", "agent": "base"})
    base.filesystem.write("/state", "warm")
    kids = base.fork(3, metadata={"role": "candidate"})
    assert len(kids) == 3
    fork_name = kids[0].name.rsplit("-", 1)[0]
    assert [k.name for k in kids] == [f"{fork_name}-{i}" for i in range(3)]
    assert ("sandboxforks", fork_name, "Orphan") in cluster.deletes
    for k in kids:
        assert k.metadata["run"] == "bo" and k.metadata["role"] == "candidate"
        assert k.info.fork_of == base.name
        assert k.filesystem.read("/state") == "warm"   # copy-on-write copy of the parent
    kids[1].delete()   # a plain Sandbox now: nothing recreates it
    assert cluster.get("sandboxes", "team-a", kids[1].name) is None
    base.delete()
    assert kids[0].exec(["echo", "alive"]).stdout == "alive\n"
    assert sorted(kube.sandboxes.delete({"run": "bo"})) == sorted([kids[0].name, kids[2].name])


def test_fork_children_bring_their_own_tokens(kube, cluster, node):
    """fork makes each child's token and sends the hashes in
    spec.childTokenSha256: child i carries hash i, no Secret is made or
    read for any of them, and each child's data plane takes its token."""
    base = kube.sandboxes.create("tg", metadata={"run": "fown"})
    reads = _secret_reads(cluster)
    kids = base.fork(3)
    fork_name = kids[0].name.rsplit("-", 1)[0]
    created = [b for m, p, b in cluster.posted if p.endswith("/sandboxforks")]
    assert created[-1]["spec"]["childTokenSha256"] == [
        hashlib.sha256(k._ref.token.encode()).hexdigest() for k in kids]
    for k in kids:
        obj = cluster.get("sandboxes", "team-a", k.name)
        assert obj["spec"]["tokenSha256"] == obj["status"]["tokenSha256"]
        assert "tokenSecretName" not in obj["status"]
        assert k.exec(["echo", k.name]).stdout == k.name + "\n"
    assert len({k._ref.token for k in kids}) == 3 and fork_name
    assert _secret_reads(cluster) == reads and cluster.list("secrets", "team-a") == []
    kube.sandboxes.delete({"run": "fown"})


def test_fork_on_an_apiserver_that_prunes_the_hashes_uses_secrets(kube, cluster):
    cluster.prunes_token_sha256 = True
    base = kube.sandboxes.create("tg", metadata={"run": "fold"})
    kids = base.fork(2)
    for k in kids:
        secret = cluster.get("secrets", "team-a", f"{k.name}-token")
        assert k._ref.token == base64.b64decode(secret["data"]["token"]).decode()
        assert k.exec(["echo", "old"]).stdout == "old\n"
    kube.sandboxes.delete({"run": "fold"})


def test_list_and_sweep(kube, cluster):
    a = [kube.sandboxes.create("tg", metadata={"run": "r1", "agent": f"a{i}"}) for i in range(3)]
    kube.sandboxes.create("tg", metadata={"run": "r2"})
    assert sorted(s.name for s in kube.sandboxes.list(metadata={"run": "r1"})) == \
        sorted(s.name for s in a)
    assert [s.name for s in kube.sandboxes.list(metadata={"agent": "a1"})] == [a[1].name]
    deleted = kube.sandboxes.delete(metadata={"run": "r1"})
    assert sorted(deleted) == sorted(s.name for s in a)
    assert not cluster.list("sandboxes", "team-a", "kubicle.dev/run=r1")   # gone, not Terminating
    assert len(kube.sandboxes.list()) == 1
    with pytest.raises(ValueError):
        kube.sandboxes.delete(metadata={})


def test_get_resolves_token_lazily(kube, cluster):
    sb = kube.sandboxes.create("tg")
    again = kube.sandboxes.get(sb.name)
    assert again.exec(["echo", "x"]).stdout == "x\n"
    with pytest.raises(errors.SandboxNotFoundError):
        kube.sandboxes.get("missing")
    sb.delete()


def test_wrong_token_is_an_auth_error(kube, cluster):
    sb = kube.sandboxes.create("tg")
    sb._dp()
    sb._ref.token = "wrong"
    with pytest.raises(errors.AuthError) as e:
        sb.exec(["echo"])
    assert e.value.status_code == 401
    sb.delete()


def test_threads_fan_out(kube, cluster):
    results, errs = {}, []

    def agent(i):
        try:
            with kube.sandboxes.create("tg", metadata={"run": "fan", "agent": f"a{i}"}) as sb:
                sb.filesystem.write("/task", f"task {i}")
                results[i] = sb.exec(["cat", "/task"]).stdout
        except Exception as e:  # collected for the assert
            errs.append(e)

    ts = [threading.Thread(target=agent, args=(i,)) for i in range(12)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs
    assert results == {i: f"task {i}" for i in range(12)}
    assert not cluster.list("sandboxes", "team-a")


def test_secret_token_is_base64_decoded(kube, cluster, node):
    sb = kube.sandboxes.create("tg", token_secret=True)
    sb._dp()
    assert "tokenSha256" not in cluster.get("sandboxes", "team-a", sb.name)["spec"]
    secret = cluster.get("secrets", "team-a", f"{sb.name}-token")
    assert sb._ref.token == base64.b64decode(secret["data"]["token"]).decode()
    assert sb._ref.token == node.sandboxes[sb.id].token
    sb.delete()


def _secret_reads(cluster):
    return sum(1 for h in cluster.requests if h[0] == "GET" and "/secrets/" in h[1])


def test_own_token_needs_no_secret(kube, kubeconfig, cluster, node):
    """create makes the token (64 hex, as the operator would), sends only
    its SHA-256 in spec.tokenSha256 and keeps it: no Secret is made or
    read. A get or list by the same client reaches the Sandbox with it;
    another client cannot (no Secret holds it), unless it was created with
    token_secret=True."""
    reads = _secret_reads(cluster)
    sb = kube.sandboxes.create("tg", metadata={"run": "own"})
    token = sb._ref.token
    assert len(token) == 64 and all(c in "0123456789abcdef" for c in token)
    obj = cluster.get("sandboxes", "team-a", sb.name)
    assert obj["spec"]["tokenSha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert obj["status"]["tokenSha256"] == obj["spec"]["tokenSha256"]
    assert "tokenSecretName" not in obj["status"]
    assert node.sandboxes[sb.id].token_sha256 == obj["spec"]["tokenSha256"]
    assert cluster.list("secrets", "team-a") == []
    assert sb.exec(["echo", "own"]).stdout == "own\n"
    again = kube.sandboxes.get(sb.name)
    assert again.exec(["echo", "got"]).stdout == "got\n" and again._ref.token == token
    listed, = kube.sandboxes.list({"run": "own"})
    assert listed.exec(["echo", "listed"]).stdout == "listed\n"
    shared = kube.sandboxes.create("tg", metadata={"run": "own"}, token_secret=True)
    assert _secret_reads(cluster) == reads + 1   # the shared one's only
    with kubicle.Kubicle(kubeconfig=kubeconfig) as other:
        theirs = other.sandboxes.get(sb.name)
        with pytest.raises(errors.AuthError) as e:
            theirs.exec(["echo"])
        assert e.value.reason == "OwnToken" and e.value.sandbox == sb.name
        assert "spec.tokenSha256" in e.value.message
        assert other.sandboxes.get(shared.name).exec(["echo", "s"]).stdout == "s\n"
    sb.delete()
    assert kube._backend._own_tokens == {}   # forgotten with the Sandbox
    # A Sandbox made again under the same name is another object: its
    # token is its own.
    kube.sandboxes.create("tg", name=sb.name).delete()
    kube.sandboxes.delete({"run": "own"})


def test_an_apiserver_that_prunes_the_hash_gets_the_secrets_token(kube, cluster, node):
    """A Sandbox CRD from before spec.tokenSha256 drops the field: the
    operator then mints a Secret, and create uses (and checks) its token."""
    cluster.prunes_token_sha256 = True
    sb = kube.sandboxes.create("tg")
    secret = cluster.get("secrets", "team-a", f"{sb.name}-token")
    assert sb._ref.token == base64.b64decode(secret["data"]["token"]).decode()
    assert sb.exec(["echo", "old"]).stdout == "old\n"
    assert kube._backend._own_tokens == {}
    sb.delete()


def test_vm_refusing_its_secret_token_is_replaced(kube, cluster, caplog):
    cluster.wrong_vm_tokens = 1
    cluster.prunes_token_sha256 = True   # the replacement race needs a Secret
    sb = kube.sandboxes.create("tg", metadata={"run": "tok"})
    assert sb.exec(["echo", "ok"]).stdout == "ok\n"
    assert "refuses the token in its Secret" in caplog.text
    assert [s.name for s in kube.sandboxes.list({"run": "tok"})] == [sb.name]   # the bad one went
    cluster.wrong_vm_tokens = 1
    kids = sb.fork(3)
    assert len(kids) == 3 and all(k.exec(["echo", "k"]).stdout == "k\n" for k in kids)
    cluster.wrong_vm_tokens = 10
    with pytest.raises(errors.AuthError):
        kube.sandboxes.create("tg", metadata={"run": "tok2"})
    cluster.wrong_vm_tokens = 0
    kube.sandboxes.delete({"run": "tok"})
    for _ in range(50):
        if not kube.sandboxes.list({"run": "tok2"}):
            break
        time.sleep(0.05)
    assert kube.sandboxes.list({"run": "tok2"}) == []


def test_suspend_and_resume_patch_spec_and_wait(kube, cluster, node):
    """Kubernetes mode: spec.suspend by merge patch, then the phase is
    waited for on the watch; the data plane is the same sandbox after."""
    sb = kube.sandboxes.create("tg")
    sb.files.write("/kept", "before")
    info = sb.suspend()
    assert info.phase == "Suspended" and info.endpoint == ""
    obj = cluster.get("sandboxes", "team-a", sb.name)
    assert obj["spec"]["suspend"] is True
    assert node.sandboxes[sb.id].state == "Suspended"
    with pytest.raises(errors.ConflictError):
        sb.exec(["echo", "hi"])
    info = sb.resume()
    assert info.phase == "Running" and info.endpoint == node.address
    assert cluster.get("sandboxes", "team-a", sb.name)["spec"]["suspend"] is False
    assert sb.files.read("/kept") == "before"
    sb.delete()
    with pytest.raises(errors.SandboxNotFoundError):
        sb.suspend()
