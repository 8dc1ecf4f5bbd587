"""The errors issue 11 names — template not found, template not ready, no
capacity, sandbox failed (with the node's message), exec timeout, auth —
each its own exception class carrying the condition's (or the node's)
reason and message, in Kubicle and AsyncKubicle, Kubernetes mode and
standalone. The class is checked exactly (type(e) is cls), so one error
read as another fails here."""

import asyncio
import time

import pytest

import kubicle
from kubicle import errors

NODE_FULL = ("node is full: 640 of 18432 MiB and 64 of 64 vCPUs in use; this sandbox needs "
             "64 MiB and 1 vCPUs")


def _notready(c):
    c.templates["baking"] = "notready"


def _nocapacity(c):
    c.capacity = 0


def _vmfail(c):
    c.templates["broken"] = "vmfail"


def _nodefull(c):
    c.templates["full"] = "nodefull"


# (setup of the fake cluster, template, class, reason, message): what the
# operator (fake_kube's, after operator/sandbox_reconciler.cc) writes in the
# Sandbox's conditions, or the node in status.vm.
KUBE_CREATE = {
    "template-not-found": (None, "nope", errors.TemplateNotFoundError, "TemplateNotFound",
                           "SandboxTemplate nope not found"),
    "template-not-ready": (_notready, "baking", errors.TemplateNotReadyError, "NoReadyNode",
                           "no live node has SandboxTemplate baking ready"),
    "no-capacity": (_nocapacity, "tg", errors.CapacityError, "InsufficientCapacity",
                    "no node has room: n1 runs 1 of 1 sandboxes"),
    "node-refused-as-full": (_nodefull, "full", errors.CapacityError, "InsufficientCapacity",
                             NODE_FULL),
    "vm-failed": (_vmfail, "broken", errors.SandboxFailedError, "VMFailed",
                  "kubicle-vmm exited: restore failed"),
}


def _gone(cluster, ns="team-a"):
    """The half-made Sandbox was deleted (its finalizer, if placed, goes
    with the fake node's teardown)."""
    deadline = time.monotonic() + 5
    while cluster.list("sandboxes", ns) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not cluster.list("sandboxes", ns)


def _check(e, cls, reason, message, *, status=None, sandbox_prefix=None):
    assert type(e) is cls, repr(e)
    assert e.reason == reason
    assert e.message == message
    if status is not None:
        assert e.status_code == status
    if sandbox_prefix is not None:
        assert e.sandbox and e.sandbox.startswith(sandbox_prefix)
    assert reason in str(e) and message in str(e)


# --- Kubernetes mode: create -------------------------------------------------

@pytest.mark.parametrize("case", sorted(KUBE_CREATE))
def test_kube_create_errors(kube, cluster, case):
    setup, template, cls, reason, message = KUBE_CREATE[case]
    if setup:
        setup(cluster)
    with pytest.raises(errors.KubicleError) as e:
        kube.sandboxes.create(template, timeout=10)
    _check(e.value, cls, reason, message, sandbox_prefix=template + "-")
    assert _gone(cluster)


@pytest.mark.parametrize("case", sorted(KUBE_CREATE))
async def test_async_kube_create_errors(akube, cluster, case):
    setup, template, cls, reason, message = KUBE_CREATE[case]
    if setup:
        setup(cluster)
    with pytest.raises(errors.KubicleError) as e:
        await akube.sandboxes.create(template, timeout=10)
    _check(e.value, cls, reason, message, sandbox_prefix=template + "-")
    assert await asyncio.get_running_loop().run_in_executor(None, _gone, cluster)


# --- Kubernetes mode: auth at the apiserver and at the node --------------------

def test_kube_apiserver_refusing_the_credential(kube, cluster):
    cluster.token = "not-the-kubeconfigs"
    with pytest.raises(errors.KubicleError) as e:
        kube.sandboxes.create("tg", timeout=10)
    _check(e.value, errors.AuthError, "Unauthorized", "create Sandbox: Unauthorized", status=401)


