"""The SDK's per-call runs, ports and suspend/resume against the real stack
(stack.py: kube-apiserver, kubicle-operator, kubicle-node with the test
guest and its sandbox network on).

- client.run finds a node where the SandboxTemplate is Ready and the run
  token in its Secret (``<template>-run``); ``get`` on that Secret is the
  permission (a ServiceAccount without it gets the apiserver's 403 as
  AuthError), and deleting it revokes the token (the node refuses the old
  one with 401).
- Ports: the test guest answers ARP and ping but has no TCP
  (docs/testguest.md), so no stream reaches a listener in it. What these
  tests prove is the way there: the endpoint, token and CA found through
  Kubernetes, the node's TLS, the upgrade accepted for this Sandbox's token
  only, and the node connecting to the guest's address inside the
  Sandbox's namespace (504 after its 10 s connect timeout, as PortError
  PortTimeout; forward_port closes the local connection and keeps the
  error). Bytes through a port are the linux tier's
  (e2e/nested/node-network-test.py).
- suspend/resume keep the VM's RAM files (the test guest's files live in
  its memory), sync and async."""

import base64
import os
import socket
import time
import uuid

import pytest
import yaml

import kubicle
import stack as stack_mod
from kubicle import errors

TEMPLATE = "tg"
NS = "default"


def run_id():
    return "e2e-" + uuid.uuid4().hex[:8]


def _co(stack):
    from kubernetes import client

    return client.CustomObjectsApi(stack.api)


def _template(stack):
    return _co(stack).get_namespaced_custom_object("kubicle.dev", "v1alpha1", NS,
                                                   "sandboxtemplates", TEMPLATE)


def _secret_token(stack, name):
    from kubernetes import client

    s = client.CoreV1Api(stack.api).read_namespaced_secret(name, NS)
    return base64.b64decode(s.data["token"]).decode()