def test_kube_rbac_forbidding_create_and_the_token_secret(kube, cluster):
    cluster.forbid = {("POST", "sandboxes")}
    with pytest.raises(errors.KubicleError) as e:
        kube.sandboxes.create("tg", timeout=10)
    _check(e.value, errors.AuthError, "Forbidden",
           'create Sandbox: sandboxes.kubicle.dev is forbidden: User '
           '"system:serviceaccount:team-a:agent" cannot create resource "sandboxes" in API '
           'group "kubicle.dev" in the namespace "team-a"', status=403)
    # Allowed to create, not to read Secrets: the client's own token needs
    # none; one in a Secret (token_secret=True) is refused and the Sandbox
    # deleted again.
    cluster.forbid = {("GET", "secrets")}
    with kube.sandboxes.create("tg", timeout=10) as sb:
        assert sb.exec(["echo", "own"]).stdout == "own\n"
    with pytest.raises(errors.AuthError) as e:
        kube.sandboxes.create("tg", timeout=10, token_secret=True)
    assert e.value.reason == "Forbidden" and e.value.status_code == 403
    assert e.value.message.startswith("read token Secret tg-") and "cannot get" in e.value.message
    assert e.value.sandbox.startswith("tg-")
    assert _gone(cluster)


async def test_async_kube_apiserver_refusing_the_credential_and_rbac(akube, cluster):
    cluster.token = "not-the-kubeconfigs"
    with pytest.raises(errors.KubicleError) as e:
        await akube.sandboxes.create("tg", timeout=10)
    _check(e.value, errors.AuthError, "Unauthorized", "create Sandbox: Unauthorized", status=401)
    cluster.token = None
    cluster.forbid = {("POST", "sandboxes")}
    with pytest.raises(errors.KubicleError) as e:
        await akube.sandboxes.create("tg", timeout=10)
    _check(e.value, errors.AuthError, "Forbidden",
           'create Sandbox: sandboxes.kubicle.dev is forbidden: User '
           '"system:serviceaccount:team-a:agent" cannot create resource "sandboxes" in API '
           'group "kubicle.dev" in the namespace "team-a"', status=403)


def test_kube_node_refusing_the_token(kube):
    with kube.sandboxes.create("tg") as sb:
        sb._dp()
        sb._ref.token = "wrong"
        with pytest.raises(errors.KubicleError) as e:
            sb.exec(["echo"])
        _check(e.value, errors.AuthError, "Unauthenticated", "a valid bearer token is required",
               status=401)
        assert e.value.sandbox == sb.name


async def test_async_kube_node_refusing_the_token(akube):
    sb = await akube.sandboxes.create("tg")
    sb._ref.token = "wrong"
    with pytest.raises(errors.KubicleError) as e:
        await sb.exec(["echo"])
    _check(e.value, errors.AuthError, "Unauthenticated", "a valid bearer token is required",
           status=401)
    await sb.delete()


# --- Kubernetes mode: exec timeout, a VM that failed, a fork of a gone source ---

def test_kube_exec_timeout(kube):
    with kube.sandboxes.create("tg") as sb:
        with pytest.raises(errors.KubicleError) as e:
            sb.exec(["sleep", "5"], timeout_seconds=1)
        _check(e.value, errors.ExecTimeoutError, "DeadlineExceeded",
               "the command ran past its 1 s timeout")
        assert e.value.sandbox == sb.name and e.value.result.timed_out
        assert isinstance(e.value, TimeoutError)


async def test_async_kube_exec_timeout(akube):
    sb = await akube.sandboxes.create("tg")
    with pytest.raises(errors.KubicleError) as e:
        await sb.exec(["sleep", "5"], timeout_seconds=1)
    _check(e.value, errors.ExecTimeoutError, "DeadlineExceeded",
           "the command ran past its 1 s timeout")
    assert e.value.sandbox == sb.name and e.value.result.timed_out
    await sb.delete()


def test_kube_vm_failed_after_ready_carries_the_nodes_message(kube, node):
    # The VM died under a Running Sandbox: the node answers 409 with why.
    with kube.sandboxes.create("tg") as sb:
        node.sandboxes[sb.id].state = "Failed"
        node.sandboxes[sb.id].message = "kubicle-vmm exited: killed by signal 9"
        with pytest.raises(errors.KubicleError) as e:
            sb.exec(["echo"])
        _check(e.value, errors.SandboxFailedError, "FailedPrecondition",
               f"sandbox '{sb.id}' is Failed: kubicle-vmm exited: killed by signal 9", status=409)


def test_kube_fork_of_a_deleted_source(kube, cluster):
    base = kube.sandboxes.create("tg")
    base.delete()
    with pytest.raises(errors.KubicleError) as e:
        base.fork(2, timeout=1)
    _check(e.value, errors.SandboxFailedError, "SourceNotFound", "waiting for the source",
           sandbox_prefix=base.name + "-f")
    assert not cluster.list("sandboxforks", "team-a")   # the SandboxFork went too