def _until(what, cond, timeout=60.0):
    """Waits for ``cond()`` to be truthy (polling every 0.2 s); its value."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s")
        time.sleep(0.2)


def _node_template(stack):
    for e in _template(stack)["status"]["nodes"]:
        if e["nodeName"] == stack_mod.NODE_NAME:
            return e["nodeTemplate"]
    pytest.fail("the template has no entry of the node")


def test_run_with_the_templates_run_token(stack, kube):
    before = sorted(s.name for s in kube.sandboxes.list())
    r = kube.run(TEMPLATE, ["echo", "hello", "from", "a", "run"], timeout_seconds=30)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "hello from a run\n", "")
    assert r.timings.total_ms > 0 and r.timings.restore_ms > 0
    assert kube.run(TEMPLATE, ["false"]).exit_code == 1
    assert kube.run(TEMPLATE, ["cat"], stdin="into a run").stdout == "into a run"
    assert kube.run(TEMPLATE, ["printenv", "WHO"], env={"WHO": "me"}).stdout == "me\n"
    with pytest.raises(errors.TemplateNotFoundError):
        kube.run("no-such-template", ["true"])
    assert sorted(s.name for s in kube.sandboxes.list()) == before   # no Sandbox object


async def test_async_run(akube):
    r = await akube.run(TEMPLATE, ["echo", "async"], timeout_seconds=30)
    assert (r.exit_code, r.stdout) == (0, "async\n")


def _service_account_kubeconfig(stack, sa):
    """A kubeconfig for a fresh token of ServiceAccount ``sa`` (made here)."""
    from kubernetes import client

    core = client.CoreV1Api(stack.api)
    core.create_namespaced_service_account(NS, {"metadata": {"name": sa}})
    tok = core.create_namespaced_service_account_token(
        sa, NS, {"spec": {"expirationSeconds": 3600}}).status.token
    with open(stack.kubeconfig) as f:
        cfg = yaml.safe_load(f)
    cfg["users"] = [{"name": sa, "user": {"token": tok}}]
    for ctx in cfg["contexts"]:
        ctx["context"]["user"] = sa
    path = os.path.join(stack.work, f"{sa}.kubeconfig")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def _grant(stack, sa, name, ns, rules):
    from kubernetes import client

    rbac = client.RbacAuthorizationV1Api(stack.api)
    rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": rules})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NS}]})


def test_run_needs_get_on_the_run_token_secret(stack):
    sa = "runner-" + uuid.uuid4().hex[:6]
    kc = _service_account_kubeconfig(stack, sa)
    _grant(stack, sa, sa + "-templates", NS, [
        {"apiGroups": ["kubicle.dev"], "resources": ["sandboxtemplates"], "verbs": ["get"]}])
    _grant(stack, sa, sa + "-leases", stack_mod.LEASE_NS, [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}])
    secret = _template(stack)["status"]["runTokenSecretName"]
    assert secret == TEMPLATE + "-run"
    with kubicle.Kubicle(kubeconfig=kc) as k:
        def refused():
            try:
                k.run(TEMPLATE, ["echo", "x"])
            except errors.AuthError as e:
                return e if e.status_code == 403 and f'secrets "{secret}" is forbidden' in e.message \
                    else None
            except errors.KubicleError:
                return None   # the bindings not in force yet: the template is refused too
            pytest.fail("ran without get on the run token's Secret")

        e = _until("the apiserver refuses the run token's Secret", refused, 30)
        assert e.message.startswith(f"read run-token Secret {secret}: ")
        _grant(stack, sa, sa + "-run", NS, [
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [secret],
             "verbs": ["get"]}])

        def ran():
            try:
                return k.run(TEMPLATE, ["echo", "granted"])
            except errors.AuthError:
                return None

        assert _until("a run once the Secret is granted", ran, 30).stdout == "granted\n"


def test_a_deleted_run_token_secret_revokes_the_token(stack, kube):
    from kubernetes import client

    t = _template(stack)
    secret, old_sha = t["status"]["runTokenSecretName"], t["status"]["runTokenSha256"]
    old = _secret_token(stack, secret)
    client.CoreV1Api(stack.api).delete_namespaced_secret(secret, NS)
    _until("the operator mints a new run token",
           lambda: (_template(stack)["status"].get("runTokenSha256") or old_sha) != old_sha)
    new = _secret_token(stack, secret)
    assert new and new != old

    def ran():
        try:   # the SDK reads the Secret on every run
            return kube.run(TEMPLATE, ["echo", "new", "token"])
        except errors.AuthError:
            return None   # until the node agent hands the node the new hash

    assert _until("a run with the new token", ran).stdout == "new token\n"
    node_template = _node_template(stack)
    with kubicle.Kubicle(node_url=stack.node_url, token=old, verify=stack.ca_file) as k:
        with pytest.raises(errors.AuthError) as e:
            k.run(node_template, ["echo", "x"])
        assert e.value.status_code == 401
    with kubicle.Kubicle(node_url=stack.node_url, token=new, verify=stack.ca_file) as k:
        assert k.run(node_template, ["echo", "x"]).stdout == "x\n"


GUEST_TIMEOUT = "connecting to 172.16.0.2:3000: no answer within 10000 ms"


def test_ports_reach_the_guests_address_through_the_node(kube):
    run = run_id()
    with kube.sandboxes.create(TEMPLATE, metadata={"run": run}) as sb, \
            kube.sandboxes.create(TEMPLATE, metadata={"run": run}) as other:
        with pytest.raises(errors.PortError) as e:
            sb.connect_port(3000, timeout=60)
        assert (e.value.reason, e.value.status_code) == ("PortTimeout", 504)
        assert GUEST_TIMEOUT in e.value.message
        # Only this Sandbox's token opens its ports: another's is refused
        # before the node connects anywhere.
        other.exec(["true"])
        own = sb._ref.token
        sb._ref.token = other._ref.token
        try:
            with pytest.raises(errors.AuthError) as e:
                sb.connect_port(3000, timeout=60)
            assert e.value.status_code == 401
        finally:
            sb._ref.token = own
        with sb.forward_port(3000, timeout=60) as fwd:
            c = socket.create_connection(("127.0.0.1", fwd.local_port), timeout=60)
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            try:
                end = c.recv(1)
            except ConnectionResetError:
                end = b""
            c.close()
            assert end == b""   # closed after the refusal, not timed out
            assert [(type(x), x.reason) for x in fwd.errors] == [(errors.PortError, "PortTimeout")]
            assert GUEST_TIMEOUT in fwd.errors[0].message
        sb.suspend()
        with pytest.raises(errors.ConflictError) as e:
            sb.connect_port(3000, timeout=60)
        assert e.value.status_code == 409 and "Suspended" in e.value.message


async def test_async_connect_port_reaches_the_guests_address(akube):
    sb = await akube.sandboxes.create(TEMPLATE, metadata={"run": run_id()})
    try:
        with pytest.raises(errors.PortError) as e:
            await sb.connect_port(3000, timeout=60)
        assert e.value.reason == "PortTimeout" and GUEST_TIMEOUT in e.value.message
    finally:
        await sb.delete()


def _node_state(stack, sb):
    import httpx

    r = httpx.get(f"{stack.node_url}/v1/sandboxes/{sb.id}", verify=stack.node_tls(),
                  headers={"Authorization": f"Bearer {stack.admin_token()}"})
    r.raise_for_status()
    return r.json()


def test_suspend_and_resume_keep_the_vms_memory_and_files(stack, kube):
    with kube.sandboxes.create(TEMPLATE, metadata={"run": run_id()}) as sb:
        # The test guest's files live in its RAM: they survive only if its
        # memory does.
        sb.filesystem.write("/work/kept", "before the suspend\n")
        vmm = _node_state(stack, sb)["vmmPid"]
        info = sb.suspend()
        assert info.phase == "Suspended"
        obj = _co(stack).get_namespaced_custom_object("kubicle.dev", "v1alpha1", NS,
                                                      "sandboxes", sb.name)
        assert obj["spec"]["suspend"] is True and obj["status"]["phase"] == "Suspended"
        assert _node_state(stack, sb)["state"] == "Suspended"
        _until("the VM process ends", lambda: not os.path.exists(f"/proc/{vmm}"), 30)
        with pytest.raises(errors.ConflictError):
            sb.exec(["echo", "hi"])
        with pytest.raises(errors.ConflictError):
            sb.filesystem.read("/work/kept")
        assert sb.suspend().phase == "Suspended"   # idempotent
        info = sb.resume()
        assert info.phase == "Running" and info.id == sb.id
        assert _node_state(stack, sb)["state"] == "Running"
        assert sb.filesystem.read("/work/kept") == "before the suspend\n"
        assert sb.exec(["cat", "/work/kept"]).stdout == "before the suspend\n"


async def test_async_suspend_and_resume(akube):
    sb = await akube.sandboxes.create(TEMPLATE, metadata={"run": run_id()})
    try:
        await sb.filesystem.write("/kept", "async")
        assert (await sb.suspend()).phase == "Suspended"
        with pytest.raises(errors.ConflictError):
            await sb.exec(["true"])
        assert (await sb.resume()).phase == "Running"
        assert (await sb.exec(["cat", "/kept"])).stdout == "async"
    finally:
        await sb.delete()