async def test_async_kube_fork_of_a_deleted_source_and_a_failed_vm(akube, cluster, node):
    base = await akube.sandboxes.create("tg")
    await base.delete()
    with pytest.raises(errors.KubicleError) as e:
        await base.fork(2, timeout=1)
    _check(e.value, errors.SandboxFailedError, "SourceNotFound", "waiting for the source",
           sandbox_prefix=base.name + "-f")
    sb = await akube.sandboxes.create("tg")
    node.sandboxes[sb.id].state = "Failed"
    node.sandboxes[sb.id].message = "kubicle-vmm exited: killed by signal 9"
    with pytest.raises(errors.KubicleError) as e:
        await sb.filesystem.read("/x")
    _check(e.value, errors.SandboxFailedError, "FailedPrecondition",
           f"sandbox '{sb.id}' is Failed: kubicle-vmm exited: killed by signal 9", status=409)
    await sb.delete()


# --- standalone: the node's own answers ------------------------------------------

def _sa_baking(n):
    n.templates["baking"] = "Baking"


def _sa_full(n):
    n.capacity = 0


STANDALONE_CREATE = {
    "template-not-found": (None, "nope", errors.TemplateNotFoundError, "TemplateNotFound",
                           "no template 'nope'", 404),
    "template-not-ready": (_sa_baking, "baking", errors.TemplateNotReadyError, "NoReadyNode",
                           "template 'baking' is Baking", 409),
    "no-capacity": (_sa_full, "tg", errors.CapacityError, "InsufficientCapacity",
                    "no capacity: 1 of 1 sandboxes", 429),
}


@pytest.mark.parametrize("case", sorted(STANDALONE_CREATE))
def test_standalone_create_errors(standalone, node, case):
    setup, template, cls, reason, message, status = STANDALONE_CREATE[case]
    if setup:
        setup(node)
    with pytest.raises(errors.KubicleError) as e:
        standalone.sandboxes.create(template)
    _check(e.value, cls, reason, message, status=status)


@pytest.mark.parametrize("case", sorted(STANDALONE_CREATE))
async def test_async_standalone_create_errors(astandalone, node, case):
    setup, template, cls, reason, message, status = STANDALONE_CREATE[case]
    if setup:
        setup(node)
    with pytest.raises(errors.KubicleError) as e:
        await astandalone.sandboxes.create(template)
    _check(e.value, cls, reason, message, status=status)


def test_standalone_auth_timeout_and_failed(node):
    with kubicle.Kubicle(node_url=node.url, token="wrong") as k:
        with pytest.raises(errors.KubicleError) as e:
            k.sandboxes.create("tg")
        _check(e.value, errors.AuthError, "Unauthenticated", "a valid bearer token is required",
               status=401)
    with kubicle.Kubicle(node_url=node.url, token=node.admin_token) as k:
        with k.sandboxes.create("tg") as sb:
            with pytest.raises(errors.KubicleError) as e:
                sb.exec(["sleep", "5"], timeout_seconds=1)
            _check(e.value, errors.ExecTimeoutError, "DeadlineExceeded",
                   "the command ran past its 1 s timeout")
            node.sandboxes[sb.id].state = "Failed"
            node.sandboxes[sb.id].message = "kubicle-vmm exited 1"
            with pytest.raises(errors.KubicleError) as e:
                sb.exec(["echo"])
            _check(e.value, errors.SandboxFailedError, "FailedPrecondition",
                   f"sandbox '{sb.id}' is Failed: kubicle-vmm exited 1", status=409)


async def test_async_standalone_auth_timeout_and_failed(node):
    async with kubicle.AsyncKubicle(node_url=node.url, token="wrong") as k:
        with pytest.raises(errors.KubicleError) as e:
            await k.sandboxes.create("tg")
        _check(e.value, errors.AuthError, "Unauthenticated", "a valid bearer token is required",
               status=401)
    async with kubicle.AsyncKubicle(node_url=node.url, token=node.admin_token) as k:
        sb = await k.sandboxes.create("tg")
        with pytest.raises(errors.KubicleError) as e:
            await sb.exec(["sleep", "5"], timeout_seconds=1)
        _check(e.value, errors.ExecTimeoutError, "DeadlineExceeded",
               "the command ran past its 1 s timeout")
        node.sandboxes[sb.id].state = "Failed"
        node.sandboxes[sb.id].message = "kubicle-vmm exited 1"
        with pytest.raises(errors.KubicleError) as e:
            await sb.fork(1)
        _check(e.value, errors.SandboxFailedError, "FailedPrecondition",
               f"sandbox '{sb.id}' is Failed", status=409)
        await sb.delete()
